"""Greedy generation with and without a KV cache, tokens/s vs context length.

The model is `scratchformer.models.language_model.DecoderLM` (our causal `Encoder` with
RoPE, Pre-LN, a tied head) when it is importable, else a tiny embedding + causal `Encoder`
+ head wrapper defined here. Batch 1, a random prompt of `context` tokens, then
`new_tokens` greedy steps:
  - cached: prefill the prompt once into one `KVCache` per layer, then one position per step;
  - uncached: every step runs the whole sequence so far again.
Both must produce the same tokens (checked); tokens/s = new tokens / wall time of the
whole generation (prefill included).
"""
from __future__ import annotations

import torch
from torch import nn

from scratchformer.nn import Encoder, KVCache, TransformerConfig

from . import common


class TinyLM(nn.Module):
    """Fallback: ids -> embedding -> causal Encoder (with caches) -> logits."""

    def __init__(self, vocab: int, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(vocab, cfg.d_model)
        self.encoder = Encoder(cfg)
        self.head = nn.Linear(cfg.d_model, vocab, bias=False)

    def new_caches(self) -> list[KVCache]:
        return [KVCache() for _ in range(self.cfg.n_layers)]

    def forward(self, ids, caches=None):
        return self.head(self.encoder(self.embed(ids), is_causal=True, caches=caches))


def make_model(vocab: int, cfg: TransformerConfig) -> tuple[nn.Module, str]:
    try:
        from scratchformer.models.language_model import DecoderLM, LMConfig

        return DecoderLM(LMConfig(vocab_size=vocab, transformer=cfg)).eval(), "scratchformer.models.language_model.DecoderLM"
    except Exception as e:  # the LM is someone else's module: fall back, say so
        return TinyLM(vocab, cfg).eval(), f"benchmarks.generation.TinyLM (DecoderLM unavailable: {type(e).__name__})"


@torch.inference_mode()
def generate_cached(model, prompt: torch.Tensor, n: int) -> torch.Tensor:
    caches = model.new_caches()
    logits = model(prompt, caches=caches)  # prefill: (1, T, V)
    nxt = logits[:, -1].argmax(-1, keepdim=True)  # (1, 1)
    out = [nxt]
    for _ in range(n - 1):
        nxt = model(nxt, caches=caches)[:, -1].argmax(-1, keepdim=True)
        out.append(nxt)
    return torch.cat(out, 1)


@torch.inference_mode()
def generate_uncached(model, prompt: torch.Tensor, n: int) -> torch.Tensor:
    ids = prompt
    for _ in range(n):
        nxt = model(ids)[:, -1].argmax(-1, keepdim=True)
        ids = torch.cat([ids, nxt], 1)
    return ids[:, prompt.shape[1]:]


def plan(quick: bool) -> dict:
    if quick:
        return dict(cfg=dict(d_model=32, n_heads=4, d_ff=64, n_layers=2), vocab=64, contexts=[8, 16],
                    new_tokens=4, reps=2, budget=None)
    return dict(cfg=dict(d_model=256, n_heads=8, d_ff=1024, n_layers=4), vocab=512, contexts=[128, 512, 1024],
                new_tokens=16, reps=5, budget=12.0)


def run(quick: bool = False, out_dir=None, log=print) -> dict:
    p = plan(quick)
    torch.manual_seed(0)
    cfg = TransformerConfig(**p["cfg"], dropout=0.0, norm_first=True, position="rope", max_len=4096)
    model, which = make_model(p["vocab"], cfg)
    res = {"title": "Generation with and without KV cache", "machine": common.machine_info(),
           "settings": {**p["cfg"], "vocab": p["vocab"], "batch": 1, "new_tokens": p["new_tokens"],
                        "model": which, "position": "rope", "greedy": True}, "by_context": {}}
    g = torch.Generator().manual_seed(0)
    for ctx in p["contexts"]:
        log(f"[generation] context {ctx}")
        prompt = torch.randint(5, p["vocab"], (1, ctx), generator=g)
        last = {}

        def call(name, gen, prompt=prompt):
            last[name] = gen(model, prompt, p["new_tokens"])

        fns = {"cached": lambda: call("cached", generate_cached),
               "uncached": lambda: call("uncached", generate_uncached)}
        # the first round (cached first) doubles as warm-up: one-time costs are prefill-like
        times = common.interleaved(fns, p["reps"], warmup=1, budget_s=p["budget"], min_reps=2)
        res["by_context"][ctx] = {
            "same_tokens": bool(torch.equal(last["cached"], last["uncached"])),
            "tokens_per_s": {n: common.rate_summary(p["new_tokens"], ts) for n, ts in times.items()},
            "cached_speedup": common.paired_ratio(times["uncached"], times["cached"]),
            "reps": len(times["cached"]),
        }
    mid = sorted(p["contexts"])[len(p["contexts"]) // 2]
    res["targets"] = [common.target(f"cached / uncached at context {mid}",
                                    res["by_context"][mid]["cached_speedup"]["median"], 5.0)]
    common.write_result("generation", res, to_markdown(res), out_dir)
    return res


def to_markdown(res: dict) -> str:
    s = res["settings"]
    parts = [common.header_md(res["title"], res["machine"],
                              f"Model: {s['model']}, d_model {s['d_model']}, {s['n_heads']} heads, d_ff {s['d_ff']}, "
                              f"{s['n_layers']} layers, RoPE, vocab {s['vocab']}. Batch 1, {s['new_tokens']} greedy "
                              "tokens after a random prompt; tokens/s = new tokens / time of the whole generation "
                              "(prefill included), median (min–max).")]
    parts.append("## Targets\n\n" + common.targets_md(res["targets"]))
    rows = [[ctx, common.fmt_stat(r["tokens_per_s"]["uncached"]), common.fmt_stat(r["tokens_per_s"]["cached"]),
             common.fmt_stat(r["cached_speedup"], 3, "×"), "yes" if r["same_tokens"] else "**NO**"]
            for ctx, r in res["by_context"].items()]
    parts.append("## Tokens/s vs context\n\n" + common.md_table(
        ["context", "uncached tok/s", "cached tok/s", "cached / uncached", "same tokens"], rows))
    return "\n\n".join(parts)


def main(argv=None):
    common.cli(run, __doc__, argv)


if __name__ == "__main__":
    main()
