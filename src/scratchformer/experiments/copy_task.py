"""`scratchformer experiment copy-task [--bugs]`: The Annotated Transformer's first check.

An encoder-decoder (`models.Seq2Seq`, tiny) learns to copy random symbol sequences: source
`a b c d`, target `<bos> a b c d <eos>`. A correct implementation learns it in about a minute on
a CPU and greedy decoding then copies nearly every sequence. With `--bugs` the same task runs
again with each classic bug planted, one at a time, and the report shows the symptom a learner
would see beside the healthy run:

  no-causal-mask   the decoder's self-attention sees the future: the training loss collapses (it
                   reads the next target token) but greedy decoding, which has no future, fails
  padding          the source padding is not masked: attention mass lands on padding, and the
                   same sentence decodes differently when its batch has more padding
  no-scaling       scores Q Kᵀ without 1/√d_k: sharper attention (on this small task, no loss of
                   accuracy)
  no-positions     no positional encoding: the encoder sees a bag of symbols: right symbols,
                   wrong order
  target-shift     the decoder input is the target itself, not shifted right: it learns to copy
                   its own input token (loss ~0, the source ignored) and greedy decoding fails

The bugs live here, in the harness, and never in the library: each is a hook put on one model
for one run and taken off after (`planted`), a forward pre-hook, a replaced method or attribute
of that instance, or a different batch (the shift). No flag of `scratchformer.nn` or `models`
turns them on.

`doctor`'s findings name what they can on each run (`doctor.md` beside it): attention on future
positions, attention on padding, identity heads, and greedy accuracy far below teacher-forced
accuracy (the decoder "cheated").
"""
from __future__ import annotations

import contextlib
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

from ..data.specials import BOS_ID, EOS_ID, NUM_SPECIALS, PAD_ID
from ..errors import UserError
from ..fileio import atomic_write_text, make_dirs, save_figure
from ..models.seq2seq import Seq2Seq, Seq2SeqConfig
from ..nn import DecoderBlock, MultiHeadAttention, TransformerConfig
from .report import cpu_name, verdict_table
from .verdict import evaluate_check

N_SYMBOLS = 10
VOCAB = NUM_SPECIALS + N_SYMBOLS  # ids 5..14 are the symbols
MIN_LEN, MAX_LEN = 4, 10
EXTRA_PAD = 8  # the padding test: the same sources with this many more padding tokens


@dataclass
class Bug:
    name: str
    what: str  # the bug, as a learner writes it
    symptom: str  # what they would see


BUGS = {b.name: b for b in [
    Bug("no-causal-mask", "the decoder's self-attention has no causal mask (is_causal=False)",
        "the training loss falls like the healthy run's and teacher-forced accuracy is ~100%, but greedy "
        "decoding fails: in training each position read the next target token"),
    Bug("padding", "the source padding mask is not passed to the encoder nor to cross-attention",
        "attention mass on padding; the same sources decode worse when the batch has more padding"),
    Bug("no-scaling", "attention scores Q Kᵀ without the 1/√d_k",
        "sharper attention (lower entropy; the doctor flags heads attending only to themselves); on "
        "this small task accuracy does not suffer and the loss even falls earlier"),
    Bug("no-positions", "no positional encoding added to the embeddings",
        "the right symbols in the wrong order: greedy accuracy by position is low while the bag of "
        "symbols is nearly right"),
    Bug("target-shift", "the decoder input is the target itself, not shifted right by <bos>",
        "loss ~0 from the first steps (it copies its own input token), the cross-attention goes "
        "uniform (it ignores the source), and greedy decoding fails"),
]}


# ---------------------------------------------------------------- data
def sequences(n: int, g: torch.Generator) -> list[list[int]]:
    lengths = torch.randint(MIN_LEN, MAX_LEN + 1, (n,), generator=g).tolist()
    return [torch.randint(NUM_SPECIALS, VOCAB, (t,), generator=g).tolist() for t in lengths]


