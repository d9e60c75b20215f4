"""The tutorial recipe's validation curve beside the accuracy the tutorial reports.

    python -m scratchformer.experiments.tutorial_curve RUN_DIR OUT.png

RUN_DIR is a run of `recipes/tutorial-thucnews.json` (finished or still training: the curve
is what its metrics.jsonl holds). The tutorial reports about 75% after epoch 3 and 85% after
epoch 8 on its THUCNews, long articles; ours is headlines (about 19 characters), so the texts
carry far less evidence each and the two curves are not the same experiment.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..fileio import save_figure

TUTORIAL = {3: 0.75, 8: 0.85}  # epoch -> accuracy the tutorial reports


def epochs(run_dir: Path) -> list[tuple[int, float]]:
    """(epoch, validation accuracy) at each epoch's end (epochs counted from 1)."""
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    return [(int(r["epoch"]), float(r["accuracy"])) for r in rows if r.get("split") == "valid" and "accuracy" in r]


def plot(run_dir: Path, out: Path) -> Path:
    from .plots import _pyplot

    plt = _pyplot()
    ours = epochs(run_dir)
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    ax.plot([e for e, _ in ours], [100 * a for _, a in ours], marker="o", label="ours: tutorial-thucnews.json on THUCNews headlines (valid)")
    ax.plot(list(TUTORIAL), [100 * a for a in TUTORIAL.values()], "s--", color="tab:red", markersize=8,
            label="the tutorial's reported accuracy (long articles)")
    ax.set(xlabel="epoch", ylabel="accuracy (%)", title="The tutorial's recipe: its numbers and ours",
           xticks=range(1, max(20, max((e for e, _ in ours), default=1)) + 1, 2), ylim=(60, 95))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    save_figure(fig, out, dpi=110)
    plt.close(fig)
    return out


if __name__ == "__main__":
    print(plot(Path(sys.argv[1]), Path(sys.argv[2])))
