"""Plot the training curves of a run from its ``metrics.jsonl``.

Left panel: training loss and validation loss against the step. Then, when the validation lines
carry other numbers (accuracy, BLEU, perplexity...), those metrics against the step, one panel per
scale (`scale_groups`): accuracy (0-1) drawn beside a perplexity of 300 would be a flat line at 0.
matplotlib is imported only when a plot is drawn, with the non-interactive Agg canvas.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from scratchformer.train.checkpoint import atomic_write_bytes

# Keys of a metrics line that are bookkeeping, not metrics to plot.
_NOT_METRICS = {"step", "epoch", "split", "loss", "lr", "tokens_per_s", "elapsed"}


def read_metrics(metrics_jsonl: str | Path) -> list[dict]:
    """The JSON lines of a metrics file; unreadable lines (a torn last line) are skipped."""
    rows = []
    path = Path(metrics_jsonl)
    if not path.exists():
        return rows
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and "step" in row:
            rows.append(row)
    return rows


def plot_curves(metrics_jsonl: str | Path, out_png: str | Path) -> Path:
    """Draw ``metrics_jsonl`` into ``out_png`` (written atomically) and return its path."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    rows = read_metrics(metrics_jsonl)
    train = [r for r in rows if r.get("split") == "train" and _is_num(r.get("loss"))]
    valid = [r for r in rows if r.get("split") == "valid"]
    extra = sorted({k for r in valid for k, v in r.items() if k not in _NOT_METRICS and _is_num(v)})

    groups = scale_groups({k: [r[k] for r in valid if _is_num(r.get(k))] for k in extra})
    fig = Figure(figsize=(6 + 5 * len(groups), 4), dpi=100)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, 1 + len(groups), squeeze=False)[0]

    ax = axes[0]
    if train:
        ax.plot([r["step"] for r in train], [r["loss"] for r in train], label="train loss", lw=1)
    vl = [r for r in valid if _is_num(r.get("loss"))]
    if vl:
        ax.plot([r["step"] for r in vl], [r["loss"] for r in vl], "o-", label="valid loss", lw=1.5)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)
    if train or vl:
        ax.legend()

    for ax, group in zip(axes[1:], groups):
        for k in group:
            pts = [(r["step"], r[k]) for r in valid if _is_num(r.get(k))]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=k, lw=1.5)
        ax.set_xlabel("step")
        ax.set_ylabel("validation " + (group[0] if len(group) == 1 else "metric"))
        ax.grid(alpha=0.3)
        ax.legend()

    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    out = Path(out_png)
    atomic_write_bytes(out, buf.getvalue())
    return out


def scale_groups(series: dict[str, list[float]], ratio: float = 10.0, most: int = 3) -> list[list[str]]:
    """The metrics of `series` grouped so that each panel holds values of one scale: sorted by their
    largest magnitude, a metric joins the previous panel when that is within `ratio` of the panel's
    smallest; at most `most` panels (the last takes what is left)."""
    size = {k: max((abs(v) for v in vs), default=0.0) for k, vs in series.items()}
    groups: list[list[str]] = []
    for k in sorted(series, key=lambda k: (size[k], k)):
        small = size[groups[-1][0]] if groups else None
        fits = small is not None and size[k] <= ratio * max(small, 1e-12)
        if groups and (fits or len(groups) == most):
            groups[-1].append(k)
        else:
            groups.append([k])
    return [sorted(g) for g in groups]


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and v == v  # excludes NaN
