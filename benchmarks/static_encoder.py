"""The static compiled encoder against the eager one and ONNX Runtime fp32, at small and large
inputs, one and two threads (encoder_engines.py's family; issue 53 item 4).

Contenders, on the same weights (encoder_engines' model: d_model 256, 8 heads, d_ff 1024, 4
layers, Post-LN, eval), random embeddings, no padding mask:
  eager      `Encoder(x)` under inference_mode (what `encode` runs today);
  static     `nn.static_encoder.static_encode(enc, x)`: padded to its bucket, one frozen Inductor
             graph per bucket with oneDNN-packed weights (the first call compiles: its seconds are
             reported per bucket). Above `static_encoder.MAX_TOKENS` the library runs the eager
             encoder; here the limit is lifted so that the compiled one is measured everywhere;
  onnxruntime the encoder exported to ONNX (encoder_engines.export), CPU provider, fp32, with
             `intra_op_num_threads` = the thread count.
Interleaved in one process, medians (min–max); ratios per repetition (above 1: the first is
faster). The outputs are checked equal (max abs difference from eager printed).

    python -m benchmarks.static_encoder [--quick] [--out DIR] [--threads 1,2]
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import torch

from scratchformer.nn import Encoder, TransformerConfig, static_encoder

from . import common
from .encoder_engines import export

# the two inputs of the target, and between them the sizes that place MAX_TOKENS
SHAPES = ((1, 32), (1, 64), (4, 32), (8, 64), (32, 128))
PAIRS = (("static", "onnxruntime"), ("eager", "onnxruntime"), ("static", "eager"))


def _cell(enc, sess, B: int, T: int, d: int, quick: bool) -> dict:
    x = torch.randn(B, T, d)
    xn = x.numpy()

    def eager():
        with torch.inference_mode():
            return enc(x)

    def static():
        with torch.inference_mode():
            return static_encode_forced(enc, x)

    def onnx():
        return sess.run(None, {"x": xn})[0]

    t0 = time.perf_counter()
    first = static()  # compiles this bucket (or finds it compiled)
    first_s = time.perf_counter() - t0
    ref = eager()
    diffs = {"static": float((first - ref).abs().max()),
             "onnxruntime": float((torch.from_numpy(onnx()) - ref).abs().max())}
    small = B * T <= 128
    reps = 5 if quick else (15 if small else 7)
    inner = 20 if small else 1  # tiny calls: time 20 per repetition

    def many(f):
        return lambda: [f() for _ in range(inner)]

    load = os.getloadavg()[0]
    times = common.interleaved({"eager": many(eager), "static": many(static), "onnxruntime": many(onnx)},
                               reps, warmup=2)
    r = {"batch": B, "tokens": T, "bucket": [static_encoder.bucket(B), static_encoder.bucket(T, 8)],
         "first_call_s": first_s, "max_abs_diff_from_eager": diffs,
         "loadavg_1min": [load, os.getloadavg()[0]],
         "ms": {k: common.summary([t / inner * 1e3 for t in v]) for k, v in times.items()},
         "ratios": {f"{a}_vs_{b}": common.paired_ratio(times[b], times[a]) for a, b in PAIRS}}
    return r


def static_encode_forced(enc, x):
    """`static_encode` with the size limit lifted (the benchmark measures the compiled encoder
    where the library would run the eager one)."""
    limit = static_encoder.MAX_TOKENS
    static_encoder.MAX_TOKENS = 1 << 30
    try:
        return static_encoder.static_encode(enc, x)
    finally:
        static_encoder.MAX_TOKENS = limit


def run(quick: bool = False, out_dir=None, log=print, threads="1,2") -> dict:
    import onnxruntime as ort

    size = dict(d_model=32, n_heads=4, d_ff=64, n_layers=1) if quick else dict(d_model=256, n_heads=8, d_ff=1024,
                                                                              n_layers=4)
    shapes = SHAPES[:1] if quick else SHAPES
    counts = [int(t) for t in str(threads or "1,2").split(",")]
    torch.manual_seed(0)
    enc = Encoder(TransformerConfig(**size, dropout=0.1, norm_first=False)).eval()
    res = {"title": "Static compiled encoder vs eager and ONNX Runtime fp32", "machine": common.machine_info(),
           "onnxruntime": ort.__version__, "size": size, "max_tokens": static_encoder.MAX_TOKENS,
           "clock": "wall clock", "rows": []}
    before = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "encoder.onnx"
        export(enc, torch.randn(2, 8, size["d_model"]), path)
        for n in counts:
            torch.set_num_threads(n)
            opts = ort.SessionOptions()
            opts.intra_op_num_threads, opts.inter_op_num_threads = n, 1
            sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
            for B, T in shapes:
                r = _cell(enc, sess, B, T, size["d_model"], quick)
                r["threads"] = n
                ms, q = r["ms"], r["ratios"]
                log(f"[static_encoder] {n} thread(s) {B}x{T}: eager {ms['eager']['median']:.3f} ms, static "
                    f"{ms['static']['median']:.3f} ms, ORT {ms['onnxruntime']['median']:.3f} ms; static/ORT "
                    f"{q['static_vs_onnxruntime']['median']:.2f}x, eager/ORT {q['eager_vs_onnxruntime']['median']:.2f}x, "
                    f"static/eager {q['static_vs_eager']['median']:.2f}x; first call {r['first_call_s']:.1f} s; "
                    f"load {r['loadavg_1min'][0]:.1f}")
                res["rows"].append(r)
    torch.set_num_threads(before)
    res["targets"] = []
    for r in res["rows"]:
        if (r["batch"], r["tokens"]) == (1, 32):
            res["targets"].append(common.target(f"static / ONNX Runtime fp32 at 1x32, {r['threads']} thread(s)",
                                                r["ratios"]["static_vs_onnxruntime"]["median"], 1.0))
        if (r["batch"], r["tokens"]) == (32, 128):
            best = max(r["ratios"]["static_vs_onnxruntime"]["median"], r["ratios"]["eager_vs_onnxruntime"]["median"])
            res["targets"].append(common.target(f"best of ours / ONNX Runtime fp32 at 32x128, {r['threads']} thread(s)",
                                                best, 1.2))
    common.write_result("static_encoder", res, to_markdown(res), out_dir)
    return res


def to_markdown(res: dict) -> str:
    s = res["size"]
    parts = [common.header_md(res["title"], res["machine"],
                              f"Encoder d_model {s['d_model']}, {s['n_heads']} heads, d_ff {s['d_ff']}, {s['n_layers']} "
                              f"layers, Post-LN; ONNX Runtime {res['onnxruntime']} on the same weights; interleaved, "
                              f"medians (min–max) of ms per call; ratios per repetition (above 1: the first faster). "
                              f"The library runs the compiled encoder up to {res['max_tokens']} padded tokens "
                              "(`static_encoder.MAX_TOKENS`); above it this table measures it anyway. "
                              + common.load_note([x for r in res["rows"] for x in r["loadavg_1min"]]))]
    parts.append("## Targets\n\n" + common.targets_md(res["targets"]))
    rows = [[str(r["threads"]), f"{r['batch']} × {r['tokens']}", f"{r['bucket'][0]} × {r['bucket'][1]}",
             common.fmt_stat(r["ms"]["eager"]), common.fmt_stat(r["ms"]["static"]),
             common.fmt_stat(r["ms"]["onnxruntime"]),
             common.fmt_stat(r["ratios"]["static_vs_onnxruntime"], 3, "×"),
             common.fmt_stat(r["ratios"]["eager_vs_onnxruntime"], 3, "×"),
             common.fmt_stat(r["ratios"]["static_vs_eager"], 3, "×"),
             f"{r['first_call_s']:.1f}",
             f"{r['max_abs_diff_from_eager']['static']:.1e} / {r['max_abs_diff_from_eager']['onnxruntime']:.1e}",
             "–".join(f"{x:.1f}" for x in r["loadavg_1min"])] for r in res["rows"]]
    parts.append("## ms per call\n\n" + common.md_table(
        ["threads", "input", "bucket", "eager", "static (compiled)", "ONNX Runtime", "static / ORT", "eager / ORT",
         "static / eager", "first static call, s (the compile)", "max abs diff from eager: static / ORT",
         "load (1 min)"], rows))
    return "\n\n".join(parts)


def main(argv=None):
    common.cli(run, __doc__, argv, {"threads": ("--threads", "thread counts, comma-separated (default 1,2)")})


if __name__ == "__main__":
    main()