def batch(seqs: list[list[int]], shift: bool = True, extra_pad: int = 0) -> dict[str, torch.Tensor]:
    """src `(B, S)`, tgt_in and tgt_out `(B, T)`, right-padded with <pad> = 0. `shift=False` is
    the off-by-one bug: tgt_in = tgt_out (the decoder is given the token it must predict)."""
    S = max(map(len, seqs)) + extra_pad
    T = max(map(len, seqs)) + 1
    src = torch.full((len(seqs), S), PAD_ID)
    tin, tout = torch.full((len(seqs), T), PAD_ID), torch.full((len(seqs), T), PAD_ID)
    for i, s in enumerate(seqs):
        src[i, :len(s)] = torch.tensor(s)
        tout[i, :len(s) + 1] = torch.tensor(s + [EOS_ID])
        tin[i, :len(s) + 1] = torch.tensor([BOS_ID] + s) if shift else tout[i, :len(s) + 1]
    return {"src": src, "tgt_in": tin, "tgt_out": tout}


# ---------------------------------------------------------------- the planted bugs (harness only)
@contextlib.contextmanager
def planted(model: Seq2Seq, bug: str | None) -> Iterator[None]:
    """Plant `bug` in this one model instance while the block runs; the model is healthy again
    after it. `target-shift` is in the batches (`batch(shift=False)`), not in the model."""
    undo: list[Callable[[], None]] = []
    if bug == "no-causal-mask":
        def no_causal(module, args, kwargs):
            return args, {**kwargs, "is_causal": False}
        for layer in model.modules():
            if isinstance(layer, DecoderBlock):
                undo.append(layer.register_forward_pre_hook(no_causal, with_kwargs=True).remove)
    elif bug == "padding":
        def encode_without_mask(src):
            memory = model.transformer.encoder(model.src_embed(src))  # no padding mask
            return memory, torch.ones_like(src, dtype=torch.bool)  # and every key "real" for cross-attention
        model.encode = encode_without_mask  # this instance only
        undo.append(lambda: delattr(model, "encode"))
    elif bug == "no-scaling":
        for m in model.modules():
            if isinstance(m, MultiHeadAttention):
                old = m.scale
                m.scale = 1.0
                undo.append(lambda m=m, old=old: setattr(m, "scale", old))
    elif bug == "no-positions":
        for emb in {id(e): e for e in (model.src_embed, model.tgt_embed)}.values():
            old = emb.position
            emb.position = None
            undo.append(lambda emb=emb, old=old: setattr(emb, "position", old))
    elif bug not in (None, "target-shift"):
        raise UserError(f"unknown bug {bug!r}; known: {', '.join(BUGS)}")
    try:
        yield
    finally:
        for u in reversed(undo):
            u()


# ---------------------------------------------------------------- model, training, measurements
def new_model(seed: int) -> Seq2Seq:
    torch.manual_seed(seed)
    tc = TransformerConfig(d_model=64, n_heads=2, d_ff=128, n_layers=2, dropout=0.0, max_len=64)
    return Seq2Seq(Seq2SeqConfig(src_vocab_size=VOCAB, tgt_vocab_size=VOCAB, transformer=tc, tie_output=True))


def loss_and_accuracy(model: Seq2Seq, b: dict) -> tuple[torch.Tensor, float]:
    logits = model(b["src"], b["tgt_in"])  # (B, T, V)
    real = b["tgt_out"] != PAD_ID
    loss = F.cross_entropy(logits.flatten(0, 1), b["tgt_out"].flatten(), ignore_index=PAD_ID)
    acc = float(((logits.argmax(-1) == b["tgt_out"]) & real).sum() / real.sum())
    return loss, acc


@torch.no_grad()
def greedy(model: Seq2Seq, seqs: list[list[int]], extra_pad: int = 0) -> dict[str, float]:
    """Greedy decoding (the library's `greedy_decode`, KV cache on) of the sources: token
    accuracy by position, exact copies, and the bag-of-symbols overlap (order ignored)."""
    from collections import Counter

    from ..tasks.translate.decoding import DecodeConfig, greedy_decode

    src = batch(seqs, extra_pad=extra_pad)["src"]
    hyps = greedy_decode(model, src, DecodeConfig(beam=1, max_len_ratio=1.0, max_len_offset=2))
    pos = exact = bag = total = 0
    for s, h in zip(seqs, hyps):
        out = h.tokens
        pos += sum(a == b for a, b in zip(s, out))
        exact += out == s
        bag += sum((Counter(s) & Counter(out)).values())
        total += len(s)
    return {"greedy_accuracy": pos / total, "greedy_exact": exact / len(seqs), "bag_accuracy": bag / total}


