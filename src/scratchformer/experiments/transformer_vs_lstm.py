"""`scratchformer experiment transformer-vs-lstm`: the tutorial's "Transformer more than 3x faster
than an LSTM, and a higher BLEU" on our translation task.

"在我的多语言翻译项目中，Transformer 比 LSTM 快 3 倍以上，且 BLEU 得分更高"

Both models are `train translate` runs of one recipe that differ only in `model.kind`
(transformer | lstm: `models/rnn_seq2seq.py`, a bidirectional LSTM encoder and an LSTM decoder
with additive attention), at comparable parameter counts, with the same tokenizers, optimizer,
schedule, batches, seeds and wall-clock budget (`train.max_minutes`, validation included). Per
run it measures:
  - training throughput: target tokens per second (the Trainer's windows of source + target
    tokens per second, median over windows, times the target share of the training tokens);
  - the validation BLEU curve against wall-clock time, and the time to reach half of the weaker
    runs' best validation BLEU on that data (the same threshold for both models);
  - test BLEU and chrF (sacrebleu, greedy, the run's final weights) and BLEU by source-length
    third (short / medium / long, by source tokens);
  - decoding speed (sentences per second, greedy, float32) at batch 1 and batch 32.
Verdicts (`verdict.py`, Welch intervals over seeds): training speed ratio > 3, decoding speed
ratio > 3 (batch 1 and batch 32 separately), test BLEU difference > 0, per data set.
"""
from __future__ import annotations

import io
import json
import math
import statistics
import time
from pathlib import Path
from typing import Callable

import pandas as pd

from ..fileio import atomic_write_bytes, atomic_write_text, make_dirs
from .report import cpu_name, verdict_table
from .verdict import evaluate_check

MODELS = ("transformer", "lstm")
# the data sets: registered name, its options, tokenizers (the recipes hsk-base / en-fr-base, smaller)
DATA = {
    "hsk-zh-en": {"dataset": "hsk-zh-en", "dataset_options": {}, "src_tokenizer": "char", "tgt_tokenizer": "bpe",
                  "tgt_vocab_size": 2000, "joint_vocab": False},
    "en-fr": {"dataset": "fr-en", "dataset_options": {"reverse": True}, "src_tokenizer": "bpe",
              "tgt_tokenizer": "bpe", "src_vocab_size": 4000, "tgt_vocab_size": 4000, "joint_vocab": True},
}
N_VALID, N_TEST, N_SPEED = 1000, 400, 64  # validation pairs kept, test pairs scored, sentences timed
D_TRANSFORMER, D_LSTM = 128, 152  # comparable parameter counts (the report prints both)
MAX_TOKENS = 1200  # tokens a batch: at 600 a step was mostly overhead on one CPU thread


def recipe_dict(data: str, model: str, seed: int, minutes: float, files: dict) -> dict:
    d = DATA[data]
    tc = {"d_model": D_TRANSFORMER if model == "transformer" else D_LSTM, "n_heads": 4, "d_ff": 512,
          "n_layers": 2, "n_decoder_layers": 2, "dropout": 0.1, "norm_first": True}
    return {
        "data": {"dataset": files["train"], "valid_file": files["valid"], "test_file": files["test"],
                 "src_tokenizer": d["src_tokenizer"], "tgt_tokenizer": d["tgt_tokenizer"],
                 "src_vocab_size": d.get("src_vocab_size", 8000), "tgt_vocab_size": d["tgt_vocab_size"],
                 "joint_vocab": d["joint_vocab"], "max_len": 64, "max_tokens": MAX_TOKENS, "label_smoothing": 0.1,
                 "bleu_sentences": 100},
        "model": {"kind": model, "transformer": tc, "tie_output": True, "share_embeddings": d["joint_vocab"]},
        "train": {"epochs": None, "max_minutes": minutes, "lr": 2e-3, "schedule": "noam", "warmup_steps": 60,
                  "weight_decay": 0.01, "betas": [0.9, 0.98], "eval_every": 80, "log_every": 10, "seed": seed,
                  "metric": "bleu", "metric_mode": "max", "precision": "fp32", "progress": False},
        "decode": {"beam": 1, "precision": "fp32"},
        "average_last": 1,
    }


