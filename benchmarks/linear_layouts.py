"""The kernels of a few-row inference product on this CPU: what `nn.fast_linear`'s rules assume.

`nn.fast_linear` picks a kernel for each inference product by two rules measured on one machine:
`transposed_wins` (the weight stored `(in, out)` and read by `x @ W_T` when out > in and rows <= 32)
and `inference_min_rows` (MKL below 128 rows on AVX-512, oneDNN above). This benchmark measures
them again on the machine it runs on, for the projections of the translation recipes' decode
step and encoder, so that a new CPU shows at once whether the rules still hold:
  - `F.linear`  : MKL's sgemm, weight `(out, in)`;
  - `transposed`: `x @ W_T`, weight stored `(in, out)` (`transposed_copy`);
  - `onednn`    : `mkldnn._linear_pointwise` (oneDNN);
  - `bf16`      : `F.linear` on bfloat16 input and weight (oneDNN; AMX where the CPU has it);
  - `int8`      : `quant.Int8Linear` (dynamic int8, the quantized engine).
Sixteen weights of a shape in rotation, as a decode step reads its ~13 MB of weights, so each
call streams its weight from beyond the L2 cache. One thread. Times are medians over
repetitions of 64 calls; ratios are F.linear's time over the contender's (above 1: faster).

    python -m benchmarks.linear_layouts [--quick] [--out DIR]
"""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from scratchformer.nn import fast_linear
from scratchformer.nn.quant import Int8Linear

from . import common

# (out, in): fused qkv, attention output, cross K/V, FFN up, FFN down, the hsk and en-fr outputs
SHAPES = ((768, 256), (256, 256), (512, 256), (1024, 256), (256, 1024), (2000, 256), (8000, 256))
ROWS = (1, 4, 32, 128)
N_WEIGHTS = 16


def _contenders(weights: list[torch.Tensor], rows: int) -> dict:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(rows, weights[0].shape[1], generator=g)
    xb = x.bfloat16()
    wt = [w.t().contiguous() for w in weights]
    wb = [w.bfloat16() for w in weights]
    q = [Int8Linear(w, None) for w in weights]
    kernel = fast_linear._KERNEL
    out = {"F.linear": lambda i: F.linear(x, weights[i]), "transposed": lambda i: torch.mm(x, wt[i]),
           "bf16": lambda i: F.linear(xb, wb[i]), "int8": lambda i: q[i](x)}
    if kernel is not None:
        out["onednn"] = lambda i: kernel(x, weights[i], None, "none", [], "")
    return out


def run_shape(out_f: int, in_f: int, rows: int, reps: int, calls: int) -> dict:
    g = torch.Generator().manual_seed(0)
    n = max(1, min(N_WEIGHTS, (64 << 20) // (out_f * in_f * 4)))  # at most 64 MB of weights
    weights = [torch.randn(out_f, in_f, generator=g) / in_f ** 0.5 for _ in range(n)]
    kernels = _contenders(weights, rows)

    def loop(k):
        def f():
            for j in range(calls):
                k(j % n)
        return f

    with torch.inference_mode():
        times = common.interleaved({name: loop(k) for name, k in kernels.items()}, reps, warmup=1)
    base = times["F.linear"]
    bytes_fp32 = out_f * in_f * 4
    return {"out": out_f, "in": in_f, "rows": rows, "weights_in_rotation": n,
            "us_per_call": {k: common.summary([t / calls * 1e6 for t in ts]) for k, ts in times.items()},
            "fp32_weight_gb_per_s": common.summary([bytes_fp32 * calls / t / 1e9 for t in base]),
            "speedup_vs_F.linear": {k: common.paired_ratio(base, ts) for k, ts in times.items() if k != "F.linear"},
            "rule_transposed": fast_linear.transposed_wins(out_f, in_f, rows),
            "rule_onednn": rows >= fast_linear.inference_min_rows()}


def run(quick: bool = False, out_dir=None, log=print) -> dict:
    torch.set_num_threads(1)
    shapes, rows_list = (((96, 32), (32, 96)), (1, 8)) if quick else (SHAPES, ROWS)
    reps, calls = (2, 8) if quick else (7, 64)
    res = {"title": "Few-row inference products: F.linear, transposed weight, oneDNN, bf16, int8",
           "machine": common.machine_info(), "cells": []}
    t0 = time.perf_counter()
    for out_f, in_f in shapes:
        for rows in rows_list:
            c = run_shape(out_f, in_f, rows, reps, calls)
            res["cells"].append(c)
            sp = c["speedup_vs_F.linear"]
            log(f"[layouts] ({out_f}, {in_f}) x {rows} rows: F.linear {c['us_per_call']['F.linear']['median']:.1f} us; "
                + ", ".join(f"{k} {v['median']:.2f}x" for k, v in sp.items()))
    res["seconds"] = time.perf_counter() - t0
    res["rule_check"] = rule_check(res["cells"])
    common.write_result("linear_layouts", res, to_markdown(res), out_dir)
    return res


def rule_check(cells: list[dict]) -> dict:
    """Where the transposed rule chose the slower layout (by more than 5%): the cells to re-tune."""
    wrong = []
    for c in cells:
        s = c["speedup_vs_F.linear"]["transposed"]["median"]
        if (c["rule_transposed"] and s < 0.95) or (not c["rule_transposed"] and s > 1.05):
            wrong.append(f"({c['out']}, {c['in']}) x {c['rows']}: rule says "
                         f"{'transposed' if c['rule_transposed'] else 'F.linear'}, transposed measured {s:.2f}x")
    return {"cells": len(cells), "rule_wrong": wrong}


def to_markdown(res: dict) -> str:
    parts = [common.header_md(res["title"], res["machine"],
                              f"One thread; {N_WEIGHTS} weights of a shape in rotation (streamed from beyond L2, as in "
                              "a decode step); 64 calls per repetition; medians (min–max). Speed-ups are F.linear's "
                              "time over the contender's (above 1: faster). \"rule\" = what `nn.fast_linear` picks.")]
    rows = []
    for c in res["cells"]:
        sp, us = c["speedup_vs_F.linear"], c["us_per_call"]
        rule = ("transposed" if c["rule_transposed"] else "onednn" if c["rule_onednn"] else "F.linear")
        rows.append([f"({c['out']}, {c['in']})", c["rows"], common.fmt_stat(us["F.linear"], 3),
                     common.fmt_num(c["fp32_weight_gb_per_s"]["median"], 3)]
                    + [common.fmt_stat(sp[k], 3, "×") if k in sp else "–" for k in ("transposed", "onednn", "bf16", "int8")]
                    + [rule])
    parts.append(common.md_table(["weight (out, in)", "rows", "F.linear µs", "F.linear GB/s", "transposed", "oneDNN",
                                  "bf16", "int8", "rule"], rows))
    wrong = res["rule_check"]["rule_wrong"]
    parts.append("## The transposed rule on this machine\n\n" + (
        "It chose the faster layout (within 5%) in every cell." if not wrong else
        f"It chose the slower layout in {len(wrong)} of {res['rule_check']['cells']} cells:\n\n"
        + "\n".join(f"- {w}" for w in wrong)))
    return "\n\n".join(parts)


def main(argv=None):
    common.cli(run, __doc__, argv)


if __name__ == "__main__":
    main()
