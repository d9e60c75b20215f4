"""int8 against float32 on real test sets: BLEU (sacrebleu) of trained translators, accuracy of a
trained classifier, and the time each took, the two loaded from the same run folder.

    python -m benchmarks.int8_quality --hsk RUN [--hsk RUN2 ...] --enfr RUN --thucnews RUN [--out DIR]
        [--sentences N] [--shared-machine]

Each run is loaded twice (`quantize=None` and `quantize='int8'`), both evaluate the same test
split (translation: the first N test sentences, the run's decode settings; classification: the
whole test split); the two evaluations alternate (fp32, int8, fp32, int8) and the times are medians.
Translation decodes the float model with `precision="fp32"` (not "auto", which may pick bf16 on a
CPU with bf16 units) and, with `--bf16`, also with `precision="bf16"` (a bfloat16 copy of the model): what
"auto" would give there, and at what BLEU.
The runs are whatever the caller trained: say in the notes how (a short recipe is not the full one).
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from . import common


def _timed(fn, reps: int = 2):
    out, times = None, []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return out, statistics.median(times)


def translation(run: str, sentences: int, beam: int | None, bf16: bool = False) -> dict:
    from scratchformer.tasks.translate import Translator, load_translation

    fp32, int8 = Translator.load(run), Translator.load(run, quantize="int8")
    pairs = load_translation(fp32.recipe.data).test[:sentences]
    res = {"run": run, "sentences": len(pairs), "decode": fp32.decode_config(beam=beam).to_dict()}
    contenders = [("fp32", fp32, "fp32"), ("int8", int8, "fp32")] + ([("bf16", fp32, "bf16")] if bf16 else [])
    for name, tr, precision in contenders:
        rep, secs = _timed(lambda tr=tr, p=precision: tr.evaluate(pairs, beam=beam, precision=p))
        res[name] = {"bleu": rep["bleu"], "chrf": rep["chrf"], "signature": rep["bleu_signature"], "seconds": secs}
    for name in [c[0] for c in contenders[1:]]:
        res[f"{name}_bleu_delta"] = res[name]["bleu"] - res["fp32"]["bleu"]
        res[f"{name}_speedup"] = res["fp32"]["seconds"] / res[name]["seconds"]
    res["bleu_delta"], res["speedup"] = res["int8_bleu_delta"], res["int8_speedup"]
    return res


def classification(run: str) -> dict:
    from scratchformer.tasks.classify import Classifier
    from scratchformer.tasks.classify.data import load_classification

    fp32 = Classifier.load(run, blend=False)
    int8 = Classifier.load(run, blend=False, quantize="int8")
    pairs = load_classification(fp32.recipe.data).test
    res = {"run": run, "texts": len(pairs)}
    for name, clf in (("fp32", fp32), ("int8", int8)):
        rep, secs = _timed(lambda clf=clf: clf.evaluate(pairs))
        res[name] = {"accuracy": rep["accuracy"], "macro_f1": rep.get("macro_f1"), "seconds": secs}
    res["accuracy_points_delta"] = 100 * (res["int8"]["accuracy"] - res["fp32"]["accuracy"])
    res["speedup"] = res["fp32"]["seconds"] / res["int8"]["seconds"]
    return res


def to_markdown(res: dict) -> str:
    parts = [common.header_md("int8 vs float32 on real test sets", res["machine"],
                              "The same run folder loaded twice (float32, `quantize='int8'`), the same test split; "
                              "median of 2 timed evaluations each. " + res.get("runs_note", "")
                              + (" **Other jobs ran on the machine meanwhile.**" if res.get("shared_machine")
                                 else " Nothing else ran on the machine."))]
    rows = []
    for name in ("hsk", "enfr"):
        for r in res.get(name) or []:
            rows.append([f"{name} (`{Path(r['run']).name}`)", r["sentences"], f"{r['fp32']['bleu']:.2f}", f"{r['int8']['bleu']:.2f}",
                         f"{r['bleu_delta']:+.2f}", f"{r['fp32']['chrf']:.1f} / {r['int8']['chrf']:.1f}",
                         f"{r['speedup']:.2f}×"])
    if rows:
        parts.append("## Translation (sacrebleu corpus BLEU)\n\n" + common.md_table(
            ["test set", "sentences", "BLEU fp32", "BLEU int8", "Δ BLEU", "chrF fp32 / int8", "int8 speed-up"], rows))
        bf16_rows = [[f"{name} (`{Path(r['run']).name}`)", r["sentences"], f"{r['fp32']['bleu']:.2f}",
                      f"{r['bf16']['bleu']:.2f}", f"{r['bf16_bleu_delta']:+.2f}",
                      f"{r['fp32']['chrf']:.1f} / {r['bf16']['chrf']:.1f}", f"{r['bf16_speedup']:.2f}×"]
                     for name in ("hsk", "enfr") for r in res.get(name) or [] if "bf16" in r]
        if bf16_rows:
            parts.append("### bfloat16 (a bf16 copy of the model) against float32\n\n" + common.md_table(
                ["test set", "sentences", "BLEU fp32", "BLEU bf16", "Δ BLEU", "chrF fp32 / bf16", "bf16 speed-up"],
                bf16_rows))
        sig = next(res[n][0]["fp32"]["signature"] for n in ("hsk", "enfr") if res.get(n))
        parts.append(f"BLEU signature: `{sig}`")
    r = res.get("thucnews")
    if r:
        parts.append("## Classification (THUCNews test)\n\n" + common.md_table(
            ["texts", "accuracy fp32", "accuracy int8", "Δ points", "int8 speed-up"],
            [[r["texts"], f"{100 * r['fp32']['accuracy']:.2f}%", f"{100 * r['int8']['accuracy']:.2f}%",
              f"{r['accuracy_points_delta']:+.2f}", f"{r['speedup']:.2f}×"]]))
    return "\n\n".join(parts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hsk", action="append", default=[], help="a trained hsk run (repeatable)")
    ap.add_argument("--enfr", action="append", default=[], help="a trained en-fr run (repeatable)")
    ap.add_argument("--thucnews")
    ap.add_argument("--sentences", type=int, default=400)
    ap.add_argument("--beam", type=int, default=None, help="default: the run's decode.beam")
    ap.add_argument("--bf16", action="store_true", help="also decode with precision=\"bf16\" (a bfloat16 copy of the model)")
    ap.add_argument("--note", default="", help="how the runs were trained (goes into the Markdown)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--shared-machine", action="store_true", help="say in the Markdown that other jobs ran")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    res = {"machine": common.machine_info(), "runs_note": a.note, "shared_machine": a.shared_machine}
    if a.thucnews:
        res["thucnews"] = classification(a.thucnews)
        print(res["thucnews"])
    for name in ("hsk", "enfr"):
        for run in getattr(a, name):
            res.setdefault(name, []).append(translation(run, a.sentences, a.beam, a.bf16))
            print(name, res[name][-1])
    common.write_result("int8_quality", res, to_markdown(res), a.out)


if __name__ == "__main__":
    main()
