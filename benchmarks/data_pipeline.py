"""Data pipeline: tokenization + length bucketing throughput, and padding with/without buckets.

Synthetic text, so the benchmark needs no download and is the same everywhere: sentences of
Zipf-distributed pseudo-words (letters, some punctuation, some CJK characters), with
log-normal lengths like real sentences. Steps timed (median of interleaved repetitions):
  - `CharTokenizer.train` over the corpus,
  - `encode_batch` of every sentence (with <bos>/<eos>),
  - `LengthBucketSampler(...).epoch_batches(0)` and `pad_sequences` of every batch,
  - the same padding without bucketing (shuffled batches),
and `bucketing_report` gives the padding fractions (random, bucketed, fully sorted).
"""
from __future__ import annotations

import numpy as np

from scratchformer.data.batching import LengthBucketSampler, bucketing_report, pad_sequences
from scratchformer.data.tokenizers import CharTokenizer

from . import common


def synthetic_corpus(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    letters = list("abcdefghijklmnopqrstuvwxyz") + list("的一是不了人我在有他这中大来上国个到说们")
    vocab = ["".join(rng.choice(letters, size=rng.integers(1, 9))) for _ in range(5000)]
    zipf = 1.0 / np.arange(1, len(vocab) + 1)
    zipf /= zipf.sum()
    n_words = np.clip(np.round(rng.lognormal(np.log(12), 0.6, n)), 1, 120).astype(int)
    out = []
    for k in n_words:
        words = rng.choice(len(vocab), size=k, p=zipf)
        s = " ".join(vocab[w] for w in words)
        out.append(s[0].upper() + s[1:] + rng.choice([".", "?", "!", ","]))
    return out


def plan(quick: bool) -> dict:
    if quick:
        return dict(n=300, batch=8, reps=2, budget=None)
    return dict(n=20000, batch=32, reps=5, budget=25.0)


def run(quick: bool = False, out_dir=None, log=print) -> dict:
    p = plan(quick)
    log("[data] building the synthetic corpus")
    texts = synthetic_corpus(p["n"])
    n_chars = sum(len(t) for t in texts)
    tok = CharTokenizer.train(texts)
    ids = tok.encode_batch(texts, add_bos=True, add_eos=True)
    lengths = [len(s) for s in ids]
    n_tokens = sum(lengths)

    def bucketed():
        sampler = LengthBucketSampler(lengths, batch_size=p["batch"], shuffle=True, seed=0)
        return [pad_sequences([ids[i] for i in b]) for b in sampler.epoch_batches(0)]

    perm = np.random.default_rng(0).permutation(len(ids)).tolist()
    random_batches = [perm[i:i + p["batch"]] for i in range(0, len(perm), p["batch"])]

    def unbucketed():
        return [pad_sequences([ids[i] for i in b]) for b in random_batches]

    fns = {
        "train_tokenizer": lambda: CharTokenizer.train(texts),
        "encode": lambda: tok.encode_batch(texts, add_bos=True, add_eos=True),
        "bucket_and_pad": bucketed,
        "pad_unbucketed": unbucketed,
    }
    log("[data] timing")
    times = common.interleaved(fns, p["reps"], budget_s=p["budget"])
    padded = {name: sum(int(t.numel()) for t, _ in f()) for name, f in (("bucketed", bucketed), ("random", unbucketed))}
    report = bucketing_report(lengths, p["batch"], seed=0)
    res = {
        "title": "Data pipeline: tokenization and bucketing", "machine": common.machine_info(),
        "settings": {"sentences": p["n"], "characters": n_chars, "tokens": n_tokens, "batch_size": p["batch"],
                     "tokenizer": f"CharTokenizer ({tok.vocab_size} ids)", "corpus": "synthetic (see module doc)",
                     "length_mean": float(np.mean(lengths)), "length_p95": float(np.percentile(lengths, 95))},
        "reps": len(times["encode"]),
        "seconds": {n: common.summary(ts) for n, ts in times.items()},
        "throughput": {
            "train_tokenizer_chars_per_s": common.rate_summary(n_chars, times["train_tokenizer"]),
            "encode_tokens_per_s": common.rate_summary(n_tokens, times["encode"]),
            "encode_chars_per_s": common.rate_summary(n_chars, times["encode"]),
            "bucket_and_pad_tokens_per_s": common.rate_summary(n_tokens, times["bucket_and_pad"]),
            "pad_unbucketed_tokens_per_s": common.rate_summary(n_tokens, times["pad_unbucketed"]),
        },
        "padding": {**report, "padded_slots_bucketed": padded["bucketed"], "padded_slots_random": padded["random"]},
        "targets": [],
    }
    common.write_result("data_pipeline", res, to_markdown(res), out_dir)
    return res


def to_markdown(res: dict) -> str:
    s, t, pad = res["settings"], res["throughput"], res["padding"]
    parts = [common.header_md(res["title"], res["machine"],
                              f"{s['sentences']} synthetic sentences, {s['characters']} characters, {s['tokens']} tokens "
                              f"({s['tokenizer']}, with <bos>/<eos>; mean length {s['length_mean']:.0f}, "
                              f"p95 {s['length_p95']:.0f}), batch size {s['batch_size']}. Median (min–max) of "
                              f"{res['reps']} interleaved repetitions.")]
    rows = [
        ["CharTokenizer.train", common.fmt_stat(t["train_tokenizer_chars_per_s"]) + " chars/s"],
        ["encode_batch", common.fmt_stat(t["encode_tokens_per_s"]) + " tokens/s"],
        ["LengthBucketSampler + pad_sequences", common.fmt_stat(t["bucket_and_pad_tokens_per_s"]) + " tokens/s"],
        ["pad_sequences of shuffled batches (no bucketing)", common.fmt_stat(t["pad_unbucketed_tokens_per_s"]) + " tokens/s"],
    ]
    parts.append("## Throughput\n\n" + common.md_table(["step", "throughput"], rows))
    rows = [["shuffled batches (no bucketing)", f"{pad['padding_fraction_random']:.1%}", pad["padded_slots_random"]],
            ["LengthBucketSampler (shuffle=True)", f"{pad['padding_fraction_bucketed']:.1%}", pad["padded_slots_bucketed"]],
            ["fully sorted (lower bound)", f"{pad['padding_fraction_sorted']:.1%}", "–"]]
    parts.append("## Padding\n\n" + common.md_table(["batching", "padded fraction of slots", "token slots"], rows)
                 + f"\n\nBucketing cuts the token slots a model must process by {pad['speedup_bound']:.2f}× "
                   "(`speedup_bound`: an upper bound on the speed-up of a padded model; see `encoder` for "
                   "what packing gives inside a fixed batch).")
    return "\n\n".join(parts)


def main(argv=None):
    common.cli(run, __doc__, argv)


if __name__ == "__main__":
    main()
