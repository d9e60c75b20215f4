"""A language model at contexts longer than it was trained on: loss per position bucket.

`evaluate_context(lm, text, context=4 * L)` cuts the text into non-overlapping windows of
`context` targets and records the loss at every position of the window. Positions are grouped
in doubling buckets: [0, L), [L, 2L), [2L, 4L), ... (L = the training context), so one number
says how the model does where it was trained and one how it does at each distance beyond.

One evaluation at the longest context also gives the loss at every shorter one: in a causal
model the prediction at position p of a window depends only on tokens 0..p of that window, so
the first c positions of a long window are scored exactly as a window of c would be
(`by_context`: the mean over positions < c, for c = L, 2L, 4L, ...). With `rope_scaling` the
factor is fixed by `context` (s = context / L) and applies to every position.

RoPE at inference (`rope_scaling`, no fine-tuning):
  - `linear`: position interpolation (Chen et al. 2023): positions divided by s;
  - `ntk`: NTK-aware scaling: base multiplied by s^(D/(D-2)) (D = head dimension).
Learned positions have no row past `model.transformer.max_len`: a longer context is refused.
"""
from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F

from ...errors import UserError
from ...fileio import save_figure
from ...nn.position import ROPE_SCALINGS, scaled_rope
from ..runs import eval_mode
from .data import chars_per_token, encode_text, fixed_windows
from .task import LN2


def position_buckets(train_context: int, context: int) -> list[tuple[int, int]]:
    """[0, L), [L, 2L), [2L, 4L), ... up to `context` (the last bucket may be cut short)."""
    edges = [0, train_context]
    while edges[-1] < context:
        edges.append(edges[-1] * 2)
    edges = [min(e, context) for e in edges]
    return [(a, b) for a, b in zip(edges, edges[1:]) if b > a]


def check_context(lm, context: int) -> None:
    """A one-line error where the model cannot see `context` positions."""
    if context < 1:
        raise UserError(f"--context must be >= 1, got {context}")
    limit = lm.model.max_positions
    if limit is not None and context > limit:
        raise UserError(f"this model has learned positions: its table has model.transformer.max_len={limit} rows, "
                        f"so it cannot read a context of {context}; use --context <= {limit} "
                        "(or train with rope, sinusoidal or alibi positions, which have no such limit)")


@contextlib.contextmanager
def rope_scaling(model, kind: str | None, factor: float) -> Iterator[None]:
    """Within the block, the model's RoPE is stretched `factor` times (`linear` or `ntk`)."""
    if kind is None or factor == 1.0:
        yield
        return
    if kind not in ROPE_SCALINGS:
        raise UserError(f"--rope-scaling must be one of {ROPE_SCALINGS}, got {kind!r}")
    stack = model.encoder
    if stack.rope is None:
        raise UserError(f"--rope-scaling works for RoPE models; this one has "
                        f"{model.cfg.transformer.position} positions")
    plain = stack.rope
    stack.rope = scaled_rope(plain, kind, factor)  # every layer reads the stack's rope
    try:
        yield
    finally:
        stack.rope = plain


@torch.no_grad()
def position_losses(model, batches) -> tuple[np.ndarray, np.ndarray]:
    """Summed next-token loss `(T,)` and target count `(T,)` at each position of the windows."""
    sums, counts = None, None
    for b in batches:
        logits = model(b.ids[:, :-1])  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), b.ids[:, 1:].flatten(), reduction="none")
        loss = loss.view(b.ids.shape[0], -1).double()  # (B, T)
        s, c = loss.sum(0).numpy(), np.full(loss.shape[1], loss.shape[0], dtype=np.float64)
        sums, counts = (s, c) if sums is None else (sums + s, counts + c)
    return sums, counts


def _entry(loss_sum: float, tokens: float, cpt: float) -> dict[str, float]:
    loss = loss_sum / max(tokens, 1.0)
    return {"loss": loss, "perplexity": math.exp(loss) if loss < 700 else float("inf"),
            "bpc": loss / cpt / LN2, "tokens": tokens}