def train_one(bug: str | None, seed: int, steps: int, log_every: int = 10) -> dict:
    """Train one model (bug planted or healthy); its curve, measurements and the model."""
    g = torch.Generator().manual_seed(seed)
    model = new_model(seed)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50))
    valid = sequences(256, torch.Generator().manual_seed(1000 + seed))
    shift = bug != "target-shift"
    curve = []
    t0 = time.perf_counter()
    with planted(model, bug):
        for step in range(1, steps + 1):
            model.train()
            loss, acc = loss_and_accuracy(model, batch(sequences(64, g), shift))
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            if step % log_every == 0 or step == steps:
                curve.append({"step": step, "loss": float(loss.detach()), "accuracy": acc})
        seconds = time.perf_counter() - t0
        model.eval()
        with torch.no_grad():
            vloss, tf_acc = loss_and_accuracy(model, batch(valid, shift))
        measures = {"valid_loss": float(vloss), "teacher_forced_accuracy": tf_acc, **greedy(model, valid)}
        measures["padded_greedy_accuracy"] = greedy(model, valid, EXTRA_PAD)["greedy_accuracy"]
        views = attention_views(model, valid[:64], shift)
    return {"bug": bug or "healthy", "seed": seed, "curve": curve, "seconds": seconds,
            "final_train_loss": curve[-1]["loss"], **measures, "views": views, "model": model}


@torch.no_grad()
def attention_views(model: Seq2Seq, seqs: list[list[int]], shift: bool) -> dict:
    """The three kinds of attention on `seqs` (sources padded by EXTRA_PAD, so padding shows),
    as `diagnostics.subject.AttentionBatch`es for the doctor's statistics."""
    from ..tasks.inspection import AttentionBatch

    b = batch(seqs, shift, extra_pad=EXTRA_PAD)
    memory, src_mask = model.encode(b["src"])
    # the encoder's weights, with whatever mask this (possibly buggy) model's encode uses
    x = model.src_embed(b["src"])
    mask = None if bool(src_mask.all()) else src_mask
    enc_w = model.transformer.encoder(x, mask, need_weights=True)[1]
    _, dec = model.decode(b["tgt_in"], memory, src_mask, need_weights=True)
    src_real, tgt_real = b["src"] != PAD_ID, b["tgt_out"] != PAD_ID
    return {
        "encoder self-attention": AttentionBatch("encoder self-attention", enc_w, src_real, src_real),
        "decoder self-attention": AttentionBatch("decoder self-attention", [s for s, _ in dec], tgt_real, tgt_real,
                                                 causal=True),
        "cross-attention": AttentionBatch("cross-attention", [c for _, c in dec], tgt_real, src_real,
                                          self_attention=False),
    }


# ---------------------------------------------------------------- what doctor says about a run
def doctor_findings(result: dict) -> list:
    """The doctor's task-free findings on this run's attention and decoding."""
    from ..diagnostics import findings as F
    from ..diagnostics.measures import ViewStats

    found, stats = [], {}
    for name, ab in result["views"].items():
        vs = ViewStats(name, len(ab.layers), ab.layers[0].shape[1], ab.self_attention, ab.causal)
        vs.add(ab)
        r = vs.result()
        r["padded_keys"] = vs.padded_keys
        stats[name] = r
        found.append(F.padding(name, r))
        if "future_mass" in r:
            found.append(F.future(name, r))
        if ab.self_attention:
            found += [f for f in F.identity_and_fixed(name, r, vs.top_column_name) if f.key == "identity_heads"]
        found.append(F.shapes(name, r))
    found.append(F.greedy_gap(result["teacher_forced_accuracy"], result["greedy_accuracy"]))
    found.sort(key=lambda f: F.LEVELS.index(f.level))
    result["attention_entropy"] = {n: float(r["entropy"].mean()) for n, r in stats.items()}
    return found


def save_run(result: dict, folder: Path) -> None:
    """The run's folder: metrics.jsonl (the curve), measures.json, model.safetensors, doctor.md."""
    from ..diagnostics.doctor import Report, markdown
    from ..train.checkpoint import save_weights

    make_dirs(folder)
    atomic_write_text(folder / "metrics.jsonl", "".join(json.dumps({"split": "train", **c}) + "\n" for c in result["curve"]))
    keep = {k: v for k, v in result.items() if k not in ("curve", "views", "model", "findings")}
    atomic_write_text(folder / "measures.json", json.dumps(keep, indent=1) + "\n")
    save_weights(result["model"], folder / "model.safetensors", {"bug": result["bug"]})
    report = Report(folder, "copy-task", f"random symbol sequences (bug: {result['bug']})", 64,
                    [f"planted bug: {BUGS[result['bug']].what}" if result["bug"] in BUGS else "healthy run"],
                    result["findings"])
    atomic_write_text(folder / "doctor.md", markdown(report))


