"""The sweep's two figures: each measure against the swept value (mean ± std over seeds), and
the validation curves of every run on one figure (one colour per cell, one line per seed)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..fileio import save_figure
from .grid import Axis
from .results import _title, read_jsonl
from .runner import RunSlot


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_vs_value(summary: pd.DataFrame, axes: list[Axis], columns: list[str], path: Path) -> Path | None:
    """One panel per column: x = the first axis, one line per combination of the other axes,
    error bars = std over seeds. Numeric axes spanning 8x or more get a log2 x scale."""
    columns = [c for c in columns if f"{c}_mean" in summary.columns and summary[f"{c}_mean"].notna().any()]
    if not columns or not axes:
        return None
    plt = _pyplot()
    x_axis, others = axes[0], [a.name for a in axes[1:]]
    numeric = x_axis.numeric()
    fig, panels = plt.subplots(1, len(columns), figsize=(4.2 * len(columns), 3.4), squeeze=False)
    groups = summary.groupby(others, sort=False) if others else [((), summary)]
    for ax, col in zip(panels[0], columns):
        for key, g in groups:
            key = key if isinstance(key, tuple) else (key,)
            order = [x_axis.labels.index(lab) for lab in g[x_axis.name]]
            xs = [x_axis.values[i] for i in order] if numeric else order
            label = ", ".join(f"{n}={v}" for n, v in zip(others, key)) or None
            ax.errorbar(xs, g[f"{col}_mean"], yerr=g[f"{col}_std"].fillna(0), marker="o", capsize=3, label=label)
        if numeric and max(x_axis.values) >= 8 * max(min(x_axis.values), 1e-12) and min(x_axis.values) > 0:
            ax.set_xscale("log", base=2)
        elif numeric:  # a linear axis: ticks at the swept values only (matplotlib's own overlapped, e.g. lr 3e-4..1e-3)
            ax.set_xticks(list(x_axis.values), [f"{v:g}" for v in x_axis.values])
        if not numeric:
            # long names overlap side by side: slant them when the row of labels is wider than ~40 characters
            crowded = len(x_axis.labels) > 4 or sum(len(str(lab)) for lab in x_axis.labels) > 40
            ax.set_xticks(range(len(x_axis.labels)), x_axis.labels, rotation=25 if crowded else 0,
                          ha="right" if crowded else "center")
        ax.set_xlabel(x_axis.name)
        ax.set_title(_title(col) + (" (s)" if col.endswith("_s") and col != "tokens_per_s" else ""))
        ax.grid(alpha=0.3)
    if others:
        panels[0][0].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)  # matplotlib's savefig(path) would follow a link
    plt.close(fig)
    return path


def plot_curves(slots: list[RunSlot], metric: str, path: Path) -> Path | None:
    """Validation `metric` against the step for every run; a run that diverged ends with an x."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    colours = plt.get_cmap("tab20" if len({s.cell.name for s in slots}) > 10 else "tab10")
    names: list[str] = []
    drawn = False
    for slot in slots:
        rows = [r for r in read_jsonl(slot.run_dir / "metrics.jsonl") if r.get("split") == "valid" and metric in r]
        if not rows:
            continue
        if slot.cell.name not in names:
            names.append(slot.cell.name)
        i = names.index(slot.cell.name)
        first = slot.seed == min(s.seed for s in slots if s.cell.name == slot.cell.name)
        ax.plot([r["step"] for r in rows], [r[metric] for r in rows], color=colours(i % colours.N),
                alpha=0.8, lw=1.2, label=slot.cell.name if first else None)
        if (slot.record() or {}).get("diverged"):
            ax.plot(rows[-1]["step"], rows[-1][metric], "x", color=colours(i % colours.N), ms=8)
        drawn = True
    if not drawn:
        plt.close(fig)
        return None
    ax.set_xlabel("step")
    ax.set_ylabel(f"validation {metric}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2 if len(names) > 8 else 1)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)  # matplotlib's savefig(path) would follow a link
    plt.close(fig)
    return path
