"""From run folders to numbers: one row per run (`runs.csv`), mean ± std per cell
(`results.csv`, `results.md`).

Everything is read from the files an ordinary run writes: `metrics.jsonl` (train logs and
validation rows), `train_config.json` (which metric, min or max), `test_metrics.json` /
`valid_metrics.json` where the task writes them, and `model.safetensors` (parameter count:
the sum of the tensors' sizes). Peak memory and seconds come from the sweep's own record.
A diverged run keeps its step and time but no metrics: its curves stop at a NaN.
"""
from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pandas as pd

from ..fileio import atomic_write_text
from .runner import RunSlot

NOT_MEANS = ("seed", "diverged")


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut short by a kill
    return rows


def count_params(run_dir: Path) -> int | None:
    from safetensors import safe_open

    from .params import checkpoint_weights

    for path in (run_dir / "model.safetensors", checkpoint_weights(run_dir)):
        if path is not None and path.exists():
            with safe_open(str(path), "pt") as f:
                return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
    return None


def time_per_step(train_rows: list[dict], valid_steps: set[int]) -> float | None:
    """Median seconds per optimizer step between consecutive train logs, leaving out the
    intervals that contain an evaluation (their time is not training)."""
    per = []
    for a, b in zip(train_rows, train_rows[1:]):
        if b["step"] > a["step"] and not any(a["step"] <= s < b["step"] for s in valid_steps):
            per.append((b["elapsed"] - a["elapsed"]) / (b["step"] - a["step"]))
    if per:
        return statistics.median(per)
    last = train_rows[-1] if train_rows else None
    return last["elapsed"] / last["step"] if last and last["step"] else None


def oscillation(losses: list[float], window: int = 11) -> float | None:
    """RMS of the training loss around its centred moving average (`window` logs): how much the
    loss jumps from log to log once the trend is taken out."""
    if len(losses) < window + 2:
        return None
    half = window // 2
    resid = [losses[i] - sum(losses[i - half:i + half + 1]) / window for i in range(half, len(losses) - half)]
    return math.sqrt(sum(r * r for r in resid) / len(resid))