# ---------------------------------------------------------------- the experiment
CHECKS = [
    {"says": "healthy: greedy decoding copies almost every sequence (exact copies > 90%)", "kind": "value",
     "column": "greedy_exact", "a": {"bug": "healthy"}, "region": {">": 0.9}},
    {"says": "no causal mask: teacher-forced accuracy as high as the healthy run's (within 5 points)", "kind": "diff",
     "column": "teacher_forced_accuracy", "a": {"bug": "no-causal-mask"}, "b": {"bug": "healthy"}, "region": {"within": 0.05}},
    {"says": "no causal mask: greedy accuracy at least 50 points below the healthy run's", "kind": "diff",
     "column": "greedy_accuracy", "a": {"bug": "no-causal-mask"}, "b": {"bug": "healthy"}, "region": {"<": -0.5}},
    {"says": "padding not masked: with 8 more padding tokens, greedy accuracy falls below the healthy run's", "kind": "diff",
     "column": "padded_greedy_accuracy", "a": {"bug": "padding"}, "b": {"bug": "healthy"}, "region": {"<": 0}},
    {"says": "no 1/√d_k: sharper cross-attention (lower entropy) than the healthy run", "kind": "diff",
     "column": "cross_attention_entropy", "a": {"bug": "no-scaling"}, "b": {"bug": "healthy"}, "region": {"<": 0}},
    {"says": "no positions: greedy accuracy at least 50 points below the healthy run's", "kind": "diff",
     "column": "greedy_accuracy", "a": {"bug": "no-positions"}, "b": {"bug": "healthy"}, "region": {"<": -0.5}},
    {"says": "no positions: the bag of symbols is right more often than the order (bag − positional > 30 points)",
     "kind": "value", "column": "bag_minus_greedy", "a": {"bug": "no-positions"}, "region": {">": 0.3}},
    {"says": "target not shifted: final training loss below the healthy run's", "kind": "diff",
     "column": "final_train_loss", "a": {"bug": "target-shift"}, "b": {"bug": "healthy"}, "region": {"<": 0}},
    {"says": "target not shifted: greedy accuracy at least 50 points below the healthy run's", "kind": "diff",
     "column": "greedy_accuracy", "a": {"bug": "target-shift"}, "b": {"bug": "healthy"}, "region": {"<": -0.5}},
]

COLUMNS = [("final_train_loss", "final train loss", "{:.4f}"), ("teacher_forced_accuracy", "teacher-forced acc.", "{:.3f}"),
           ("greedy_accuracy", "greedy acc.", "{:.3f}"), ("greedy_exact", "exact copies", "{:.3f}"),
           ("padded_greedy_accuracy", "greedy acc., +8 padding", "{:.3f}"), ("bag_accuracy", "bag of symbols", "{:.3f}"),
           ("cross_attention_entropy", "cross-attn entropy", "{:.3f}"), ("cpu_s", "CPU s", "{:.0f}")]


def parse_bugs(bugs: str | None) -> list[str]:
    if not bugs:
        return []
    names = list(BUGS) if bugs == "all" else [b.strip() for b in bugs.split(",") if b.strip()]
    unknown = [b for b in names if b not in BUGS]
    if unknown:
        raise UserError(f"unknown bug(s) {', '.join(unknown)}; known: {', '.join(BUGS)} (or all)")
    return names


