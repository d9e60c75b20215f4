"""Batch-1 translation latency: the static compiled step against the lean step and CTranslate2
(part of translation_engines' family).

`DecodeConfig(static=True)` decodes through `nn.static.StaticDecoderStep` under torch.compile
(fixed shape buckets, K/V written in place, Inductor's C++ wrapper); `static_int8=True` with
weight-only int8 projections. Contenders, interleaved in one process, one thread, the hsk size of
translation_engines (same random weights for ours; CTranslate2 on a same-size MarianMTModel),
sentences decoded one at a time (batch 1), every hypothesis 30 tokens (<eos> banned):
  lean (fp32), lean_int8 (`quantize_int8`: dynamic int8), static (fp32), static_int8,
  ct2_fp32, ct2_int8.
Reported: ms per sentence (medians, min-max), ratios per repetition, the first compiled decode
of each static contender (its compile) and whether static and lean give the same tokens.

    python -m benchmarks.static_decode [--quick] [--out DIR] [--reps 7] [--threads 1]
"""
from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import torch

from scratchformer.data.tokenizers import EOS_ID
from scratchformer.nn import static
from scratchformer.nn.quant import quantize_int8
from scratchformer.tasks.translate.decoding import DecodeConfig, decode

from . import common
from .translation_engines import OUT_TOKENS, SIZES, ct2_model_dir, ct2_tokens, ours_model, sources

CELLS = ((1, 1), (1, 4), (1, 5))  # (batch, beam): beam 5 is the recipes' default
SENTENCES = 8
# (ours, anchor): ours' time per sentence over the anchor's is reported as anchor / ours
PAIRS = (("static", "lean"), ("static_int8", "lean"), ("static", "ct2_fp32"), ("static_int8", "ct2_int8"),
         ("static_int8", "ct2_fp32"), ("lean", "ct2_fp32"), ("lean_int8", "ct2_int8"))


def _no_eos(model):
    """The static step of `model` with <eos> banned too (as `NoEosSeq2Seq.decode` bans it)."""
    step = model.static_step
    model.static_step = lambda capacity, banned, int8=False: step(capacity, (*banned, EOS_ID), int8)
    return model


def run_cell(models: dict, ct2: dict, s: dict, beam: int, reps: int, threads: int) -> dict:
    src = sources(SENTENCES, s["vocab"], s["src_len"], seed=1)
    chunks = [src[i:i + 1] for i in range(SENTENCES)]
    base = DecodeConfig(beam=beam, max_len_ratio=0.0, max_len_offset=OUT_TOKENS, max_output_len=OUT_TOKENS)
    cfgs = {"lean": base, "lean_int8": base, "static": base.replace(static=True),
            "static_int8": base.replace(static=True, static_int8=True)}
    tokens: dict[str, list] = {}

    def ours(name):
        def f():
            with torch.inference_mode():
                tokens[name] = [h.tokens for c in chunks for h in decode(models[name], c, cfgs[name])]
        return f

    def anchor(name):
        tr, toks = ct2[name], [ct2_tokens(c) for c in chunks]

        def f():
            for t in toks:
                tr.translate_batch(t, beam_size=beam, min_decoding_length=OUT_TOKENS,
                                   max_decoding_length=OUT_TOKENS, max_batch_size=0)
        return f

    fns = {n: ours(n) for n in cfgs} | {n: anchor(n) for n in ct2}
    first = {}
    reload = {}
    for n in ("static", "static_int8"):  # the first decode of a new bucket compiles
        t0 = time.perf_counter()
        fns[n]()
        first[n] = time.perf_counter() - t0
        static._COMPILED.clear()  # as a new process: the stored package is loaded, not compiled
        t0 = time.perf_counter()
        fns[n]()
        reload[n] = time.perf_counter() - t0
    fns["lean"]()
    load = os.getloadavg()[0]
    times = common.interleaved(fns, reps, warmup=1)
    ms = {n: common.summary([t / SENTENCES * 1e3 for t in ts]) for n, ts in times.items()}
    return {"batch": 1, "beam": beam, "threads": threads, "sentences": SENTENCES,
            "output_tokens": {n: sum(map(len, t)) for n, t in tokens.items()},
            "static_same_tokens_as_lean": tokens["static"] == tokens["lean"],
            "static_int8_same_tokens_as_lean": sum(a == b for a, b in zip(tokens["static_int8"], tokens["lean"])),
            "first_decode_s": first, "reload_decode_s": reload, "loadavg_1min": [load, os.getloadavg()[0]],
            "ms_per_sentence": ms,
            "ratios": {f"{o}/{a}": common.paired_ratio(times[a], times[o]) for o, a in PAIRS
                       if o in times and a in times}}


