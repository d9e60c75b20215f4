"""Moved: attention heatmaps live in `scratchformer.diagnostics` (attention_plot, fonts).
These two names stay for old imports; new code imports from diagnostics directly."""
from __future__ import annotations

from pathlib import Path

import torch


def cjk_font() -> None:
    """Make matplotlib's default sans-serif list start with a CJK font (for the whole process)."""
    from matplotlib import rcParams

    from ..diagnostics.fonts import font_list

    rcParams["font.sans-serif"] = font_list() + list(rcParams["font.sans-serif"])


def plot_attention(tokens: list[str], weights: list[torch.Tensor], path: str | Path,
                   query_tokens: list[str] | None = None, title: str = "") -> Path:
    """weights: per layer `(H, Tq, Tk)`. Rows = queries, columns = keys."""
    from ..diagnostics.attention_plot import plot_view
    from ..diagnostics.maps import AttentionView

    view = AttentionView("attention", query_tokens or tokens, tokens, weights)
    return plot_view(view, path, title=title)
