"""Length extrapolation of a language-model run: its loss at contexts beyond training, and the
figure of loss against position for every cell (experiment `position-extrapolation`).

The measure `extrapolation` evaluates a finished run once, in windows of 8L tokens of its
validation text (L = its training context; a learned table shorter than 8L stops at its
length), and gives these columns (nats per token):
  - `loss_at_1L` .. `loss_at_8L`: the mean loss in windows of L, 2L, 4L, 8L tokens (in a causal
    model the first c positions of a long window score exactly as a window of c);
  - `beyond_2L`, `beyond_8L`: the loss on positions [L, 2L) and [4L, 8L) minus the loss on
    [0, L): about 0 or below when the model carries on past its training length (more context
    helps or does not hurt), large when it breaks;
  - RoPE runs also `loss_at_8L_linear` and `loss_at_8L_ntk`: at 8L with position interpolation
    or NTK-aware scaling at inference (factor 8, no fine-tuning).
The run folder keeps the evaluation (`context_<8L>.json`), which the figure reads.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ..fileio import atomic_write_text
from .runner import RunSlot

WINDOWS = 128  # windows of 8L per evaluation: 64k tokens at L=64, enough for 0.02-nat buckets
FACTORS = (1, 2, 4, 8)


def lm_extrapolation(run_dir: Path, texts: list[str] | None = None) -> dict[str, float]:
    """The columns above for one finished LM run (NaN where the model cannot go)."""
    from ..tasks.lm import LanguageModel, evaluate_context, load_lm_text

    lm = LanguageModel.load(run_dir)
    L = lm.context
    longest = 8 * L if lm.model.max_positions is None else min(8 * L, lm.model.max_positions)
    text = load_lm_text(lm.recipe.data).valid
    res = evaluate_context(lm, text, longest, max_windows=WINDOWS)
    atomic_write_text(Path(run_dir) / f"context_{longest}.json", json.dumps(res, indent=1) + "\n")
    by_context = {c["context"]: c["loss"] for c in res["by_context"]}
    out = {f"loss_at_{k}L": by_context.get(k * L, math.nan) for k in FACTORS}
    pos = np.asarray(res["position_loss"])
    within = float(pos[:L].mean())
    out["beyond_2L"] = float(pos[L:2 * L].mean()) - within if len(pos) >= 2 * L else math.nan
    out["beyond_8L"] = float(pos[4 * L:8 * L].mean()) - within if len(pos) >= 8 * L else math.nan
    if lm.recipe.model.transformer.position == "rope":
        for kind in ("linear", "ntk"):
            scaled = evaluate_context(lm, text, 8 * L, rope=kind, max_windows=WINDOWS)
            out[f"loss_at_8L_{kind}"] = scaled["loss"]
    return out


def plot_loss_vs_position(slots: list[RunSlot], path: Path) -> Path | None:
    """One line per cell: the loss at each position (mean over seeds and over L/8 positions)."""
    from ..tasks.lm import plot_position_loss

    curves: dict[str, list[np.ndarray]] = {}
    train_context = None
    for slot in slots:
        files = sorted(slot.run_dir.glob("context_*.json"))
        files = [f for f in files if f.stem.split("_")[-1].isdigit()]  # not the RoPE-scaled ones
        if not files:
            continue
        res = json.loads(files[-1].read_text(encoding="utf-8"))
        train_context = res["train_context"]
        curves.setdefault(slot.cell.name, []).append(np.asarray(res["position_loss"]))
    if not curves:
        return None
    means = {}
    for name, arrays in curves.items():
        n = min(len(a) for a in arrays)
        means[name] = np.mean([a[:n] for a in arrays], axis=0).tolist()
    return plot_position_loss(means, train_context, path, "validation loss vs position in the window")


FIGURES = {"loss_vs_position": (plot_loss_vs_position, "Loss against position in the window (mean over seeds; "
                                                       "the dashed line is the training context)")}
