"""Translation decoding speed: greedy vs beam search (beam 5), with and without the KV cache.

The model is `scratchformer.models.seq2seq.Seq2Seq` at the size of recipes/hsk-base.json
(d_model 256, 4 heads, d_ff 1024, 3 encoder + 3 decoder layers, source and target vocabularies
of 2000, tied output, dropout 0), randomly initialised with a fixed seed, in eval mode. Sources:
a batch of random-id sentences whose lengths are drawn like the Chinese side of hsk-zh-en
with its char tokenizer (measured there: 8.7 characters on average, 5th-95th percentile 6..12,
3..18), each followed by <eos> and right-padded, decoded as one batch by `scratchformer.tasks.translate.decoding.decode`:
  - greedy_cached / greedy_uncached: beam 1, `use_cache` True / False;
  - beam5_cached / beam5_uncached: beam 5 (length penalty 1, early stop), `use_cache` True / False.
A random model emits <eos> at random steps, which would give each variant different work, so
the benchmark decodes with `NoEosSeq2Seq`, whose `decode` sets the <eos> logit to -inf: every
sentence runs to its length limit (`ceil(max_len_ratio * source length) + max_len_offset`
tokens), the same work for every variant. sentences/s and output tokens/s (tokens of the
returned hypotheses, <eos> included when emitted) use the wall time of the whole batch (encoder
included). The cached and uncached variants must return the same tokens (checked).

    python -m benchmarks.translation [--quick] [--out DIR]
    python -m benchmarks.translation --run runs/hsk   # a trained translator, real <eos>

A second part times one training step (forward, label-smoothed loss, backward, AdamW) at the
size of recipes/en-fr-base.json (d_model 256, 4 heads, d_ff 1024, 4 encoder + 3 decoder layers,
one shared 8000-token vocabulary tied to the output, dropout 0) under bfloat16 autocast, on a
batch of ~3,000 target tokens: ours (attention `impl="auto"`: the math path for these short
sequences), ours with the flash kernel forced (`impl="fused"`), and `torch.nn.Transformer`
with the same sizes, embeddings and tied output projection (`norm_first=True`).

With `--run DIR` the trained model of DIR decodes the first N sentences of its data set's test
split with the run's decoding settings and real <eos> (so beam and greedy outputs differ in
length); it writes `translation_run.json` / `.md` instead of `translation.*`.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch

from scratchformer.data.batching import pad_sequences
from scratchformer.data.tokenizers import EOS_ID, NUM_SPECIALS, PAD_ID
from scratchformer.models.seq2seq import Seq2Seq, Seq2SeqConfig
from scratchformer.nn import MultiHeadAttention, TransformerConfig
from scratchformer.nn.position import sinusoidal_table
from scratchformer.tasks.translate.decoding import DecodeConfig, decode

from . import common

VARIANTS = {"greedy_cached": (1, True), "greedy_uncached": (1, False),
            "beam5_cached": (5, True), "beam5_uncached": (5, False)}


class NoEosSeq2Seq(Seq2Seq):
    """Seq2Seq that never emits <eos>: every sentence decodes to its length limit."""

    def decode(self, tgt, memory, src_mask, cache=None, need_weights=False):
        out = super().decode(tgt, memory, src_mask, cache=cache, need_weights=need_weights)
        logits = out[0] if need_weights else out
        logits[..., EOS_ID] = float("-inf")
        return out


def plan(quick: bool) -> dict:
    if quick:
        return dict(cfg=dict(d_model=32, n_heads=4, d_ff=64, n_layers=1), vocab=64, sentences=4,
                    reps=2, budget=None)
    return dict(cfg=dict(d_model=256, n_heads=4, d_ff=1024, n_layers=3), vocab=2000, sentences=64,
                reps=7, budget=60.0)  # a round ~7 s on a busy core: ~60 s in all


def train_plan(quick: bool) -> dict:
    if quick:
        return dict(d_model=32, n_heads=4, d_ff=64, n_layers=1, n_decoder_layers=1, vocab=64,
                    batch=8, src_len=6, tgt_len=7, reps=2)
    return dict(d_model=256, n_heads=4, d_ff=1024, n_layers=4, n_decoder_layers=3, vocab=8000,
                batch=120, src_len=25, tgt_len=26, reps=7)


class TorchSeq2Seq(torch.nn.Module):
    """`torch.nn.Transformer` with the same embeddings (scaled, sinusoidal positions) and tied
    output projection as our Seq2Seq: the peer of the training-step benchmark."""

    def __init__(self, q: dict):
        super().__init__()
        self.embed = torch.nn.Embedding(q["vocab"], q["d_model"])
        with warnings.catch_warnings():  # "enable_nested_tensor ... norm_first": inference only anyway
            warnings.simplefilter("ignore")
            self.core = torch.nn.Transformer(q["d_model"], q["n_heads"], q["n_layers"], q["n_decoder_layers"],
                                             q["d_ff"], dropout=0.0, batch_first=True, norm_first=True)
        self.register_buffer("pos", sinusoidal_table(512, q["d_model"]))  # (512, C)
        self.scale = q["d_model"] ** 0.5

    def forward(self, src, tgt):
        e = lambda ids: self.embed(ids) * self.scale + self.pos[: ids.shape[1]]  # noqa: E731
        causal = self.core.generate_square_subsequent_mask(tgt.shape[1])
        h = self.core(e(src), e(tgt), tgt_mask=causal, tgt_is_causal=True)  # (B, T, C)
        return h @ self.embed.weight.t()  # (B, T, V), tied


def training_steps(quick: bool, log=print) -> dict:
    q = train_plan(quick)
    g = torch.Generator().manual_seed(0)
    src = torch.randint(NUM_SPECIALS, q["vocab"], (q["batch"], q["src_len"]), generator=g)
    tgt = torch.randint(NUM_SPECIALS, q["vocab"], (q["batch"], q["tgt_len"] + 1), generator=g)
    tc = TransformerConfig(d_model=q["d_model"], n_heads=q["n_heads"], d_ff=q["d_ff"], n_layers=q["n_layers"],
                           n_decoder_layers=q["n_decoder_layers"], dropout=0.0)
    torch.manual_seed(0)
    ours = Seq2Seq(Seq2SeqConfig(src_vocab_size=q["vocab"], tgt_vocab_size=q["vocab"], transformer=tc,
                                 share_embeddings=True, tie_output=True)).train()
    forced = Seq2Seq(ours.cfg).train()
    forced.load_state_dict(ours.state_dict())
    for m in forced.modules():
        if isinstance(m, MultiHeadAttention):
            m.impl = "fused"
    peer = TorchSeq2Seq(q).train()
    models = {"ours": ours, "ours_fused_attention": forced, "torch_nn_transformer": peer}
    opts = {n: torch.optim.AdamW(m.parameters(), lr=1e-4) for n, m in models.items()}

    def step(name):
        def f():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = models[name](src, tgt[:, :-1]).float()  # (B, T, V)
                loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(),
                                                         label_smoothing=0.1)
            loss.backward()
            opts[name].step()
            opts[name].zero_grad(set_to_none=True)
        return f

    log(f"[translation] training step, batch {q['batch']} x {q['src_len']}/{q['tgt_len']} tokens")
    times = common.interleaved({n: step(n) for n in models}, q["reps"], warmup=1)
    tokens = q["batch"] * q["tgt_len"]
    return {"settings": q, "target_tokens": tokens,
            "ms": {n: common.summary([1e3 * t for t in ts]) for n, ts in times.items()},
            "target_tokens_per_s": {n: common.rate_summary(tokens, ts) for n, ts in times.items()},
            "ours_vs": {n: common.paired_ratio(times[n], times["ours"]) for n in models if n != "ours"}}


def training_markdown(r: dict) -> str:
    q = r["settings"]
    rows = [[n, common.fmt_stat(r["ms"][n]), common.fmt_stat(r["target_tokens_per_s"][n]),
             "–" if n == "ours" else common.fmt_stat(r["ours_vs"][n], 3, "×")] for n in r["ms"]]
    return (f"## Training step (bf16 autocast): d_model {q['d_model']}, {q['n_layers']}+{q['n_decoder_layers']} "
            f"layers, vocab {q['vocab']} shared and tied, batch {q['batch']} × {q['src_len']} source / "
            f"{q['tgt_len']} target tokens\n\nForward, label-smoothed loss, backward, AdamW; median (min–max) "
            "over interleaved repetitions. \"ours vs\" = the row's time / ours (higher = ours faster).\n\n"
            + common.md_table(["model", "ms per step", "target tokens/s", "ours vs this"], rows))


def random_sources(n: int, vocab: int, seed: int = 0) -> torch.Tensor:
    """`(n, S)` right-padded sources: lengths like hsk-zh-en Chinese characters (mean ~8.7, 3..18), then <eos>."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(np.rint(rng.lognormal(np.log(8.4), 0.22, n)), 3, 18).astype(int)
    seqs = [rng.integers(NUM_SPECIALS, vocab, int(k)).tolist() + [EOS_ID] for k in lengths]
    return pad_sequences(seqs, PAD_ID)[0]


