"""Translation decoding against CTranslate2, and op calls per output token (part of translation.py's family).

The anchor: CTranslate2 (the engine behind OpenNMT deployments) on a same-size random
`transformers` MarianMTModel converted with CTranslate2's own converter (`TransformersConverter`;
the converter wants a tokenizer only for the token strings, so a stub gives `t0 .. tV-1`), fp32
and int8. Ours: `Seq2Seq` of the same sizes (Post-LN, ReLU, tied output, dropout 0) as
`NoEosSeq2Seq` (translation.py), so every hypothesis of every engine runs to exactly 30 tokens
(CTranslate2: `min_decoding_length = max_decoding_length = 30`).

Sizes: hsk (d_model 256, 4 heads, d_ff 1024, 3+3 layers, vocabulary 2000, sources ~9 tokens)
and en-fr (4+3 layers, vocabulary 8000, sources ~20 tokens), random ids, ragged, right-padded.
Contenders, interleaved in one process with the same number of threads (1, then 2):
  ours (lean step, fp32), ours_readable (`DecodeConfig(lean=False)`: the code before the lean
  step), ours_int8 (lean, `quantize_int8`), ours_bf16 (lean, a bfloat16 copy of the model: what
  `precision="bf16"` runs), ct2_fp32, ct2_int8 (CTranslate2 has no bfloat16 on the CPU).
Each cell also records what `precision="auto"` (the default of `translate`) picks for its size.
Batch 1: one call decodes 4 sentences one at a time; batch 32: one call of 32 sentences.
Ratios are ours' tokens/s over the anchor's, per repetition, medians (min-max).

Op calls: a `TorchDispatchMode` counts every aten op a decode dispatches (hsk size, one thread),
divided by the output tokens, for the readable and the lean path.

    python -m benchmarks.translation_engines [--quick] [--out DIR] [--sizes hsk] [--reps 3] [--threads 1]
"""
from __future__ import annotations

import collections
import copy
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from scratchformer.data.batching import pad_sequences
from scratchformer.data.tokenizers import EOS_ID, NUM_SPECIALS, PAD_ID
from scratchformer.models.seq2seq import Seq2SeqConfig
from scratchformer.nn import TransformerConfig
from scratchformer.nn.quant import quantize_int8
from scratchformer.tasks.translate.decoding import DecodeConfig, choose_precision, decode

from . import common
from .translation import NoEosSeq2Seq

OUT_TOKENS = 30
SIZES = {
    "hsk": dict(d_model=256, n_heads=4, d_ff=1024, n_layers=3, n_decoder_layers=3, vocab=2000, src_len=8.4),
    "en-fr": dict(d_model=256, n_heads=4, d_ff=1024, n_layers=4, n_decoder_layers=3, vocab=8000, src_len=18.0),
}


class OpCounter(TorchDispatchMode):
    """Counts the aten ops dispatched inside it (after autograd: what the kernels see)."""

    def __init__(self):
        super().__init__()
        self.n = 0
        self.by_op: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        self.by_op[str(func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))


