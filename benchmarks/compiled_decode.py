"""torch.compile of the lean decoding step against the eager lean step (part of translation_engines' family).

`DecodeConfig(compile=True)` runs the lean step (`Seq2SeqStep`: embedding, `nn.lean.DecoderStep`,
output projection) through one `torch.compile`d function (Inductor, dynamic shapes after the
first recompile). This benchmark decodes the same sources both ways, interleaved, one thread,
the hsk size of translation_engines (every hypothesis 30 tokens), and reports per repetition
eager time over compiled time (above 1: compiling wins), the first compiled decode's wall time
(compiling; Inductor's on-disk cache makes a second process faster) and whether the tokens agree.

    python -m benchmarks.compiled_decode [--quick] [--out DIR] [--reps 9]
"""
from __future__ import annotations

import os
import time

import torch

from scratchformer.tasks.translate.decoding import DecodeConfig, decode

from . import common
from .translation_engines import OUT_TOKENS, SIZES, ours_model, sources

CELLS = ((1, 1), (1, 4), (32, 1), (32, 4))


def run_cell(model, s: dict, batch: int, beam: int, reps: int) -> dict:
    n_src = 4 if batch == 1 else batch
    src = sources(n_src, s["vocab"], s["src_len"], seed=batch)
    chunks = [src[i:i + 1] for i in range(n_src)] if batch == 1 else [src]
    base = DecodeConfig(beam=beam, max_len_ratio=0.0, max_len_offset=OUT_TOKENS, max_output_len=OUT_TOKENS)
    cfgs = {"eager": base, "compiled": base.replace(compile=True)}

    def fn(name):
        def f():
            with torch.inference_mode():
                return [h.tokens for c in chunks for h in decode(model, c, cfgs[name])]
        return f

    fns = {n: fn(n) for n in cfgs}
    t0 = time.perf_counter()
    compiled_tokens = fns["compiled"]()  # compiles (or recompiles for this cell's shapes)
    first = time.perf_counter() - t0
    same = compiled_tokens == fns["eager"]()
    load = os.getloadavg()[0]
    times = common.interleaved(fns, reps, warmup=1)
    steps = len(chunks) * OUT_TOKENS
    return {"batch": batch, "beam": beam, "same_tokens": same, "first_compiled_decode_s": first,
            "loadavg_1min": [load, os.getloadavg()[0]],
            "ms_per_step": {n: common.summary([t / steps * 1e3 for t in ts]) for n, ts in times.items()},
            "eager_over_compiled": common.paired_ratio(times["eager"], times["compiled"])}


def run(quick: bool = False, out_dir=None, log=print, reps_override=None) -> dict:
    torch.set_num_threads(1)
    s = dict(SIZES["hsk"], **(dict(d_model=32, d_ff=64, vocab=64) if quick else {}))
    model = ours_model(s)
    reps = int(reps_override) if reps_override else (2 if quick else 9)
    res = {"title": "torch.compile of the lean decoding step vs eager (every hypothesis 30 tokens)",
           "machine": common.machine_info(), "size": s, "threads": 1, "cells": []}
    for batch, beam in CELLS:
        r = run_cell(model, s, batch, beam, reps)
        res["cells"].append(r)
        log(f"[compiled_decode] b{batch} beam{beam}: eager/compiled {r['eager_over_compiled']['median']:.2f}, "
            f"first decode {r['first_compiled_decode_s']:.1f}s, same tokens {r['same_tokens']}")
    res["targets"] = []  # a measurement that decides a default, no goal of its own
    common.write_result("compiled_decode", res, to_markdown(res), out_dir)
    return res


def to_markdown(res: dict) -> str:
    rows = [[c["batch"], c["beam"], common.fmt_stat(c["ms_per_step"]["eager"]),
             common.fmt_stat(c["ms_per_step"]["compiled"]), common.fmt_stat(c["eager_over_compiled"], 3, "×"),
             f"{c['first_compiled_decode_s']:.1f}", "yes" if c["same_tokens"] else "**no**",
             "–".join(f"{x:.1f}" for x in c["loadavg_1min"])] for c in res["cells"]]
    return "\n\n".join([
        common.header_md(res["title"], res["machine"],
                         "Ours (lean step) eager and under `torch.compile` (Inductor, `dynamic=None`), hsk size, "
                         "one thread, interleaved, medians (min–max). Above 1: the compiled step is faster. "
                         "`DecodeConfig(compile=True)` turns it on; it stays off by default unless it wins here."),
        common.md_table(["batch", "beam", "eager ms/step", "compiled ms/step", "eager / compiled",
                         "first compiled decode (s)", "same tokens", "load (1 min)"], rows)])


def main(argv=None):
    common.cli(run, __doc__, argv, {"reps_override": ("--reps", "repetitions per cell (default 9)")})


if __name__ == "__main__":
    main()
