"""Encoder forward against ONNX Runtime, one thread each, at small and large inputs (encoder.py's family).

Ours: `scratchformer.nn.Encoder` (d_model 256, 8 heads, d_ff 1024, 4 layers, Post-LN, dropout
0.1 in the config, eval + inference_mode). The anchor: the same module with the same weights
exported to ONNX (torch's exporter, the `F.linear` path, no padding mask) and run by ONNX
Runtime's CPU provider with `intra_op_num_threads=1`. Inputs: 1 x 32 and 32 x 128 tokens of
random embeddings, no padding. Interleaved in one process, medians; ratio = ORT time / ours
(above 1: ours faster). Outputs are checked equal (max abs difference printed). Also ours under
bfloat16 autocast (`ours_bf16`) and with a bfloat16 copy of the encoder (`ours_bf16w`: weights
and activations bf16, no autocast): what a CPU with bf16 units (AMX) offers. ONNX Runtime's CPU
provider runs this model in float32. Each bf16 row gives its largest difference from our float32 output.

    python -m benchmarks.encoder_engines [--quick] [--out DIR] [--cpu-time 1]
"""
from __future__ import annotations

import copy
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from scratchformer.nn import Encoder, TransformerConfig, use_onednn

from . import common

SHAPES = ((1, 32), (32, 128))


class _Plain(torch.nn.Module):
    """`enc(x)` with one positional input (what the exporter traces)."""

    def __init__(self, enc: Encoder):
        super().__init__()
        self.enc = enc

    def forward(self, x):
        return self.enc(x)


def export(enc: Encoder, x: torch.Tensor, path: Path) -> None:
    previous = use_onednn(False)  # the exporter traces F.linear, not the oneDNN kernel
    try:
        with torch.no_grad():
            torch.onnx.export(_Plain(enc).eval(), (x,), str(path), input_names=["x"], output_names=["y"],
                              dynamic_axes={"x": {0: "B", 1: "T"}, "y": {0: "B", 1: "T"}}, dynamo=False)
    finally:
        use_onednn(previous)


def run(quick: bool = False, out_dir=None, log=print, cpu_time=None) -> dict:
    import onnxruntime as ort

    torch.set_num_threads(1)
    size = dict(d_model=32, n_heads=4, d_ff=64, n_layers=1) if quick else dict(d_model=256, n_heads=8, d_ff=1024,
                                                                              n_layers=4)
    torch.manual_seed(0)
    enc = Encoder(TransformerConfig(**size, dropout=0.1)).eval()
    enc16 = copy.deepcopy(enc).to(torch.bfloat16)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = 1, 1
    res = {"title": "Encoder forward vs ONNX Runtime (one thread)", "machine": common.machine_info(),
           "onnxruntime": ort.__version__, "size": size, "shared_machine": True, "rows": [],
           "clock": "process CPU time" if cpu_time else "wall clock"}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "encoder.onnx"
        export(enc, torch.randn(2, 8, size["d_model"]), path)
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        for B, T in SHAPES:
            x = torch.randn(B, T, size["d_model"])
            xn = x.numpy()

            def ours():
                with torch.inference_mode():
                    return enc(x)

            def ours_bf16():
                with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
                    return enc(x)

            x16 = x.bfloat16()

            def ours_bf16w():
                with torch.inference_mode():
                    return enc16(x16)

            def onnx():
                return sess.run(None, {"x": xn})[0]

            diff = float(np.abs(ours().numpy() - onnx()).max())
            bf16_diff = float((ours_bf16().float() - ours()).abs().max())
            bf16w_diff = float((ours_bf16w().float() - ours()).abs().max())
            reps = 5 if quick else (40 if B * T <= 64 else 9)
            inner = 20 if B * T <= 64 else 1  # tiny calls: time 20 per repetition

            def many(f):
                return lambda: [f() for _ in range(inner)]

            load = os.getloadavg()[0]
            times = common.interleaved({"ours": many(ours), "ours_bf16": many(ours_bf16),
                                        "ours_bf16w": many(ours_bf16w), "onnxruntime": many(onnx)},
                                       reps, warmup=2,
                                       clock=time.process_time if cpu_time else time.perf_counter)
            tokens = B * T * inner
            r = {"batch": B, "tokens": T, "max_abs_diff": diff, "loadavg_1min": [load, os.getloadavg()[0]],
                 "tokens_per_s": {k: common.rate_summary(tokens, v) for k, v in times.items()},
                 "ours_vs_ort": common.paired_ratio(times["onnxruntime"], times["ours"]),
                 "ours_bf16_vs_ort": common.paired_ratio(times["onnxruntime"], times["ours_bf16"]),
                 "bf16_max_abs_diff": bf16_diff,
                 "ours_bf16w_vs_ort": common.paired_ratio(times["onnxruntime"], times["ours_bf16w"]),
                 "bf16w_max_abs_diff": bf16w_diff}
            log(f"[encoder_engines] {B}x{T}: ours/ORT {r['ours_vs_ort']['median']:.2f} (diff {diff:.1e}), "
                f"bf16/ORT {r['ours_bf16_vs_ort']['median']:.2f} (diff {bf16_diff:.1e}), "
                f"bf16 weights/ORT {r['ours_bf16w_vs_ort']['median']:.2f} (diff {bf16w_diff:.1e})")
            res["rows"].append(r)
    res["targets"] = [common.target(f"ours / ONNX Runtime at {r['batch']}x{r['tokens']}", r["ours_vs_ort"]["median"], 1.0)
                      for r in res["rows"]]
    res["targets"] += [common.target(f"ours bf16 {kind} / ONNX Runtime fp32 at {r['batch']}x{r['tokens']}",
                                     r[f"ours_{key}_vs_ort"]["median"], 1.0,
                                     note=f"other precision (max abs diff {r[f'{key}_max_abs_diff']:.1e} from fp32)")
                       for key, kind in (("bf16", "autocast"), ("bf16w", "weights")) for r in res["rows"]]
    common.write_result("encoder_engines", res, to_markdown(res), out_dir)
    return res