def sources(n: int, vocab: int, mean_len: float, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    lengths = np.clip(np.rint(rng.lognormal(np.log(mean_len), 0.22, n)), 3, 60).astype(int)
    seqs = [rng.integers(NUM_SPECIALS, vocab, int(k)).tolist() + [EOS_ID] for k in lengths]
    return pad_sequences(seqs, PAD_ID)[0]


def ours_model(s: dict, seed: int = 0) -> NoEosSeq2Seq:
    torch.manual_seed(seed)
    tc = TransformerConfig(d_model=s["d_model"], n_heads=s["n_heads"], d_ff=s["d_ff"], n_layers=s["n_layers"],
                           n_decoder_layers=s["n_decoder_layers"], dropout=0.0, norm_first=False)
    return NoEosSeq2Seq(Seq2SeqConfig(src_vocab_size=s["vocab"], tgt_vocab_size=s["vocab"], transformer=tc,
                                      share_embeddings=True, tie_output=True)).eval()


def ct2_model_dir(s: dict, root: Path) -> Path:
    """A random MarianMTModel of size `s`, converted by CTranslate2's converter (fp32 files;
    int8 is chosen at load time with `compute_type`)."""
    import ctranslate2
    import transformers

    V = s["vocab"]
    cfg = transformers.MarianConfig(
        vocab_size=V, d_model=s["d_model"], encoder_layers=s["n_layers"], decoder_layers=s["n_decoder_layers"],
        encoder_attention_heads=s["n_heads"], decoder_attention_heads=s["n_heads"], encoder_ffn_dim=s["d_ff"],
        decoder_ffn_dim=s["d_ff"], activation_function="relu", max_position_embeddings=256, pad_token_id=V - 1,
        eos_token_id=0, decoder_start_token_id=V - 1, scale_embedding=True, share_encoder_decoder_embeddings=True)
    torch.manual_seed(0)
    hf_dir, out = root / "marian", root / "ct2"
    transformers.MarianMTModel(cfg).eval().save_pretrained(hf_dir)

    class StubTokenizer:  # token strings only: t0 (= </s>) .. t{V-1} (= <pad>)
        eos_token, unk_token = "t0", "t1"

        def get_vocab(self):
            return {f"t{i}": i for i in range(V - 1)} | {"<pad>": V - 1}

    class Converter(ctranslate2.converters.TransformersConverter):
        def load_tokenizer(self, tokenizer_class, model_name_or_path, **kwargs):
            return StubTokenizer()

    Converter(str(hf_dir)).convert(str(out), force=True)
    return out


def ct2_tokens(src: torch.Tensor) -> list[list[str]]:
    """Our ids -> CTranslate2 token strings (<eos> = t0, as in the Marian vocabulary above)."""
    return [[f"t{0 if i == EOS_ID else i}" for i in row if i != PAD_ID] for row in src.tolist()]


def count_ops(model, src: torch.Tensor, cfg: DecodeConfig) -> dict:
    with torch.inference_mode():
        decode(model, src, cfg)  # warm caches (sinusoid tables, kernels)
        with OpCounter() as c:
            hyps = decode(model, src, cfg)
    tokens = sum(len(h.tokens) for h in hyps)
    top = c.by_op.most_common(6)
    return {"ops": c.n, "output_tokens": tokens, "ops_per_token": c.n / tokens, "ops_per_step": c.n / OUT_TOKENS,
            "top_ops_per_token": {k: v / tokens for k, v in top}}


def op_counts(quick: bool) -> dict:
    s = dict(SIZES["hsk"], **(dict(d_model=32, d_ff=64, vocab=64) if quick else {}))
    model = ours_model(s)
    torch.set_num_threads(1)
    res = {}
    for batch in (1, 32):
        src = sources(batch, s["vocab"], s["src_len"], seed=1)
        for beam in (1, 4):
            base = DecodeConfig(beam=beam, max_len_ratio=0.0, max_len_offset=OUT_TOKENS, max_output_len=OUT_TOKENS)
            res[f"batch{batch}_beam{beam}"] = {name: count_ops(model, src, base.replace(lean=lean))
                                               for name, lean in (("readable", False), ("lean", True))}
    return res


# (ours, anchor): the ratios a cell reports, ours' tokens/s over the anchor's per repetition
PAIRS = (("ours", "ct2_fp32"), ("ours_readable", "ct2_fp32"), ("ours_int8", "ct2_int8"), ("ours", "ct2_int8"),
         ("ours_bf16", "ct2_fp32"))


def cell_ratios(times: dict[str, list[float]]) -> dict[str, dict]:
    """`"ours/anchor"` -> per-repetition ratios of `PAIRS`, summarised. Keyed by both names: keyed
    by the anchor alone (until 2026-12-01) "ours_readable" overwrote "ours" against ct2_fp32
    and fp32 overwrote int8 against ct2_int8, so the tables showed those pairs instead."""
    return {f"{o}/{a}": common.paired_ratio(times[a], times[o]) for o, a in PAIRS if o in times and a in times}


def run_cell(models: dict, ct2: dict, s: dict, batch: int, beam: int, threads: int, reps: int, budget,
             clock=time.perf_counter) -> dict:
    torch.set_num_threads(threads)
    n_src = 4 if batch == 1 else batch
    src = sources(n_src, s["vocab"], s["src_len"], seed=batch)
    chunks = [src[i:i + 1] for i in range(n_src)] if batch == 1 else [src]
    base = DecodeConfig(beam=beam, max_len_ratio=0.0, max_len_offset=OUT_TOKENS, max_output_len=OUT_TOKENS)
    cfgs = {"ours": base, "ours_readable": base.replace(lean=False), "ours_int8": base, "ours_bf16": base}
    counts: dict[str, int] = {}

    def ours(name):
        def f():
            n = 0
            with torch.inference_mode():
                for c in chunks:
                    n += sum(len(h.tokens) for h in decode(models[name], c, cfgs[name]))
            counts[name] = n
        return f

    def anchor(name):
        tr = ct2[(name, threads)]
        toks = [ct2_tokens(c) for c in chunks]

        def f():
            n = 0
            for t in toks:
                out = tr.translate_batch(t, beam_size=beam, min_decoding_length=OUT_TOKENS,
                                         max_decoding_length=OUT_TOKENS, max_batch_size=0)
                n += sum(len(r.hypotheses[0]) for r in out)
            counts[name] = n
        return f

    fns = {n: ours(n) for n in cfgs} | {n: anchor(n) for n in ("ct2_fp32", "ct2_int8")}
    load = os.getloadavg()[0]
    times = common.interleaved(fns, reps, warmup=1, budget_s=budget, min_reps=3, clock=clock)
    auto = choose_precision(chunks[0].shape[0] * beam, s["d_model"])
    return {"batch": batch, "beam": beam, "threads": threads, "output_tokens": counts,
            "auto_precision": {"choice": auto[0], "why": auto[1]},
            "loadavg_1min": [load, os.getloadavg()[0]],  # before and after the cell: the machine is shared
            "tokens_per_s": {n: common.rate_summary(counts[n], t) for n, t in times.items()},
            "ours_vs": cell_ratios(times),
            "lean_speedup": common.paired_ratio(times["ours_readable"], times["ours"])}


def run(quick: bool = False, out_dir=None, log=print, sizes_only=None, reps_override=None,
        threads_only=None, cpu_time=None) -> dict:
    import ctranslate2

    res = {"title": "Translation decoding vs CTranslate2 (every hypothesis 30 tokens)", "machine": common.machine_info(),
           "ctranslate2": ctranslate2.__version__, "shared_machine": True, "sizes": {}, "cells": [],
           "clock": "process CPU time" if cpu_time else "wall clock"}
    log("[engines] op counts")
    res["op_counts"] = op_counts(quick)
    sizes = {"hsk": dict(SIZES["hsk"], d_model=32, d_ff=64, vocab=64, n_heads=4)} if quick else SIZES
    if sizes_only:  # e.g. "hsk": a shorter run on a busy machine
        sizes = {k: v for k, v in sizes.items() if k in sizes_only.split(",")}
    reps, budget = (2, None) if quick else (5, 40.0)
    if reps_override:
        reps, budget = int(reps_override), None
    with tempfile.TemporaryDirectory() as tmp:
        for name, s in sizes.items():
            res["sizes"][name] = s
            d = ct2_model_dir(s, Path(tmp) / name)
            fp32 = ours_model(s)
            int8 = quantize_int8(ours_model(s))
            bf16 = copy.deepcopy(fp32).to(torch.bfloat16)  # what Translator.bf16_model decodes with
            models = {"ours": fp32, "ours_readable": fp32, "ours_int8": int8, "ours_bf16": bf16}
            for threads in ((1, 2) if not threads_only else tuple(int(t) for t in threads_only.split(","))):
                ct2 = {(f"ct2_{ct}", threads): ctranslate2.Translator(str(d), device="cpu", compute_type=ct,
                                                                       intra_threads=threads, inter_threads=1)
                       for ct in ("float32", "int8")}
                ct2 = {(k[0].replace("float32", "fp32"), k[1]): v for k, v in ct2.items()}
                for batch in (1, 32):
                    for beam in (1, 4):
                        r = run_cell(models, ct2, s, batch, beam, threads, reps, budget,
                                     time.process_time if cpu_time else time.perf_counter)
                        r["size"] = name
                        res["cells"].append(r)
                        log(f"[engines] {name} t{threads} b{batch} beam{beam}: ours/ct2 fp32 "
                            f"{r['ours_vs']['ours/ct2_fp32']['median']:.2f}, int8 {r['ours_vs']['ours_int8/ct2_int8']['median']:.2f}, "
                            f"bf16/ct2 fp32 {r['ours_vs']['ours_bf16/ct2_fp32']['median']:.2f} (auto: {r['auto_precision']['choice']}), "
                            f"lean/readable {r['lean_speedup']['median']:.2f}")
    res["targets"] = targets(res["cells"])
    common.write_result("translation_engines", res, to_markdown(res), out_dir)
    return res


def targets(cells: list[dict]) -> list[dict]:
    t = []
    for c in cells:
        if c["threads"] != 1:
            continue
        tag = f"{c['size']} batch {c['batch']} beam {c['beam']}, 1 thread"
        for pair, label in TARGET_PAIRS.items():
            goal = goal_for(pair, c["batch"])
            if goal is not None:
                t.append(common.target(f"{label}, {tag}", c["ours_vs"][pair]["median"], goal))
    return t


# The targets (one thread): ours / CTranslate2 fp32 >= 0.5 at batch 1 and 1.0 at batch 32;
# ours int8 / CTranslate2 int8 >= 0.7 at batch 32
TARGET_PAIRS = {"ours/ct2_fp32": "ours / CTranslate2 fp32", "ours_int8/ct2_int8": "ours int8 / CTranslate2 int8"}


def goal_for(pair: str, batch: int) -> float | None:
    if pair == "ours/ct2_fp32":
        return 1.0 if batch == 32 else 0.5
    return 0.7 if batch == 32 else None


def _load_note(res: dict) -> str:
    return common.load_note([x for c in res["cells"] for x in c.get("loadavg_1min", [])],
                            ": absolute rates are low and noisy, the per-repetition ratios are what to read.",
                            "; single runs still move by ±20% (benchmarks/engine_repeats.py summarises several).")


def to_markdown(res: dict) -> str:
    m = res["machine"]
    parts = [common.header_md(res["title"], m,
                              f"CTranslate2 {res['ctranslate2']} on a random MarianMTModel of the same size converted "
                              "by its own converter; ours: `Seq2Seq` (Post-LN, ReLU, tied), <eos> banned. Every "
                              f"hypothesis of every engine is {OUT_TOKENS} tokens. Interleaved in one process, same "
                              "threads, medians (min–max), timed by the " + res.get("clock", "wall clock") + ". "
                              + _load_note(res))]
    parts.append("## Targets (1 thread)\n\n" + common.targets_md(res["targets"]))
    rows = []
    for c in res["cells"]:
        tps, r = c["tokens_per_s"], c["ours_vs"]
        rows.append([c["size"], c["threads"], c["batch"], c["beam"], common.fmt_stat(tps["ours"]),
                     common.fmt_stat(tps["ours_readable"]), common.fmt_stat(tps["ours_int8"]),
                     common.fmt_stat(tps.get("ours_bf16")),
                     common.fmt_stat(tps["ct2_fp32"]), common.fmt_stat(tps["ct2_int8"]),
                     common.fmt_stat(r["ours/ct2_fp32"], 3, "×"), common.fmt_stat(r["ours_int8/ct2_int8"], 3, "×"),
                     common.fmt_stat(r.get("ours_bf16/ct2_fp32"), 3, "×"),
                     c.get("auto_precision", {}).get("choice", "–"),
                     common.fmt_stat(c["lean_speedup"], 3, "×"),
                     "–".join(f"{x:.1f}" for x in c.get("loadavg_1min", []))])
    parts.append("## Target tokens/s and ratios\n\n\"ours/ct2 fp32\" = ours (lean, fp32) over CTranslate2 fp32; "
                 "\"int8/int8\" = ours int8 over CTranslate2 int8; \"bf16/ct2 fp32\" = ours in bfloat16 (a bf16 copy of the model) over "
                 "CTranslate2 fp32 (it has no bf16 on the CPU); \"auto\" = what `precision=\"auto\"` picks for the "
                 "cell's rows; \"lean/readable\" = the lean step and search over the readable path (before).\n\n"
                 + common.md_table(
                     ["size", "threads", "batch", "beam", "ours", "ours readable (before)", "ours int8", "ours bf16",
                      "ct2 fp32", "ct2 int8", "ours/ct2 fp32", "int8/int8", "bf16/ct2 fp32", "auto",
                      "lean/readable", "load (1 min)"], rows))
    rows = []
    for cell, d in res["op_counts"].items():
        rows.append([cell, f"{d['readable']['ops_per_step']:.0f}", f"{d['lean']['ops_per_step']:.0f}",
                     f"{d['readable']['ops_per_token']:.1f}", f"{d['lean']['ops_per_token']:.1f}",
                     f"{d['readable']['ops_per_token'] / d['lean']['ops_per_token']:.1f}×",
                     ", ".join(f"{k} {v:.0f}" for k, v in d["lean"]["top_ops_per_token"].items())])
    parts.append("## Op calls per output token (hsk size, TorchDispatchMode count of aten ops)\n\n" + common.md_table(
        ["decode", "ops per step, readable (before)", "per step, lean (after)", "per output token, readable",
         "per output token, lean", "fewer", "lean: most frequent ops per output token"], rows))
    return "\n\n".join(parts)


def main(argv=None):
    common.cli(run, __doc__, argv, {"sizes_only": ("--sizes", "comma-separated sizes to run (default: hsk,en-fr)"),
                                    "reps_override": ("--reps", "repetitions per cell (default 5, fewer under a time budget)"),
                                    "threads_only": ("--threads", "comma-separated thread counts (default: 1,2)"),
                                    "cpu_time": ("--cpu-time", "time by process CPU time (any value), not the wall clock")})


if __name__ == "__main__":
    main()