def output_tokens(hyps) -> int:
    return sum(len(h.tokens) + int(h.finished) for h in hyps)  # + the <eos> step when emitted


def run(quick: bool = False, out_dir=None, log=print, run_dir=None) -> dict:
    p = plan(quick)
    torch.manual_seed(0)
    if run_dir is None:
        tc = TransformerConfig(**p["cfg"], dropout=0.0)
        model = NoEosSeq2Seq(Seq2SeqConfig(src_vocab_size=p["vocab"], tgt_vocab_size=p["vocab"],
                                           transformer=tc, tie_output=True)).eval()
        src, base, which = random_sources(p["sentences"], p["vocab"]), DecodeConfig(), "random init, <eos> banned"
    else:  # a trained translator on real test sentences, real <eos>
        from scratchformer.tasks.translate import Translator, load_translation

        tr = Translator.load(run_dir)
        model, base, which = tr.model, tr.recipe.decode.replace(precision="fp32"), f"trained: {run_dir}"
        texts = [s for s, _ in load_translation(tr.recipe.data).test[: p["sentences"]]]
        src = pad_sequences(tr.encode(texts, base), PAD_ID)[0]
    cfgs = {n: base.replace(beam=b, use_cache=c) for n, (b, c) in VARIANTS.items()}
    n_src = (src != PAD_ID).sum(-1)
    res = {"title": "Translation decoding: greedy vs beam, with and without KV cache", "machine": common.machine_info(),
           "settings": {**{k: getattr(model.cfg.transformer, k) for k in ("d_model", "n_heads", "d_ff", "n_layers")},
                        "src_vocab": model.cfg.src_vocab_size, "tgt_vocab": model.cfg.tgt_vocab_size,
                        "model": which, "sentences": int(src.shape[0]),
                        "src_tokens_mean": float(n_src.float().mean()), "src_tokens_max": int(n_src.max()),
                        "beam": 5, "length_penalty": base.length_penalty, "max_len_ratio": base.max_len_ratio,
                        "max_len_offset": base.max_len_offset, "one_batch": True}}
    log(f"[translation] {src.shape[0]} sentences, {which}")
    last = {}

    def call(name):
        with torch.inference_mode():
            last[name] = decode(model, src, cfgs[name])

    fns = {n: (lambda n=n: call(n)) for n in VARIANTS}
    times = common.interleaved(fns, p["reps"], warmup=1, budget_s=p["budget"], min_reps=2)
    res["variants"] = {n: {"output_tokens": output_tokens(last[n]),
                           "sentences_per_s": common.rate_summary(len(last[n]), times[n]),
                           "tokens_per_s": common.rate_summary(output_tokens(last[n]), times[n])} for n in VARIANTS}
    res["same_tokens"] = {k: [h.tokens for h in last[f"{k}_cached"]] == [h.tokens for h in last[f"{k}_uncached"]]
                          for k in ("greedy", "beam5")}
    res["max_score_diff"] = {k: max(abs(a.score - b.score) for a, b in zip(last[f"{k}_cached"], last[f"{k}_uncached"]))
                             for k in ("greedy", "beam5")}
    res["cached_speedup"] = {k: common.paired_ratio(times[f"{k}_uncached"], times[f"{k}_cached"])
                             for k in ("greedy", "beam5")}
    res["beam_over_greedy_time"] = {c: common.paired_ratio(times[f"beam5_{c}"], times[f"greedy_{c}"])
                                    for c in ("cached", "uncached")}
    res["reps"] = len(times["greedy_cached"])
    # goal 1.5, not generation.py's 5: outputs are short (~25 tokens, vs the LM's 512-token
    # context) and every step also pays cross-attention and the search's Python, so the cache
    # has less to save; a floor, not an expectation (the first full run, batch 64, gave ~5x:
    # uncached steps also project every prefix position onto the 2000-token vocabulary)
    res["targets"] = [common.target("greedy cached / uncached", res["cached_speedup"]["greedy"]["median"], 1.5)]
    if run_dir is None:
        res["training"] = training_steps(quick, log)
        res["targets"].append(common.target("bf16 training step, ours / torch.nn.Transformer",
                                            res["training"]["ours_vs"]["torch_nn_transformer"]["median"], 1.0))
    common.write_result("translation" if run_dir is None else "translation_run", res, to_markdown(res), out_dir)
    return res