def read_run(slot: RunSlot, early_steps: int = 100) -> dict:
    """One row: the cell's labels, the seed, and what the run folder says."""
    rec = slot.record() or {}
    run = slot.run_dir
    row: dict = {"cell": slot.cell.name, **dict(slot.cell.labels), "seed": slot.seed,
                 "diverged": bool(rec.get("diverged")), "status": rec.get("status", "missing")}
    tcfg = _json(run / "train_config.json")
    metric, mode = tcfg.get("metric", "loss"), tcfg.get("metric_mode", "min")
    rows = read_jsonl(run / "metrics.jsonl")
    train = [r for r in rows if r.get("split") == "train"]
    valid = [r for r in rows if r.get("split") == "valid"]
    row["steps"] = max((r["step"] for r in rows), default=0)
    row["time_per_step_s"] = time_per_step(train, {r["step"] for r in valid})
    row["tokens_per_s"] = statistics.median([r["tokens_per_s"] for r in train]) if train else None
    row["params"] = count_params(run)
    row["peak_rss_mib"] = rec.get("peak_rss_mib")
    row["wall_s"] = rec.get("wall_s")
    row.update(rec.get("measures", {}))
    if row["diverged"]:
        return row
    if valid:
        values = [r[metric] for r in valid if metric in r]
        if values:
            row[f"final_valid_{metric}"] = values[-1]
            row[f"best_valid_{metric}"] = max(values) if mode == "max" else min(values)
        losses = [r["loss"] for r in valid if "loss" in r]
        row["final_valid_loss"], row["min_valid_loss"] = losses[-1], min(losses)
        row["valid_loss_rise"] = losses[-1] - min(losses)  # > 0: validation loss went up again
    if train:
        row["final_train_loss"] = train[-1]["loss"]
        if "final_valid_loss" in row:  # > 0 and growing: the model fits its training data better than new data
            row["overfit_gap"] = row["final_valid_loss"] - statistics.mean(r["loss"] for r in train[-5:])
        row["early_oscillation"] = oscillation([r["loss"] for r in train if r["step"] <= early_steps])
        row["late_oscillation"] = oscillation([r["loss"] for r in train[len(train) // 2:]])
    for name in ("test_metrics.json", "valid_metrics.json"):
        split = name.split("_")[0]
        for k, v in _json(run / name).items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                row[f"{split}_{k}"] = v
    return row


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def runs_frame(slots: list[RunSlot]) -> pd.DataFrame:
    return pd.DataFrame([read_run(s) for s in slots])


def summarize(runs: pd.DataFrame, axes: list[str]) -> pd.DataFrame:
    """Per cell: `<col>_mean`, `<col>_std` (over the seeds that did not diverge), `runs`,
    `diverged` (count). Cells keep the grid's order."""
    numeric = [c for c in runs.columns if c not in NOT_MEANS and c not in axes
               and pd.api.types.is_numeric_dtype(runs[c]) and not pd.api.types.is_bool_dtype(runs[c])]
    keys = ["cell"] + axes
    groups = runs.groupby(keys, sort=False)
    out = groups.size().rename("runs").to_frame()
    out["diverged"] = groups["diverged"].sum().astype(int)
    for c in numeric:
        out[f"{c}_mean"] = groups[c].mean()
        out[f"{c}_std"] = groups[c].std(ddof=1)
    return out.reset_index()


def fmt(mean, std, column: str) -> str:
    """`0.8123 ± 0.0041`; parameters as `1.23M`, seconds per step as ms, whole runs in s,
    throughput in tokens/s, memory in MiB."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "—"
    if column == "params":
        return f"{mean / 1e6:.3f}M"
    scale, digits, unit = 1.0, 4, ""
    if column == "tokens_per_s":  # a rate, not a duration (checked before the "_s" of seconds)
        digits, unit = 0, " tok/s"
    elif column.endswith("_s") and "step" in column:  # per step: milliseconds
        scale, digits, unit = 1000.0, 1, " ms"
    elif column.endswith("_s"):  # a whole run or epoch: seconds
        digits, unit = 1, " s"
    elif column.endswith("_mib"):
        digits = 0
    elif abs(mean) >= 10:
        digits = 2
    text = f"{mean * scale:.{digits}f}"
    if std is not None and not (isinstance(std, float) and math.isnan(std)):
        text += f" ± {std * scale:.{digits}f}"
    return text + unit


def markdown_table(summary: pd.DataFrame, axes: list[str], columns: list[str]) -> str:
    columns = [c for c in columns if f"{c}_mean" in summary.columns]
    head = axes + ["runs", "diverged"] + [_title(c) for c in columns]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in summary.iterrows():
        cells = [str(r[a]) for a in axes] + [str(int(r["runs"])), str(int(r["diverged"]))]
        cells += [fmt(r[f"{c}_mean"], r[f"{c}_std"], c) for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _title(column: str) -> str:
    return {"time_per_step_s": "time/step", "peak_rss_mib": "peak RSS (MiB)", "wall_s": "wall time", "epoch_s": "time/epoch",
            "tokens_per_s": "training tokens/s", "params": "parameters"}.get(column, column.replace("_", " "))


def default_columns(summary: pd.DataFrame) -> list[str]:
    means = [c[: -len("_mean")] for c in summary.columns if c.endswith("_mean")]
    first = [c for c in means if c.startswith(("best_valid_", "final_valid_"))]
    first = sorted(first, key=lambda c: (c.endswith("loss"), not c.startswith("best")))
    tests = [c for c in means if c.startswith("test_") and c in ("test_accuracy", "test_macro_f1", "test_bleu")]
    return first[:2] + tests + ["time_per_step_s", "params", "peak_rss_mib"]


def write_tables(out: Path, runs: pd.DataFrame, axes: list[str], columns: list[str] | None = None) -> pd.DataFrame:
    """`runs.csv`, `results.csv` and `results.md` in `out`; returns the summary."""
    summary = summarize(runs, axes)
    atomic_write_text(out / "runs.csv", runs.to_csv(index=False))  # pandas' own to_csv(path) follows a link
    atomic_write_text(out / "results.csv", summary.to_csv(index=False))
    cols = columns or default_columns(summary)
    note = ("Mean ± standard deviation over the seeds that did not diverge; `diverged` counts the "
            "runs stopped by a NaN/Inf loss or gradient. Time per step: median between training logs, "
            "evaluation excluded. Peak RSS: the run's resident-set high-water mark (torch's ~300 MiB "
            "included).\n\n")
    atomic_write_text(out / "results.md", "# Results\n\n" + note + markdown_table(summary, axes, cols))
    return summary