def run(out: Path, seeds: int = 3, quick: bool = False, log: Callable[[str], None] = print,
        bugs: str | None = None, steps: int | None = None) -> Path:
    """Train the healthy copy model (and each planted bug) over `seeds`; write `report.md`,
    `curves.png`, `accuracy.png`, `attention.png` and one folder per run into `out`."""
    import pandas as pd

    out = make_dirs(Path(out))
    steps = steps or (40 if quick else 300)
    names = [None] + parse_bugs(bugs)
    results = []
    for bug in names:
        for seed in range(seeds):
            t0 = time.process_time()
            r = train_one(bug, seed, steps)
            r["cpu_s"] = time.process_time() - t0
            r["findings"] = doctor_findings(r)
            r["cross_attention_entropy"] = r["attention_entropy"]["cross-attention"]
            r["bag_minus_greedy"] = r["bag_accuracy"] - r["greedy_accuracy"]
            save_run(r, out / "runs" / r["bug"] / f"seed{seed}")
            problems = [f.title for f in r["findings"] if f.level == "error"]
            log(f"{r['bug']} seed {seed}: train loss {r['final_train_loss']:.4f}, teacher-forced "
                f"{r['teacher_forced_accuracy']:.3f}, greedy {r['greedy_accuracy']:.3f} ({r['cpu_s']:.0f} CPU s)"
                + (f"; doctor: {'; '.join(problems)}" if problems else ""))
            results.append(r)
    runs = pd.DataFrame([{k: v for k, v in r.items() if not isinstance(v, (list, dict)) and k != "model"}
                         for r in results])
    runs["cell"], runs["diverged"] = runs["bug"], False
    atomic_write_text(out / "runs.csv", runs.to_csv(index=False))  # pandas' to_csv(path) follows a link
    outcomes = [evaluate_check(c, runs, ["bug"], quick) for c in CHECKS]
    figures = plot_all(results, out)
    command = (f"scratchformer experiment copy-task --seeds {seeds}{' --quick' if quick else ''}"
               f"{' --bugs ' + bugs if bugs else ''} --out {out}")
    report = write_report(out, results, runs, outcomes, figures, command, steps, seeds)
    for o in outcomes:
        if o.verdict != "not run":
            log(f"{o.says}: {o.verdict} ({o.measured})")
    return report


def plot_all(results: list[dict], out: Path) -> list[str]:
    from .plots import _pyplot

    plt = _pyplot()
    bugs = list(dict.fromkeys(r["bug"] for r in results))
    colors = {b: plt.cm.tab10(i) for i, b in enumerate(bugs)}
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for r in results:
        ax.plot([c["step"] for c in r["curve"]], [max(c["loss"], 1e-5) for c in r["curve"]], color=colors[r["bug"]],
                alpha=0.8, label=r["bug"] if r["seed"] == 0 else None)
    ax.set(yscale="log", xlabel="step", ylabel="training loss (log scale)", title="copy task: training loss")
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, out / "curves.png", dpi=110)
    plt.close(fig)

    keys = [("teacher_forced_accuracy", "teacher-forced"), ("greedy_accuracy", "greedy"),
            ("padded_greedy_accuracy", "greedy, +8 padding"), ("bag_accuracy", "bag of symbols")]
    fig, ax = plt.subplots(figsize=(max(6.5, 1.3 * len(bugs) + 2), 3.8))
    width = 0.8 / len(keys)
    for j, (k, label) in enumerate(keys):
        means = [sum(r[k] for r in results if r["bug"] == b) / sum(r["bug"] == b for r in results) for b in bugs]
        ax.bar([i + (j - 1.5) * width for i in range(len(bugs))], means, width, label=label)
    ax.set_xticks(range(len(bugs)), bugs, fontsize=8)
    ax.set(ylim=(0, 1.05), ylabel="token accuracy (mean over seeds)", title="copy task: what each bug does to accuracy")
    ax.legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    save_figure(fig, out / "accuracy.png", dpi=110)
    plt.close(fig)

    views = ["encoder self-attention", "decoder self-attention", "cross-attention"]
    first = [next(r for r in results if r["bug"] == b) for b in bugs]
    fig, grid = plt.subplots(len(first), 3, figsize=(8.4, 2.5 * len(first)), squeeze=False)
    for row, r in zip(grid, first):
        for ax, v in zip(row, views):
            ab = r["views"][v]
            w = ab.layers[-1][0].mean(0)  # (Tq, Tk): last layer, first sequence, mean over heads
            ax.imshow(w.numpy(), vmin=0, vmax=1, cmap="viridis")
            ax.set_title(f"{r['bug']}: {v}, last layer", fontsize=7)
            ax.set_xlabel("key (source +8 padding)" if v != "decoder self-attention" else "key", fontsize=6)
            ax.set_ylabel("query", fontsize=6)
            ax.tick_params(labelsize=5)
    fig.tight_layout()
    save_figure(fig, out / "attention.png", dpi=110)
    plt.close(fig)
    return ["curves.png", "accuracy.png", "attention.png"]