def to_markdown(res: dict) -> str:
    s = res["size"]
    parts = [common.header_md(res["title"], res["machine"],
                              f"Encoder d_model {s['d_model']}, {s['n_heads']} heads, d_ff {s['d_ff']}, {s['n_layers']} "
                              f"layers; ONNX Runtime {res['onnxruntime']} on the same weights (exported), one thread each, "
                              f"interleaved, medians (min–max), timed by the {res.get('clock', 'wall clock')}. "
                              + common.load_note([x for r in res["rows"] for x in r.get("loadavg_1min", [])]))]
    parts.append("## Targets\n\n" + common.targets_md(res["targets"]))
    rows = [[f"{r['batch']} × {r['tokens']}", common.fmt_stat(r["tokens_per_s"]["ours"]),
             common.fmt_stat(r["tokens_per_s"]["onnxruntime"]), common.fmt_stat(r["ours_vs_ort"], 3, "×"),
             f"{r['max_abs_diff']:.1e}", common.fmt_stat(r["tokens_per_s"].get("ours_bf16")),
             common.fmt_stat(r.get("ours_bf16_vs_ort"), 3, "×"),
             f"{r['bf16_max_abs_diff']:.1e}" if "bf16_max_abs_diff" in r else "–",
             common.fmt_stat(r["tokens_per_s"].get("ours_bf16w")), common.fmt_stat(r.get("ours_bf16w_vs_ort"), 3, "×"),
             f"{r['bf16w_max_abs_diff']:.1e}" if "bf16w_max_abs_diff" in r else "–",
             "–".join(f"{x:.1f}" for x in r.get("loadavg_1min", []))] for r in res["rows"]]
    parts.append("## Tokens/s\n\n" + common.md_table(["input", "ours (fp32)", "ONNX Runtime", "ours / ORT",
                                                      "max abs diff", "ours bf16 autocast", "bf16 / ORT",
                                                      "bf16 max abs diff from fp32", "ours bf16 weights",
                                                      "bf16 weights / ORT", "its max abs diff", "load (1 min)"], rows))
    return "\n\n".join(parts)


def main(argv=None):
    common.cli(run, __doc__, argv, {"cpu_time": ("--cpu-time", "time by process CPU time (any value), not the wall clock")})


if __name__ == "__main__":
    main()