def run(quick: bool = False, out_dir=None, log=print, reps_override=None, threads_override=None) -> dict:
    threads = int(threads_override) if threads_override else 1
    torch.set_num_threads(threads)
    s = dict(SIZES["hsk"], **(dict(d_model=32, d_ff=64, vocab=64) if quick else {}))
    reps = int(reps_override) if reps_override else (2 if quick else 7)
    fp32 = _no_eos(ours_model(s))
    models = {"lean": fp32, "static": fp32, "static_int8": fp32, "lean_int8": quantize_int8(ours_model(s))}
    res = {"title": "Batch-1 translation: the static compiled step vs the lean step and CTranslate2",
           "machine": common.machine_info(), "size": s, "threads": threads, "cells": []}
    ct2 = {}
    with tempfile.TemporaryDirectory() as tmp, common.env_var("SCRATCHFORMER_CACHE", str(Path(tmp) / "cache")):
        try:
            import ctranslate2
            d = ct2_model_dir(s, Path(tmp))
            ct2 = {f"ct2_{k}": ctranslate2.Translator(str(d), device="cpu", compute_type=ct,
                                                       intra_threads=threads, inter_threads=1)
                   for k, ct in (("fp32", "float32"), ("int8", "int8"))}
        except ImportError:
            log("[static_decode] ctranslate2 is not installed: ours only")
        for batch, beam in CELLS:
            r = run_cell(models, ct2, s, beam, reps, threads)
            res["cells"].append(r)
            m = r["ms_per_sentence"]
            log(f"[static_decode] beam {beam}: " + ", ".join(f"{n} {v['median']:.1f} ms" for n, v in m.items())
                + f"; first decodes {r['first_decode_s']}")
    res["targets"] = []
    common.write_result("static_decode", res, to_markdown(res), out_dir)
    return res


def to_markdown(res: dict) -> str:
    names = ["lean", "lean_int8", "static", "static_int8", "ct2_fp32", "ct2_int8"]
    rows = [[c["beam"]] + [common.fmt_stat(c["ms_per_sentence"].get(n), 3) for n in names]
            + ["–".join(f"{x:.1f}" for x in c["loadavg_1min"])] for c in res["cells"]]
    ratio_rows = [[c["beam"]] + [common.fmt_stat(c["ratios"].get(f"{o}/{a}"), 3, "×") for o, a in PAIRS]
                  for c in res["cells"]]
    other = [[c["beam"], ", ".join(f"{k} {v:.1f} s" for k, v in c["first_decode_s"].items()),
              ", ".join(f"{k} {v:.2f} s" for k, v in c.get("reload_decode_s", {}).items()),
              "yes" if c["static_same_tokens_as_lean"] else "**no**",
              f"{c['static_int8_same_tokens_as_lean']}/{c['sentences']}"] for c in res["cells"]]
    return "\n\n".join([
        common.header_md(res["title"], res["machine"],
                         f"hsk size, {res['threads']} thread(s), {SENTENCES} sentences decoded one at a time, "
                         f"{OUT_TOKENS} tokens each, interleaved, medians (min–max). ms per sentence:"),
        common.md_table(["beam"] + names + ["load (1 min)"], rows),
        "Speed ratios (the second's time over the first's, per repetition; above 1: the first is faster):",
        common.md_table(["beam"] + [f"{o} / {a}" for o, a in PAIRS], ratio_rows),
        common.md_table(["beam", "first decode (compile)", "first decode in a new process (load)", "static = lean tokens", "static_int8 = lean tokens"],
                        other)])


def main(argv=None):
    common.cli(run, __doc__, argv, {"reps_override": ("--reps", "repetitions per cell (default 7)"),
                                    "threads_override": ("--threads", "threads (default 1)")})


if __name__ == "__main__":
    main()