def evaluate_context(lm, text: str, context: int, rope: str | None = None, max_windows: int | None = None,
                     tokens_per_batch: int | None = None) -> dict:
    """Loss of `lm` on `text` in windows of `context` targets, overall, per position bucket,
    per shorter context, and at every position (`position_loss`, for the plot)."""
    check_context(lm, context)
    L = lm.context
    factor = max(1.0, context / L) if rope else 1.0
    ids = encode_text(lm.tokenizer, text)
    if len(ids) <= context + 1:
        raise UserError(f"the text has {len(ids)} tokens; evaluation at --context {context} needs more than "
                        f"{context + 1} (use a longer text or a smaller --context)")
    budget = tokens_per_batch or lm.recipe.data.eval_batch_size * L  # as many tokens per batch as in training eval
    batches = fixed_windows(ids, context, max(1, budget // context), max_windows)
    with eval_mode(lm.model), rope_scaling(lm.model, rope, factor):
        sums, counts = position_losses(lm.model, batches)
    cpt = chars_per_token(lm.tokenizer, text, ids)
    out = {"context": context, "train_context": L, "position": lm.recipe.model.transformer.position,
           "rope_scaling": rope if factor > 1.0 else None, "rope_factor": factor,
           "windows": int(counts[0]), **_entry(float(sums.sum()), float(counts.sum()), cpt)}
    out["buckets"] = [{"from": a, "to": b, **_entry(float(sums[a:b].sum()), float(counts[a:b].sum()), cpt)}
                      for a, b in position_buckets(L, context)]
    out["by_context"] = [{"context": b, **_entry(float(sums[:b].sum()), float(counts[:b].sum()), cpt)}
                         for _, b in position_buckets(L, context)]
    out["position_loss"] = (sums / counts).tolist()
    return out


def position_bins(n: int, train_context: int) -> list[tuple[int, int]]:
    """Bins for the plot: L/4 wide up to L, then two per doubling (edges L·2^(k/2), with 2L,
    4L, 8L among them), so far positions, crowded on a log axis, are averaged over more tokens."""
    step = max(1, train_context // 4)
    edges = list(range(0, min(n, train_context), step)) + [min(n, train_context)]
    k = 1
    while edges[-1] < n:
        edges.append(min(n, max(edges[-1] + 1, round(train_context * 2 ** (k / 2)))))
        k += 1
    return list(zip(edges, edges[1:]))


def plot_position_loss(curves: dict[str, list[float]], train_context: int, path: Path, title: str = "") -> Path:
    """Loss against position (log axis), one line per curve, a dashed line at the training
    context L; left the loss, right the loss minus the curve's own mean over [0, L)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    L = train_context
    fig, (ax, rel) = plt.subplots(1, 2, figsize=(11, 4.4))
    for label, values in curves.items():
        v = np.asarray(values, dtype=np.float64)
        bins = position_bins(len(v), L)
        x = [(a + b - 1) / 2 + 0.5 for a, b in bins]  # centre, +0.5 keeps position 0 on a log axis
        y = np.asarray([v[a:b].mean() for a, b in bins])
        ax.plot(x, y, lw=1.4, marker=".", label=label)
        rel.plot(x, y - v[:L].mean(), lw=1.4, marker=".", label=label)
    for a in (ax, rel):
        a.set_xscale("log", base=2)
        a.axvline(L, color="k", ls="--", lw=1, alpha=0.6)
        a.set_xlabel(f"position in the window (dashed: training context {L})")
        a.grid(alpha=0.3)
    ax.set_ylabel("loss (nats per token)")
    ax.set_title(title or "loss vs position")
    rel.axhline(0, color="k", lw=0.8, alpha=0.5)
    rel.set_ylabel(f"loss minus its mean below position {L}")
    rel.set_title("what is lost past the training length")
    rel.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path
