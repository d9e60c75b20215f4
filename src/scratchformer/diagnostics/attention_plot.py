"""Attention heatmaps: one PNG per view, a panel per (layer, head), plus a last column with
the head-averaged map. Rows are queries, columns are keys; token labels in a CJK font."""
from __future__ import annotations

from pathlib import Path

import torch

from ..fonts import cjk_fonts
from ..fileio import save_figure
from .maps import AttentionView

MAX_FIG_INCHES = 60.0  # matplotlib refuses very large canvases; shrink panels past this


def plot_view(view: AttentionView, path: str | Path, title: str = "", mean_column: bool = True) -> Path:
    """Save `view` as a grid: layers down, heads across (and 'mean of heads' last)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n_rows, n_cols = view.n_layers, view.n_heads + int(mean_column)
    n_tok = max(len(view.query_tokens), len(view.key_tokens))
    panel = max(2.2, 0.2 * n_tok + 0.8)
    panel = min(panel, MAX_FIG_INCHES / max(n_rows, n_cols))
    label_size = max(4.0, min(9.0, 110.0 / max(n_tok, 1)))
    with cjk_fonts():
        fig, axes = plt.subplots(n_rows, n_cols, figsize=(panel * n_cols, panel * n_rows + 0.6), squeeze=False)
        for layer, w in enumerate(view.layers):
            panels = [(f"head {h + 1}", w[h]) for h in range(view.n_heads)]
            if mean_column:
                panels.append(("mean of heads", w.mean(0)))
            for col, (name, m) in enumerate(panels):
                _panel(axes[layer][col], m, view, f"layer {layer + 1} {name}", label_size)
        fig.suptitle(title or f"{view.name} ({view.note or 'rows: queries, columns: keys'})", fontsize=10)
        fig.tight_layout()
        try:
            path = save_figure(fig, path, dpi=110)  # never through a link, never half a PNG
        finally:
            plt.close(fig)
    return path


def _panel(ax, m: torch.Tensor, view: AttentionView, title: str, label_size: float) -> None:
    ax.imshow(m.numpy(), cmap="viridis", vmin=0.0, vmax=max(float(m.max()), 1e-6), aspect="auto")
    ax.set_title(f"{title} (max {float(m.max()):.2f})", fontsize=8)  # each panel has its own colour scale
    ax.set_xticks(range(len(view.key_tokens)), view.key_tokens, fontsize=label_size, rotation=90)
    ax.set_yticks(range(len(view.query_tokens)), view.query_tokens, fontsize=label_size)
    ax.tick_params(length=0)


def plot_views(views: list[AttentionView], out_dir: str | Path, stem: str = "attention") -> list[Path]:
    """One PNG per view in `out_dir`: `<stem>_<view>.png` (just `<stem>.png` for a single view)."""
    out_dir = Path(out_dir)
    if len(views) == 1:
        return [plot_view(views[0], out_dir / f"{stem}.png")]
    return [plot_view(v, out_dir / f"{stem}_{v.slug()}.png") for v in views]
