"""Language-model generation speed: KV cache vs recomputing the window, at several context lengths.

A `DecoderLM` of the shakespeare-small size (4 layers, 4 heads, d_model 128, char vocabulary
of 85, RoPE; random weights: speed does not depend on them) continues a random prompt of
`context` tokens by `new` greedy tokens, one sequence, eval mode, no_grad. The window is
`context + new`, so nothing is cropped and both paths produce the same tokens (checked).

  - cached: one prefill forward over the prompt, then one forward of one position per token,
    attending to the cached keys/values.
  - uncached: a forward over the whole sequence so far for every new token.

Tokens/s = new tokens / wall time of the whole call (the cached path's prefill included).
Both contenders run in one process, interleaved (see `common.interleaved`).
"""
from __future__ import annotations

import torch

from scratchformer.models.language_model import DecoderLM, LMConfig
from scratchformer.nn import TransformerConfig
from scratchformer.tasks.lm import LanguageModel, LMDataConfig, LMRecipe

from . import common

SIZE = dict(d_model=128, n_heads=4, d_ff=512, n_layers=4)
VOCAB = 85


def build(size: dict, window: int, seed: int = 0) -> LanguageModel:
    torch.manual_seed(seed)
    enc = TransformerConfig(**size, dropout=0.0, activation="gelu", position="rope", max_len=window)
    cfg = LMConfig(vocab_size=VOCAB, transformer=enc)
    recipe = LMRecipe(data=LMDataConfig(context=window), model=cfg)
    return LanguageModel(DecoderLM(cfg), None, recipe)  # generate_ids needs no tokenizer


def run_context(size: dict, context: int, new: int, reps: int, seed: int = 0) -> dict:
    lm = build(size, context + new, seed)
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(5, VOCAB, (context,), generator=g).tolist()
    outs: dict[str, list[int]] = {}

    def gen(use_cache: bool):
        def f():
            outs["cached" if use_cache else "uncached"] = lm.generate_ids(prompt, new, temperature=0, use_cache=use_cache)
        return f

    times = common.interleaved({"cached": gen(True), "uncached": gen(False)}, reps)
    return {
        "context": context, "new_tokens": new,
        "tokens_per_s": {k: common.rate_summary(new, v) for k, v in times.items()},
        "speedup_cached": common.paired_ratio(times["uncached"], times["cached"]),
        "same_tokens": outs["cached"] == outs["uncached"],
    }


def plan(quick: bool) -> dict:
    if quick:
        return dict(size=dict(d_model=32, n_heads=4, d_ff=64, n_layers=2), contexts=[16, 32], new=8, reps=2)
    return dict(size=SIZE, contexts=[128, 512, 1024], new=64, reps=5)


def run(quick: bool = False, out_dir=None, log=print, lean_only=None) -> dict:
    p = plan(quick)
    machine = common.machine_info()
    if lean_only:  # only the lean-vs-readable rows, into lm_generation_lean.*
        res = {"machine": machine, "size": p["size"], "results": [], "targets": [],
               "lean": lean_rows(p["size"], 8 if quick else 64, p["reps"], log)}
        common.write_result("lm_generation_lean", res, to_markdown(res), out_dir)
        return res
    rows = []
    for ctx in p["contexts"]:
        r = run_context(p["size"], ctx, p["new"], p["reps"])
        rows.append(r)
        tps = r["tokens_per_s"]
        log(f"context {ctx}: cached {tps['cached']['median']:.0f} tok/s, uncached {tps['uncached']['median']:.0f} tok/s, "
            f"x{r['speedup_cached']['median']:.1f}, same tokens: {r['same_tokens']}")
    res = {"machine": machine, "size": p["size"], "results": rows, "targets": targets(rows)}
    res["lean"] = lean_rows(p["size"], 8 if quick else 64, p["reps"], log)
    common.write_result("lm_generation", res, to_markdown(res), out_dir)
    return res