def write_report(out: Path, results: list[dict], runs, outcomes, figures: list[str], command: str,
                 steps: int, seeds: int) -> Path:
    bugs = list(dict.fromkeys(r["bug"] for r in results))
    head = "| run | " + " | ".join(label for _, label, _ in COLUMNS) + " | doctor says |"
    table = [head, "|" + "---|" * (len(COLUMNS) + 2)]
    for b in bugs:
        rs = runs[runs["bug"] == b]
        cells = []
        for k, _, fmt in COLUMNS:
            m, s = rs[k].mean(), rs[k].std()
            cells.append(fmt.format(m) + ("" if s != s else f" ± {fmt.format(s)}"))
        errors = sorted({f.title.split(": ", 1)[-1] for r in results if r["bug"] == b for f in r["findings"]
                         if f.level in ("error", "warning")})
        table.append(f"| {b} | " + " | ".join(cells) + f" | {'; '.join(errors) or 'nothing wrong'} |")
    lines = [
        "# Experiment `copy-task`", "",
        "> **中文**：复制任务（The Annotated Transformer 的第一个检查）：一个很小的编码器-解码器学会复制随机符号序列；"
        "再把经典错误逐个“埋”进去（解码器没有因果掩码、padding 没有掩码、没有 1/√d_k、没有位置编码、目标没有右移一位），"
        "看每个错误在损失曲线、准确率和注意力图上留下什么症状。",
        ">", "> **English**: the copy task (The Annotated Transformer's first check): a tiny encoder-decoder learns to "
        "copy random symbol sequences; then each classic bug is planted in turn (no causal mask in the decoder, padding "
        "not masked, no 1/√d_k, no positions, target not shifted) to show the symptom each one leaves in the loss "
        "curve, the accuracy and the attention maps.", "",
        "## Verdict", "", verdict_table([o for o in outcomes if o.verdict != "not run"]),
        "## What a learner sees", "",
        *[f"- **{b.name}** ({b.what}): {b.symptom}." for b in BUGS.values() if b.name in bugs], "",
        *table, "",
        "Mean ± std over seeds. Accuracies are per target token on 256 held-out sequences: *teacher-forced* = the "
        "decoder is given the true prefix (what training sees); *greedy* = it reads its own output "
        "(`greedy_decode`, KV cache), what a user gets; *+8 padding* = the same sources with 8 more padding tokens; "
        "*bag of symbols* = right symbols in any order. *doctor says*: the errors and warnings of the doctor's "
        "findings on the run (`runs/<run>/seed<k>/doctor.md`).", "",
        "![training loss](curves.png)", "", "![accuracy](accuracy.png)", "",
        "Attention maps (last layer, mean over heads, one held-out sequence whose source carries 8 extra padding "
        "keys): healthy cross-attention is a diagonal (output t reads source t) and the decoder's self-attention "
        "is lower-triangular. Without the causal mask the decoder looks *ahead*; with the unshifted target the "
        "cross-attention is uniform (the source is not needed to copy the input token); without positions the cross-attention loses its diagonal; without the padding mask "
        "the last columns light up.", "",
        "![attention maps](attention.png)", "",
        "## Setup", "",
        f"- model: `models.Seq2Seq`, d_model 64, 2 heads (d_k 32), d_ff 128, 2 + 2 layers, no dropout, tied output; "
        f"vocabulary {N_SYMBOLS} symbols + 5 specials; sources of {MIN_LEN}–{MAX_LEN} symbols",
        f"- training: Adam (β 0.9/0.98) lr 1e-3 with 50 warmup steps, gradient clipping 1.0, batch 64, {steps} steps, "
        f"{seeds} seed(s) per run; fresh random sequences every step",
        f"- the bugs are hooks on one model instance inside `scratchformer.experiments.copy_task.planted` "
        "(a forward pre-hook, a replaced method or attribute), or a batch built without the shift; the library has "
        "no switch for them",
        f"- {cpu_name()}, shared machine, {time.strftime('%Y-%m-%d')}; CPU s = process CPU seconds per run "
        "(wall time on a loaded machine is several times larger)",
        f"- reproduce: `{command}`", "",
        "<details><summary>How the verdict is decided</summary>", "",
        "Welch's 95% interval over seeds of the difference between the bug's run and the healthy run (or a "
        "one-sample t interval for one run's value): **supported** when the whole interval lies in the claimed "
        "region, **not supported** when it lies outside, otherwise **inconclusive at this noise level** "
        "(see `experiments/verdict.py`).", "", "</details>", "",
        "Files: `runs.csv` (one row per run), `runs/<run>/seed<k>/` (metrics.jsonl, measures.json, "
        "model.safetensors, doctor.md).", ""]
    path = out / "report.md"
    atomic_write_text(path, "\n".join(lines))
    return path
