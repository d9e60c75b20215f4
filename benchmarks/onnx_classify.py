"""A classify run against its ONNX export (`scratchformer export RUN --format onnx`), one thread each,
at batch 1 and batch 32, text in -> probabilities out (tokenization included on both sides).

Ours: `Classifier.load(RUN, blend=False).predict_proba` (torch, `torch.set_num_threads(1)`). The
export: `OnnxClassifier(DIR).predict_proba` (ONNX Runtime's CPU provider, `intra_op_num_threads=1`,
preprocess.py on `tokenizers`). Texts: the run's test split (the first 32 for batch 32, each of
the first 32 alone for batch 1). Interleaved in one process, medians of CPU time per call
(`time.process_time`: on a shared machine the wall clock counts other processes' turns too; the
wall-clock medians are beside them). Ratio = ours / ONNX Runtime (above 1: ONNX Runtime faster).
Outputs are compared (max |Δ probability|).

    python -m benchmarks.onnx_classify --run RUN --export DIR [--out DIR]
"""
from __future__ import annotations

import statistics
import time

import numpy as np
import torch

from . import common


def _timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.process_time() - c, time.perf_counter() - w


def run(quick: bool = False, out_dir=None, log=print, run_dir: str | None = None, export_dir: str | None = None) -> dict:
    from scratchformer.tasks.classify import Classifier, load_classification
    from scratchformer.tasks.classify.onnx_runtime import OnnxClassifier

    if not run_dir or not export_dir:
        raise SystemExit("give --run RUN and --export DIR (a folder written by `scratchformer export RUN --format onnx`)")
    torch.set_num_threads(1)
    ours = Classifier.load(run_dir, blend=False)
    ort = OnnxClassifier(export_dir, threads=1)
    texts = [t for t, _ in load_classification(ours.recipe.data).test if t.strip()][:32]
    reps = 3 if quick else 15
    cases = {"batch 1": [[t] for t in texts], "batch 32": [texts]}
    res = {"title": "A classify run vs its ONNX export (one thread)", "machine": common.machine_info(),
           "run": str(run_dir), "export": str(export_dir), "rows": []}
    import onnxruntime

    res["onnxruntime"] = onnxruntime.__version__
    for name, calls in cases.items():
        times = {"torch": ([], []), "onnxruntime": ([], [])}
        diff = 0.0
        engines = {"torch": ours.predict_proba, "onnxruntime": ort.predict_proba}
        for f in engines.values():  # warm-up
            f(calls[0])
        for rep in range(reps):
            order = ("torch", "onnxruntime") if rep % 2 == 0 else ("onnxruntime", "torch")
            outs = {}
            for eng in order:
                cpu = wall = 0.0
                got = []
                for batch in calls:
                    out, c, w = _timed(lambda: engines[eng](batch))
                    cpu, wall = cpu + c, wall + w
                    got.append(out)
                outs[eng] = np.concatenate(got)
                times[eng][0].append(cpu / len(calls) * 1e3)
                times[eng][1].append(wall / len(calls) * 1e3)
            diff = max(diff, float(np.abs(outs["torch"] - outs["onnxruntime"]).max()))
        row = {"case": name, "texts_per_call": len(calls[0]), "max_abs_prob_diff": diff,
               **{f"{e}_cpu_ms": statistics.median(times[e][0]) for e in times},
               **{f"{e}_wall_ms": statistics.median(times[e][1]) for e in times}}
        row["ratio_cpu"] = row["torch_cpu_ms"] / row["onnxruntime_cpu_ms"]
        res["rows"].append(row)
        log(f"[onnx_classify] {name}: torch {row['torch_cpu_ms']:.2f} ms CPU, onnxruntime "
            f"{row['onnxruntime_cpu_ms']:.2f} ms CPU per call ({row['ratio_cpu']:.2f}x), max |dp| {diff:.1e}")
    res["loadavg"] = open("/proc/loadavg").read().split()[:3]
    md = [common.header_md(res["title"], res["machine"], __doc__.split("\n\n")[1].replace("\n", " ")), "",
          f"run `{run_dir}`, export `{export_dir}`, onnxruntime {res['onnxruntime']}, load average {' '.join(res['loadavg'])}",
          "", common.md_table(["case", "torch ms CPU", "onnxruntime ms CPU", "torch / ort", "torch ms wall",
                               "ort ms wall", "max abs Δp"],
                              [[r["case"], f"{r['torch_cpu_ms']:.2f}", f"{r['onnxruntime_cpu_ms']:.2f}",
                                f"{r['ratio_cpu']:.2f}x", f"{r['torch_wall_ms']:.1f}", f"{r['onnxruntime_wall_ms']:.1f}",
                                f"{r['max_abs_prob_diff']:.1e}"] for r in res["rows"]])]
    common.write_result("onnx_classify", res, "\n".join(md), out_dir)
    return res


if __name__ == "__main__":
    common.cli(run, __doc__, options={"run_dir": ("--run", "the classify run"),
                                      "export_dir": ("--export", "its ONNX export folder")})
