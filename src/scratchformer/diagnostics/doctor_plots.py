"""The doctor's pictures: per-head tables as heatmaps, head similarity, per-layer norms."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..fonts import cjk_fonts
from ..fileio import save_figure


def _heatmap(ax, m: np.ndarray, title: str, fmt: str = "{:.2f}", cmap: str = "viridis", center: bool = False,
             vmax: float | None = 1.0, rows: str = "L") -> None:
    """Fixed colour scales (0..1 for shares), so small differences do not look dramatic."""
    if np.asarray(m).size == 0:  # nothing measured (a learner's model has no heads of ours to switch off)
        ax.axis("off")
        ax.set_title(f"{title}\n(not measured)", fontsize=8)
        return
    if center:
        lim = max(float(np.abs(m).max()), 1e-9)
        lo, hi, cmap = -lim, lim, "coolwarm"
    else:
        lo, hi = 0.0, vmax if vmax is not None else max(float(m.max()), 1e-9)
    ax.imshow(m, cmap=cmap, vmin=lo, vmax=hi, aspect="auto")
    ax.set_title(title, fontsize=9)
    ax.set_xticks(range(m.shape[1]), [f"H{h + 1}" for h in range(m.shape[1])], fontsize=7)
    ax.set_yticks(range(m.shape[0]), [f"{rows}{i + 1}" for i in range(m.shape[0])], fontsize=7)
    if m.size <= 256:
        for (i, j), v in np.ndenumerate(m):
            t = (v - lo) / max(hi - lo, 1e-12)
            dark = abs(t - 0.5) < 0.3 if center else t < 0.6  # white text on dark cells
            ax.text(j, i, fmt.format(v), ha="center", va="center", fontsize=6, color="white" if dark else "black")


def _head_panels(name: str, v: dict, importance) -> list[tuple[str, np.ndarray, dict]]:
    pad = np.asarray(v["pad_mass"])
    panels = [("mass on padding (must be 0)", pad, {"vmax": max(float(pad.max()), 1e-3), "fmt": "{:.3f}"})]
    special = [np.asarray(x) for k, x in v.items() if k.startswith("special_mass[")]
    if special:
        panels.append(("mass on special tokens", sum(special), {}))
    panels.append(("entropy (0 one key, 1 uniform)", np.asarray(v["entropy"]), {}))
    if "distance" in v:
        ratio = np.asarray(v["distance"]) / np.maximum(np.asarray(v["uniform_distance"]), 1e-9)
        panels.append(("distance / uniform (small = local)", ratio, {"vmax": max(1.2, float(ratio.max()))}))
        panels.append(("weight on itself", np.asarray(v["diagonal"]), {}))
    panels.append(("mass on one fixed key", np.asarray(v["top_column"]), {}))
    if importance is not None:
        panels.append(("loss change without the head", np.asarray(importance), {"fmt": "{:+.3f}", "center": True, "vmax": None}))
    return panels


def plot_report(report, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    views = report.numbers.get("views", {})
    imp = report.numbers.get("importance", {})
    with cjk_fonts():
        if views:
            rows = [(name, _head_panels(name, v, imp.get(name))) for name, v in views.items()]
            n_cols = max(len(p) for _, p in rows)
            fig, axes = plt.subplots(len(rows), n_cols, figsize=(2.6 * n_cols, 2.4 * len(rows) + 0.4), squeeze=False)
            for r, (name, panels) in enumerate(rows):
                for c in range(n_cols):
                    ax = axes[r][c]
                    if c >= len(panels):
                        ax.axis("off")
                        continue
                    title, m, kw = panels[c]
                    _heatmap(ax, m, f"{name}\n{title}", **kw)
            fig.tight_layout()
            files.append(_save(fig, out_dir / "doctor_heads.png"))

            sims = [(name, np.asarray(v["similarity"])) for name, v in views.items()]
            n = max(s.shape[0] for _, s in sims)
            fig, axes = plt.subplots(len(sims), n, figsize=(2.6 * n, 2.5 * len(sims) + 0.4), squeeze=False)
            for r, (name, s) in enumerate(sims):
                for li in range(n):
                    if li >= s.shape[0]:
                        axes[r][li].axis("off")
                        continue
                    _heatmap(axes[r][li], s[li], f"{name}\nlayer {li + 1}: head similarity", cmap="magma", rows="H")
            fig.tight_layout()
            files.append(_save(fig, out_dir / "doctor_similarity.png"))

        layers = report.numbers.get("layers", [])
        if layers:
            fig, ax = plt.subplots(figsize=(max(5.0, 0.5 * len(layers) + 3), 3.4))
            x = np.arange(len(layers))
            for key, label in (("act_rms", "activation rms"), ("grad_rms", "gradient rms at the output"),
                               ("param_grad_norm", "parameter gradient norm")):
                y = np.array([r.get(key, np.nan) for r in layers], dtype=float)
                ax.plot(x, np.where(y > 0, y, np.nan), marker="o", label=label)
            ax.set_yscale("log")
            ax.set_xticks(x, [_layer_label(r["name"]) for r in layers], fontsize=7, rotation=30, ha="right")
            ax.set_title(f"per-layer norms on one batch (loss {report.numbers.get('layer_loss', float('nan')):.3f})", fontsize=9)
            ax.legend(fontsize=7)
            fig.tight_layout()
            files.append(_save(fig, out_dir / "doctor_layers.png"))
    return files


def _layer_label(name: str) -> str:
    """'transformer.encoder.layers.0' -> 'encoder L1'."""
    parts = name.split(".")
    if "layers" in parts:
        i = parts.index("layers")
        stack = parts[i - 1] if i > 0 else "layer"
        return f"{stack} L{int(parts[i + 1]) + 1}"
    return name


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    try:
        save_figure(fig, path, dpi=100)
    finally:
        plt.close(fig)
    return path