def write_splits(data: str, folder: Path) -> dict:
    """The data set's train split, its first N_VALID validation and N_TEST test pairs, as
    src<TAB>tgt files (the same files for every run; a user's files are the recipe's way to
    take a part of a split)."""
    from ..tasks.translate import TranslateDataConfig, load_translation

    d = DATA[data]
    files = {k: folder / f"{data}.{k}.tsv" for k in ("train", "valid", "test")}
    if not all(f.exists() for f in files.values()):
        make_dirs(folder)
        loaded = load_translation(TranslateDataConfig(dataset=d["dataset"], dataset_options=d["dataset_options"]))
        clean = lambda t: " ".join(t.replace("\t", " ").split())  # noqa: E731  one line, one tab per pair
        for k, pairs in (("train", loaded.train), ("valid", loaded.valid[:N_VALID]), ("test", loaded.test[:N_TEST])):
            atomic_write_text(files[k], "".join(f"{clean(s)}\t{clean(t)}\n" for s, t in pairs))
    return {k: str(v) for k, v in files.items()}


def length_thirds(srcs: list[str], hyps: list[str], refs: list[str], count) -> dict:
    """Corpus BLEU of the short / medium / long third of the sentences by source tokens."""
    from ..tasks.translate import corpus_scores

    order = sorted(range(len(srcs)), key=lambda i: count(srcs[i]))
    n = len(order)
    out = {}
    for name, part in (("short", order[: n // 3]), ("medium", order[n // 3: 2 * n // 3]), ("long", order[2 * n // 3:])):
        out[f"bleu_{name}"] = corpus_scores([hyps[i] for i in part], [refs[i] for i in part])["bleu"]
    return out


def _generated(hyps) -> int:
    """Decoder steps a greedy decode took: output tokens, plus the <eos> of finished ones."""
    return sum(len(h.tokens) + int(h.finished) for h in hyps)


def decode_speed(run_dir: Path, srcs: list[str]) -> dict:
    """Greedy float32 decoding at batch 1 (one call per sentence) and batch 32: sentences and
    generated tokens per second. Tokens per second is what the ratios use: a model that stops
    early (or runs to the length limit) would otherwise look faster (or slower) per sentence."""
    from ..tasks.translate import Translator

    tr = Translator.load(run_dir, compute_type="float32")
    tr.translate(srcs[:4], beam=1)  # warm-up
    out = {}
    for name, size in (("b1", 1), ("b32", 32)):
        t0, n = time.perf_counter(), 0
        for i in range(0, len(srcs), size):
            n += _generated(tr.hypotheses(srcs[i:i + size], beam=1, batch_tokens=10 ** 6))
        elapsed = time.perf_counter() - t0
        out[f"decode_sent_s_{name}"], out[f"decode_tok_s_{name}"] = len(srcs) / elapsed, n / elapsed
    return out


def one_run(data: str, model: str, seed: int, minutes: float, files: dict, run_dir: Path,
            log: Callable[[str], None]) -> dict:
    from ..data.readers import read_parallel
    from ..tasks.translate import TranslateRecipe, train_translator
    from ..train.curves import read_metrics

    done = run_dir / "cell.json"
    if done.exists():
        cell = json.loads(done.read_text(encoding="utf-8"))
        if "decode_tok_s_b1" not in cell:  # a cell measured before decoding speed counted tokens
            test = read_parallel(files["test"])
            cell.update(decode_speed(run_dir, [s for s, _ in test][:N_SPEED]))
            atomic_write_text(done, json.dumps(cell, indent=1) + "\n")
        return cell
    recipe = TranslateRecipe.from_dict(recipe_dict(data, model, seed, minutes, files))
    result = train_translator(recipe, run_dir, log=lambda m: None)
    rows = read_metrics(run_dir / "metrics.jsonl")
    train_rows = [r for r in rows if r.get("split") == "train" and "tokens_per_s" in r]
    curve = [(r["elapsed"], r["bleu"]) for r in rows if r.get("split") == "valid" and "bleu" in r]
    from ..tasks.translate import Translator

    tr = Translator.load(run_dir, compute_type="float32")
    test = read_parallel(files["test"])
    srcs, refs = [s for s, _ in test], [t for _, t in test]
    hyps = (run_dir / "test_hyps.txt").read_text(encoding="utf-8").split("\n")[: len(test)]
    train_pairs = read_parallel(files["train"])[:5000]
    n_src = sum(len(x) + 1 for x in tr.src_tok.encode_batch([s for s, _ in train_pairs]))
    n_tgt = sum(len(x) + 1 for x in tr.tgt_tok.encode_batch([t for _, t in train_pairs]))
    cell = {
        "data": data, "model": model, "seed": seed, "minutes": minutes,
        "params": sum(p.numel() for p in tr.model.parameters()),
        "steps": result["train"].get("steps", rows[-1]["step"] if rows else 0),
        "train_tgt_tok_s": statistics.median(r["tokens_per_s"] for r in train_rows) * n_tgt / (n_src + n_tgt),
        "best_valid_bleu": max((b for _, b in curve), default=float("nan")),
        "curve": curve,
        "test_bleu": result["test"]["bleu"], "test_chrf": result["test"]["chrf"],
        "bleu_signature": result["test"]["bleu_signature"],
        **length_thirds(srcs, hyps, refs, lambda s: len(tr.src_tok.encode(s))),
        **decode_speed(run_dir, srcs[:N_SPEED]),
    }
    atomic_write_text(done, json.dumps(cell, indent=1) + "\n")
    log(f"{data} {model} seed {seed}: {cell['params'] / 1e6:.2f}M params, {cell['steps']} steps, "
        f"{cell['train_tgt_tok_s']:.0f} target tok/s, test BLEU {cell['test_bleu']:.2f} chrF {cell['test_chrf']:.1f}, "
        f"decode {cell['decode_tok_s_b1']:.0f} / {cell['decode_tok_s_b32']:.0f} tok/s (batch 1 / 32)")
    return cell


def paired_speed(runs: dict[str, Path], files: dict, out: Path, rounds: int = 3, steps: int = 4) -> dict:
    """Transformer / LSTM speed ratios measured side by side in this process, alternating, so that
    the machine's changing load falls on both alike (the per-run numbers above are each taken
    under their own minutes' load): training = forward + backward + Adam step on the same
    batches (target tokens per second), decoding = greedy float32 sentences per second at batch
    1 and 32 on the same sentences. `rounds` alternations; the ratio of the summed times."""
    import torch
    import torch.nn.functional as F

    from ..data.readers import read_parallel
    from ..data.specials import PAD_ID
    from ..tasks.translate import EncodedSplit, Translator

    done = out / "paired.json"
    if done.exists():
        return json.loads(done.read_text(encoding="utf-8"))
    trs = {m: Translator.load(runs[m], compute_type="float32") for m in MODELS}
    recipe = trs["transformer"].recipe
    pairs = read_parallel(files["train"])[:3000]
    split = EncodedSplit(pairs, trs["transformer"].src_tok, trs["transformer"].tgt_tok, recipe.data, shuffle=True,
                         seed=0, max_len=recipe.data.max_len)
    batches = split.batches(0)[: rounds * steps]
    opts = {m: torch.optim.Adam(trs[m].model.parameters(), lr=1e-4) for m in MODELS}
    secs = {(m, k): 0.0 for m in MODELS for k in ("train", "b1", "b32")}
    made = {(m, k): 0 for m in MODELS for k in ("b1", "b32")}  # generated tokens
    tokens = sum(int((b.tgt_out != PAD_ID).sum()) for b in batches)
    srcs = [s for s, _ in read_parallel(files["test"])[:N_SPEED]]
    for m in MODELS:  # warm-up
        trs[m].translate(srcs[:2], beam=1)
    for r in range(rounds):
        for m in (MODELS if r % 2 == 0 else MODELS[::-1]):
            model = trs[m].model.train()
            t0 = time.perf_counter()
            for b in batches[r * steps:(r + 1) * steps]:
                logits = model(b.src, b.tgt_in)  # (B, T, V)
                loss = F.cross_entropy(logits.flatten(0, 1), b.tgt_out.flatten(), ignore_index=PAD_ID)
                opts[m].zero_grad()
                loss.backward()
                opts[m].step()
            secs[(m, "train")] += time.perf_counter() - t0
            model.eval()
            for name, size, part in (("b1", 1, srcs[r::rounds]), ("b32", 32, srcs)):
                t0 = time.perf_counter()
                for i in range(0, len(part), size):
                    made[(m, name)] += _generated(trs[m].hypotheses(part[i:i + size], beam=1, batch_tokens=10 ** 6))
                secs[(m, name)] += time.perf_counter() - t0
    tok_s = {(m, k): made[(m, k)] / secs[(m, k)] for m in MODELS for k in ("b1", "b32")}
    res = {"paired_train_ratio": secs[("lstm", "train")] / secs[("transformer", "train")],
           "paired_decode_b1_ratio": tok_s[("transformer", "b1")] / tok_s[("lstm", "b1")],
           "paired_decode_b32_ratio": tok_s[("transformer", "b32")] / tok_s[("lstm", "b32")],
           "paired_train_tgt_tok_s": {m: tokens / secs[(m, "train")] for m in MODELS}}
    atomic_write_text(done, json.dumps(res, indent=1) + "\n")
    return res


def bleu_paragraph(runs: pd.DataFrame, minutes: float) -> str:
    """What the test BLEU after the time budget says, per data set, from the numbers measured."""
    parts = []
    for data, cell in runs.groupby("data", sort=False):
        m = cell.groupby("model")["test_bleu"].agg(["mean", "std"])
        if {"transformer", "lstm"} - set(m.index):
            continue
        t, r = m.loc["transformer"], m.loc["lstm"]
        said = (f"{data}: Transformer {t['mean']:.2f} ± {t['std']:.2f} against LSTM {r['mean']:.2f} ± {r['std']:.2f}")
        if max(t["mean"], r["mean"]) < 2:
            said += f" (neither learns to translate {data} in {minutes:g} minutes on one thread: this verdict is about the first steps)"
        parts.append(said)
    return ("- **BLEU after the same minutes, not at convergence.** Test BLEU (mean ± std over seeds): "
            + "; ".join(parts) + ". These runs stop at a wall-clock budget on one CPU thread, long before "
            "either model converges, so the BLEU verdicts compare how far each gets in the same time. With enough "
            "data and compute the Transformer's advantage is well documented (Vaswani et al. 2017: 28.4 BLEU on "
            "WMT14 en-de against 24.6 for the GNMT LSTM); with long multilingual data its direct access to every "
            "source position matters more, which the recurrent encoder can only pass through its state.")


def time_to_reach(curve: list, level: float) -> float:
    """Seconds until the validation BLEU first reaches `level` (NaN: never in the budget)."""
    return next((t for t, b in curve if b >= level), float("nan"))


def checks(data: str) -> list[dict]:
    a, b = {"data": data, "model": "transformer"}, {"data": data, "model": "lstm"}
    return [
        {"says": f"{data}: Transformer trains > 3x faster (target tokens/s)", "kind": "ratio",
         "column": "train_tgt_tok_s", "a": a, "b": b, "region": {">": 3}},
        {"says": f"{data}: Transformer decodes > 3x faster, batch 1 (generated tokens/s)", "kind": "ratio",
         "column": "decode_tok_s_b1", "a": a, "b": b, "region": {">": 3}},
        {"says": f"{data}: Transformer decodes > 3x faster, batch 32 (generated tokens/s)", "kind": "ratio",
         "column": "decode_tok_s_b32", "a": a, "b": b, "region": {">": 3}},
        {"says": f"{data}: Transformer has the higher test BLEU", "kind": "diff",
         "column": "test_bleu", "a": a, "b": b, "region": {">": 0}},
        {"says": f"{data}: Transformer reaches the lower validation loss in the budget", "kind": "diff",
         "column": "best_valid_loss", "a": a, "b": b, "region": {"<": 0}},
    ]


def plot(runs: list[dict], level: dict, path: Path, run_dirs: Path) -> None:
    """One PNG: validation BLEU (top) and validation loss (bottom) against wall-clock minutes, a
    column per data set, every seed a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..train.curves import read_metrics

    datas = list(dict.fromkeys(r["data"] for r in runs))
    fig, axes = plt.subplots(2, len(datas), figsize=(6 * len(datas), 7.5), squeeze=False)
    colours = {"transformer": "tab:blue", "lstm": "tab:red"}
    for col, data in enumerate(datas):
        top, bottom = axes[0][col], axes[1][col]
        for r in (r for r in runs if r["data"] == data):
            label = f"{r['model']} ({r['params'] / 1e6:.2f}M)" if r["seed"] == 0 else None
            t, b = zip(*r["curve"]) if r["curve"] else ((), ())
            top.plot([x / 60 for x in t], b, color=colours[r["model"]], marker="o", ms=3, alpha=0.8, label=label)
            rows = [m for m in read_metrics(run_dirs / f"{data}-{r['model']}-s{r['seed']}" / "metrics.jsonl")
                    if m.get("split") == "valid" and "loss" in m]
            bottom.plot([m["elapsed"] / 60 for m in rows], [m["loss"] for m in rows], color=colours[r["model"]],
                        marker="o", ms=3, alpha=0.8, label=label)
        top.axhline(level[data], color="grey", ls=":", lw=1, label=f"time-to-BLEU level {level[data]:.2f}")
        top.set(title=f"{data}: validation BLEU (greedy, 100 sentences)", ylabel="BLEU")
        bottom.set(title=f"{data}: validation loss (NLL per target token)", ylabel="loss",
                   xlabel="wall-clock minutes (validation included)")
        for ax in (top, bottom):
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def run(out: Path, seeds: int = 3, quick: bool = False, log: Callable[[str], None] = print,
        minutes: float | None = None, datas: tuple[str, ...] = tuple(DATA)) -> Path:
    """Train every (data, model, seed) run (seed-major, the two models alternating, so that both see
    the same machine load), measure, judge; writes report.md, runs.csv and curves.png into `out`."""
    import torch

    out = Path(out)
    make_dirs(out)
    torch.set_num_threads(1)  # one thread a run: two experiments (one per data set) can share two cores
    minutes = minutes if minutes is not None else (0.15 if quick else 2.0)
    cells = []
    paired = []
    for data in datas:
        files = write_splits(data, out / "data")
        for seed in range(seeds):
            dirs = {m: out / "runs" / f"{data}-{m}-s{seed}" for m in MODELS}
            for model in MODELS:
                cells.append(one_run(data, model, seed, minutes, files, dirs[model], log))
    for data in datas:  # after every run: the side-by-side ratios (resumable, one file per pair)
        files = write_splits(data, out / "data")
        for seed in range(seeds):
            dirs = {m: out / "runs" / f"{data}-{m}-s{seed}" for m in MODELS}
            p = paired_speed(dirs, files, out / "runs" / f"{data}-s{seed}", rounds=2 if quick else 3)
            paired.append({"data": data, "seed": seed, **{k: v for k, v in p.items() if k.endswith("ratio")}})
            log(f"{data} seed {seed} side by side: Transformer / LSTM speed x{p['paired_train_ratio']:.2f} training, "
                f"x{p['paired_decode_b1_ratio']:.2f} decoding at batch 1, x{p['paired_decode_b32_ratio']:.2f} at batch 32")
    level = {d: 0.5 * min(c["best_valid_bleu"] for c in cells if c["data"] == d) for d in datas}
    from ..train.curves import read_metrics

    for c in cells:
        c["seconds_to_level"] = time_to_reach(c["curve"], level[c["data"]])
        losses = [m["loss"] for m in read_metrics(out / "runs" / f"{c['data']}-{c['model']}-s{c['seed']}" / "metrics.jsonl")
                  if m.get("split") == "valid" and "loss" in m]
        c["best_valid_loss"] = min(losses, default=float("nan"))
    runs = pd.DataFrame([{k: v for k, v in c.items() if k != "curve"} for c in cells])
    runs["cell"] = runs["data"] + "/" + runs["model"]
    runs["diverged"] = False
    outcomes = [evaluate_check(c, runs, ["data", "model"], quick) for d in datas for c in checks(d)]
    side = pd.DataFrame(paired)
    side["cell"], side["diverged"] = side["data"], False
    for d in datas:
        for col, what in (("paired_train_ratio", "trains"), ("paired_decode_b1_ratio", "decodes at batch 1"),
                          ("paired_decode_b32_ratio", "decodes at batch 32")):
            side[col + "_log"] = side[col].map(math.log)
            o = evaluate_check({"says": f"{d}: Transformer {what} > 3x faster (side by side, paired by seed)",
                                "kind": "value", "column": col + "_log", "a": {"data": d},
                                "region": {">": math.log(3)}}, side, ["data"], quick)
            if o.estimate is not None:  # the interval of the mean log ratio, shown as a ratio
                o.measured = (f"{col} = x{math.exp(o.estimate):.3g} [x{math.exp(o.low):.3g}, x{math.exp(o.high):.3g}] "
                              f"(95% CI, t over seeds of the log ratio, n = {int((side['data'] == d).sum())})")
            outcomes.append(o)
    atomic_write_text(out / "paired.csv", side.to_csv(index=False))
    dec = side[["paired_decode_b1_ratio", "paired_decode_b32_ratio"]].to_numpy()
    dec_lo, dec_hi = float(dec.min()), float(dec.max())
    atomic_write_text(out / "runs.csv", runs.to_csv(index=False))
    plot(cells, level, out / "curves.png", out / "runs")
    cols = ["params", "steps", "train_tgt_tok_s", "seconds_to_level", "best_valid_loss", "test_bleu", "test_chrf", "bleu_short",
            "bleu_medium", "bleu_long", "decode_tok_s_b1", "decode_tok_s_b32"]
    summary = runs.groupby(["data", "model"], sort=False)[cols].agg(["mean", "std"])
    table = ["| data | model | params | steps | target tok/s | s to level | best valid loss | test BLEU | chrF "
             "| BLEU short / medium / long | decode tok/s b1 | b32 |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (data, model), r in summary.iterrows():
        f = lambda c, p=1: f"{r[(c, 'mean')]:.{p}f} ± {r[(c, 'std')]:.{p}f}"  # noqa: E731
        table.append(f"| {data} | {model} | {r[('params', 'mean')] / 1e6:.2f}M | {r[('steps', 'mean')]:.0f} | "
                     f"{f('train_tgt_tok_s', 0)} | {f('seconds_to_level', 0)} | {f('best_valid_loss', 3)} | {f('test_bleu', 2)} | {f('test_chrf')} | "
                     f"{r[('bleu_short', 'mean')]:.1f} / {r[('bleu_medium', 'mean')]:.1f} / {r[('bleu_long', 'mean')]:.1f} | "
                     f"{f('decode_tok_s_b1', 0)} | {f('decode_tok_s_b32', 0)} |")
    command = (f"scratchformer experiment transformer-vs-lstm --seeds {seeds}{' --quick' if quick else ''}"
               f" --set minutes={minutes:g} --out {out}")
    report = "\n".join([
        "# Experiment `transformer-vs-lstm`", "",
        "> **中文**：“在我的多语言翻译项目中，Transformer 比 LSTM 快 3 倍以上，且 BLEU 得分更高”——"
        "同一翻译任务、相近参数量、相同时间预算与种子，比较训练吞吐、解码速度与 BLEU。",
        ">", "> **English**: \"In my multilingual translation project the Transformer was more than 3x faster than "
        "an LSTM, with a higher BLEU\": the same translation task, comparable parameter counts, the same time budget "
        "and seeds; training throughput, decoding speed and BLEU.", "",
        "## Verdict", "", verdict_table(outcomes),
        "## Numbers (mean ± std over seeds)", "", *table, "",
        "Side by side (both models in one process, alternating; Transformer / LSTM speed, per seed): "
        + "; ".join(f"{r.data} seed {r.seed}: training x{r.paired_train_ratio:.2f}, decoding x{r.paired_decode_b1_ratio:.2f} "
                    f"(batch 1) / x{r.paired_decode_b32_ratio:.2f} (batch 32)" for r in side.itertuples()) + ".", "",
        f"Time-to-BLEU level: half of the lowest best validation BLEU of that data set's runs "
        f"({', '.join(f'{d} {v:.2f}' for d, v in level.items())}), the same for both models; NaN = not reached.", "",
        "![curves](curves.png)", "",
        "## The tutorial's setting (a GPU, long multilingual data) against ours", "",
        "- **Training speed grows with parallel hardware and length.** With teacher forcing the Transformer computes "
        "every target position of a batch in one matrix product per layer; the attention decoder of the LSTM must "
        "take its T steps one after another (step t's query is step t−1's state). On one CPU thread both are bound "
        "by arithmetic, which is about the same per token at equal parameters, so the ratio sits near 1. A GPU "
        "runs the Transformer's big products at a high share of its peak while the LSTM's T small steps are bound "
        "by kernel launches and latency; longer sentences make T larger. Both push the training ratio up, to the "
        "3-10x that GPU papers report; a multilingual corpus of long sentences on a GPU is where \"more than 3x\" "
        "should hold.",
        "- **Decoding does not gain the same way.** Both decoders emit one token per step. Per step the LSTM "
        "runs one small recurrence and one attention over the source; the Transformer runs every layer's "
        "self-attention over its growing cache plus cross-attention. With a KV cache (as here) the Transformer "
        f"generated tokens x{dec_lo:.1f} to x{dec_hi:.1f} as fast as the LSTM on this CPU (side by side, batch 1 and "
        "32, every seed; the LSTM step is more, smaller operations); on a GPU "
        "at batch 1 both are launch-bound, and the gap depends on the number of kernels per step more than on "
        "the model. \"3x faster\" is a training-time claim; for decoding we would not expect it in general.",
        bleu_paragraph(runs, minutes), "",
        "## Setup", "",
        f"- models: `model.kind=transformer` (d_model {D_TRANSFORMER}, 4 heads, d_ff 512, 2 + 2 layers, Pre-LN) and "
        f"`model.kind=lstm` (d_model {D_LSTM}: bidirectional 2-layer encoder of {D_LSTM // 2} units each way, "
        f"2-layer decoder of {D_LSTM} units fed [embedding; additive-attention context]); dropout 0.1, tied output "
        "(and shared embeddings with the joint en-fr vocabulary)",
        f"- data: hsk-zh-en (char -> BPE 2000) and en-fr (`fr-en` reversed, joint BPE 4000); all training pairs, the "
        f"first {N_VALID} validation pairs (100 decoded for validation BLEU every 80 steps), the first {N_TEST} test pairs",
        f"- training: Adam (0.9, 0.98), peak lr 2e-3, noam warmup 60, weight decay 0.01, label smoothing 0.1, {MAX_TOKENS} tokens "
        f"a batch, float32, `train.max_minutes={minutes:g}` per run (validation included), one thread a run (`torch.set_num_threads(1)`); "
        f"{seeds} seeds; the runs of the two models alternate so that both see the same machine load",
        "- test: greedy, the run's best weights; BLEU/chrF by sacrebleu "
        f"(`{cells[0]['bleu_signature'] if cells else ''}` on en-fr/hsk targets, English or French: 13a)",
        f"- decoding speed: greedy, float32, the first {N_SPEED} test sources, one call per sentence (batch 1) or "
        "per 32 sentences (batch 32); generated tokens (with <eos>) per second, so that a model that stops early "
        "does not look faster",
        f"- machine: {cpu_name()}, 2 cores shared with other jobs (absolute numbers are depressed; the ratios are "
        f"taken under the same load), {time.strftime('%Y-%m-%d')}",
        f"- reproduce: `{command}`", "",
    ])
    atomic_write_text(out / "report.md", report + "\n")
    return report
