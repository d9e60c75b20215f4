"""Classification reports: accuracy, per-class and macro F1 from a confusion matrix, the
confusion plot, and the one report writer every evaluation goes through."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from ...fileio import atomic_write_text, inside, save_figure


def confusion_matrix(y_true, y_pred, n_classes: int) -> np.ndarray:
    """`(K, K)` counts, rows = true class, columns = predicted class."""
    cm = np.zeros((n_classes, n_classes), dtype=np.int64)
    np.add.at(cm, (np.asarray(y_true), np.asarray(y_pred)), 1)
    return cm


def report(cm: np.ndarray, labels: list[str]) -> dict:
    """Accuracy, macro-F1 and per-class precision/recall/F1/support from a confusion matrix.
    A class never predicted has precision 0 (and so F1 0), as scikit-learn's default."""
    tp = np.diag(cm).astype(float)
    predicted, support = cm.sum(0), cm.sum(1)
    precision = np.divide(tp, predicted, out=np.zeros_like(tp), where=predicted > 0)
    recall = np.divide(tp, support, out=np.zeros_like(tp), where=support > 0)
    denom = precision + recall
    f1 = np.divide(2 * precision * recall, denom, out=np.zeros_like(tp), where=denom > 0)
    present = support > 0
    return {
        "accuracy": float(tp.sum() / max(cm.sum(), 1)),
        "macro_f1": float(f1[present].mean()) if present.any() else 0.0,
        "per_class": {
            label: {"precision": float(p), "recall": float(r), "f1": float(f), "support": int(s)}
            for label, p, r, f, s in zip(labels, precision, recall, f1, support)
        },
    }


def format_report(rep: dict) -> str:
    width = max(8, *(len(k) for k in rep["per_class"]))
    lines = [f"{'class':<{width}}  precision  recall     f1  support"]
    for label, r in rep["per_class"].items():
        lines.append(f"{label:<{width}}  {r['precision']:9.3f}  {r['recall']:6.3f}  {r['f1']:5.3f}  {r['support']:7d}")
    lines.append(f"accuracy {rep['accuracy']:.4f}   macro-F1 {rep['macro_f1']:.4f}")
    return "\n".join(lines)


def plot_confusion(cm: np.ndarray, labels: list[str], path: str | Path, title: str = "") -> Path:
    """Row-normalised colours with the counts written in; class names in a CJK-capable font."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ...fonts import cjk_fonts

    k = len(labels)
    norm = cm / np.maximum(cm.sum(1, keepdims=True), 1)
    with cjk_fonts():  # Chinese class names are drawn as text, not boxes
        # at least 4.5 x 4 inches: with 2-3 classes the title was cut off at the sides
        width = max(4.5, 1.0 + 0.6 * k)
        fig, ax = plt.subplots(figsize=(width, max(4.0, 0.8 + 0.6 * k)))
        ax.imshow(norm, cmap="Blues", vmin=0, vmax=1)
        ax.set_xticks(range(k), labels, rotation=45, ha="right")
        ax.set_yticks(range(k), labels)
        for i in range(k):
            for j in range(k):
                if cm[i, j]:
                    ax.text(j, i, str(cm[i, j]), ha="center", va="center", fontsize=8,
                            color="white" if norm[i, j] > 0.5 else "black")
        ax.set_xlabel("predicted")
        ax.set_ylabel("true")
        ax.set_title(textwrap.fill(title or "confusion matrix (row-normalised colour, counts)", int(10 * width)),
                     fontsize=10)
        fig.tight_layout()
        path = save_figure(fig, path, dpi=120)  # never through a link, never half a PNG
        plt.close(fig)
    return path


def meta_for(meta: dict | None, split: str, name: str) -> dict | None:
    """`meta` with the split's train-overlap list also under the report `name` (e.g. a
    `blend_test` or `test_maxlen512` report of the `test` split)."""
    if meta and f"{split}_in_train" in meta:
        return {**meta, f"{name}_in_train": meta[f"{split}_in_train"]}
    return meta


def write_report(preds: np.ndarray, gold: np.ndarray, labels: list[str], loss: float,
                 out_dir: Path | None, name: str, meta: dict | None = None,
                 order: np.ndarray | None = None, extra: dict | None = None) -> dict[str, Any]:
    """The report of one split: `<name>_metrics.json` and `confusion_<name>.png` in `out_dir`
    (when given). `order[i]` is the split index of prediction i (None: the split's order);
    `meta["<name>_in_train"]` lists split indices whose text also occurs in train (e.g.
    rotten-tomatoes), reported apart as `accuracy_without_train_overlap`."""
    cm = confusion_matrix(gold, preds, len(labels))
    rep = report(cm, labels)
    rep["loss"] = loss
    rep["n"] = int(len(gold))
    overlap = (meta or {}).get(f"{name}_in_train")
    if overlap:
        keep = np.ones(len(gold), bool)
        keep[np.asarray(overlap)] = False
        kept = keep if order is None else keep[order]
        rep["accuracy_without_train_overlap"] = float((preds[kept] == gold[kept]).mean())
    rep.update(extra or {})
    if out_dir is not None:
        out_dir = Path(out_dir)
        atomic_write_text(inside(out_dir, f"{name}_metrics.json", "report"),
                          json.dumps(rep, indent=1, ensure_ascii=False) + "\n")
        plot_confusion(cm, labels, inside(out_dir, f"confusion_{name}.png", "report"),
                       f"{name}: accuracy {rep['accuracy']:.3f}, macro-F1 {rep['macro_f1']:.3f}")
    return rep