def lean_rows(size: dict, new: int, reps: int, log=print) -> list[dict]:
    """Greedy generation of `new` tokens after a 64-token prompt at batch 1 and 32, through the
    readable cached forward (before) and the lean step (after), one thread, interleaved."""
    torch.set_num_threads(1)
    lm = build(size, 64 + new)
    model = lm.model
    out = []
    for batch in (1, 32):
        g = torch.Generator().manual_seed(batch)
        prompt = torch.randint(5, VOCAB, (batch, 64), generator=g)
        toks: dict[str, torch.Tensor] = {}

        def gen(lean: bool):
            def f():
                with torch.inference_mode():
                    caches = model.new_caches(64 + new)
                    logits = model(prompt, caches)[:, -1]
                    step = model.lean_step(caches) if lean else None
                    seq = []
                    for _ in range(new):
                        tok = logits.argmax(-1)  # (B,)
                        seq.append(tok)
                        logits = step(tok) if lean else model(tok[:, None], caches)[:, -1]
                    toks["lean" if lean else "readable"] = torch.stack(seq, 1)
            return f

        times = common.interleaved({"readable": gen(False), "lean": gen(True)}, reps)
        r = {"batch": batch, "prompt": 64, "new_tokens": new,
             "tokens_per_s": {k: common.rate_summary(batch * new, v) for k, v in times.items()},
             "lean_speedup": common.paired_ratio(times["readable"], times["lean"]),
             "same_tokens": bool(torch.equal(toks["lean"], toks["readable"]))}
        log(f"lean batch {batch}: x{r['lean_speedup']['median']:.2f}, same tokens {r['same_tokens']}")
        out.append(r)
    return out


def targets(rows: list[dict]) -> list[dict]:
    t = []
    for r in rows:
        t.append(common.target(f"context {r['context']}: cached / uncached tokens/s", r["speedup_cached"]["median"],
                               2.0 if r["context"] >= 512 else 1.0))
        t.append(common.target(f"context {r['context']}: cached tokens == uncached tokens", float(r["same_tokens"]), 1.0,
                               unit=""))
    return t


def to_markdown(res: dict) -> str:
    s = res["size"]
    head = common.header_md(
        "LM generation: KV cache vs recompute",
        res["machine"],
        f"DecoderLM {s['n_layers']} layers, d_model {s['d_model']}, {s['n_heads']} heads, RoPE, vocab {VOCAB}; "
        "batch 1, greedy, eval + no_grad; tokens/s = new tokens / time of the whole call (prefill included), "
        "median (min–max) over interleaved repetitions.")
    rows = [[str(r["context"]), str(r["new_tokens"]), common.fmt_stat(r["tokens_per_s"]["cached"]),
             common.fmt_stat(r["tokens_per_s"]["uncached"]), common.fmt_stat(r["speedup_cached"], suffix="x"),
             "yes" if r["same_tokens"] else "**no**"] for r in res["results"]]
    table = common.md_table(["context", "new tokens", "cached tok/s", "uncached tok/s", "speed-up", "same tokens"], rows)
    lean = ""
    if res.get("lean"):
        rows = [[str(r["batch"]), str(r["new_tokens"]), common.fmt_stat(r["tokens_per_s"]["readable"]),
                 common.fmt_stat(r["tokens_per_s"]["lean"]), common.fmt_stat(r["lean_speedup"], suffix="x"),
                 "yes" if r["same_tokens"] else "**no**"] for r in res["lean"]]
        lean = ("\n## Lean step vs readable cached forward (one thread, greedy, 64-token prompt; prefill included)\n\n"
                + common.md_table(["batch", "new tokens", "readable tok/s (before)", "lean tok/s (after)", "speed-up",
                                   "same tokens"], rows) + "\n")
    return f"{head}\n{table}\n\n{common.targets_md(res['targets'])}\n{lean}"


def main(argv=None):
    common.cli(run, __doc__, argv, {"lean_only": ("--lean-only", "any value: only the lean-step rows (lm_generation_lean.*)")})


if __name__ == "__main__":
    main()