def to_markdown(res: dict) -> str:
    s = res["settings"]
    if s["model"].startswith("random"):
        work = ("Random init with the <eos> logit set to -inf (`NoEosSeq2Seq`), so every sentence decodes to its "
                "length limit and every variant does the same work. ")
    else:
        work = f"Model {s['model']}, test sentences, real <eos>. "
    parts = [common.header_md(res["title"], res["machine"],
                              f"Seq2Seq d_model {s['d_model']}, {s['n_heads']} heads, d_ff {s['d_ff']}, "
                              f"{s['n_layers']}+{s['n_layers']} layers, vocab {s['src_vocab']}/{s['tgt_vocab']}. "
                              + work + f"{s['sentences']} sentences of {s['src_tokens_mean']:.1f} source tokens on "
                              f"average (max {s['src_tokens_max']}, <eos> included) decoded as one batch; output "
                              f"limit ceil({s['max_len_ratio']:g} × source length) + {s['max_len_offset']}; beam "
                              f"{s['beam']}, length penalty {s['length_penalty']:g}. Rates use the wall time of the "
                              f"whole batch, median (min–max) over {res['reps']} repetitions.")]
    parts.append("## Targets\n\n" + common.targets_md(res["targets"]))
    rows = []
    for n, v in res["variants"].items():
        same = res["same_tokens"][n.split("_")[0]]
        rows.append([n, common.fmt_stat(v["sentences_per_s"]), common.fmt_stat(v["tokens_per_s"]),
                     v["output_tokens"], "yes" if same else "**NO**"])
    parts.append("## Speed\n\n" + common.md_table(
        ["variant", "sentences/s", "output tok/s", "output tokens", "cached == uncached tokens"], rows))
    ratios = [["greedy cached / uncached (speedup)", common.fmt_stat(res["cached_speedup"]["greedy"], 3, "×")],
              ["beam5 cached / uncached (speedup)", common.fmt_stat(res["cached_speedup"]["beam5"], 3, "×")],
              ["beam5 / greedy time, cached", common.fmt_stat(res["beam_over_greedy_time"]["cached"], 3, "×")],
              ["beam5 / greedy time, uncached", common.fmt_stat(res["beam_over_greedy_time"]["uncached"], 3, "×")]]
    parts.append("## Ratios (per repetition)\n\n" + common.md_table(["ratio", "median (min–max)"], ratios))
    if "training" in res:
        parts.append(training_markdown(res["training"]))
    return "\n\n".join(parts)


def main(argv=None):
    common.cli(run, __doc__, argv,
               {"run_dir": ("--run", "a trained translator's run directory (real <eos>, test sentences)")})


if __name__ == "__main__":
    main()
