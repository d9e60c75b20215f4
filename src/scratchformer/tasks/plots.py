"""Attention heatmaps: one panel per (layer, head)."""
from __future__ import annotations

from pathlib import Path

import torch


def cjk_font() -> None:
    """Use a font with CJK glyphs when the machine has one, so Chinese tokens render."""
    from matplotlib import font_manager, rcParams

    wanted = ("Noto Sans CJK SC", "Noto Sans CJK JP", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "SimHei", "AR PL UMing CN")
    have = {f.name for f in font_manager.fontManager.ttflist}
    for name in wanted:
        if name in have:
            rcParams["font.sans-serif"] = [name, "DejaVu Sans"]
            return


def plot_attention(tokens: list[str], weights: list[torch.Tensor], path: str | Path,
                   query_tokens: list[str] | None = None, title: str = "") -> Path:
    """weights: per layer `(H, Tq, Tk)`. Rows = queries, columns = keys."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cjk_font()
    n_layers, n_heads = len(weights), weights[0].shape[0]
    query_tokens = query_tokens or tokens
    size = max(2.0, 0.22 * len(tokens))
    fig, axes = plt.subplots(n_layers, n_heads, figsize=(size * n_heads, size * n_layers), squeeze=False)
    for layer, w in enumerate(weights):
        for head in range(n_heads):
            ax = axes[layer][head]
            ax.imshow(w[head].float().cpu().numpy(), cmap="viridis", vmin=0)
            ax.set_title(f"layer {layer + 1} head {head + 1}", fontsize=8)
            ax.set_xticks(range(len(tokens)), tokens, fontsize=6, rotation=90)
            ax.set_yticks(range(len(query_tokens)), query_tokens, fontsize=6)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
