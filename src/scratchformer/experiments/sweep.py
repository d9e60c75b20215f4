"""`scratchformer sweep`: run the grid (resumably), then write the table and the figures.

DIR/
  sweep.json                 what was asked (task, base recipe, sets, grid, seeds)
  .lock                      held while a sweep runs here (a second one stops at once)
  cells/<cell>/identity.json what the cell's runs were trained with (recipe, data hashes, --quick)
  cells/<cell>/seed<k>/      ordinary run folders (config.json, metrics.jsonl, model.safetensors...)
  cells/<cell>/seed<k>.json  how the run ended: done / diverged, seconds, peak memory
  runs.csv                   one row per run
  results.csv, results.md    mean ± std over seeds per cell
  metric_vs_value.png        the chosen columns against the first axis, error bars = std
  curves.png                 validation curves of every run
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from ..train.runfolder import lock_run_folder
from .plots import plot_curves, plot_vs_value
from .results import default_columns, runs_frame, write_tables
from .runner import RunSlot, SweepSpec, run_sweep


@dataclass
class SweepResult:
    spec: SweepSpec
    slots: list[RunSlot]
    runs: pd.DataFrame
    summary: pd.DataFrame
    metric: str  # the runs' validation metric (train.metric)
    columns: list[str]  # the table's columns
    figures: dict[str, Path]


def run_metric(slots: list[RunSlot]) -> str:
    for slot in slots:
        path = slot.run_dir / "train_config.json"
        if path.exists():
            return json.loads(path.read_text(encoding="utf-8")).get("metric", "loss")
    return "loss"


def sweep(spec: SweepSpec, log: Callable[[str], None] = print, columns: list[str] | None = None,
          plot_columns: list[str] | None = None,
          after_run: Callable[[RunSlot, dict], dict] | None = None) -> SweepResult:
    with lock_run_folder(spec.out, "sweep"):  # the runs and the tables from them, as one
        return _sweep(spec, log, columns, plot_columns, after_run)


def _sweep(spec: SweepSpec, log: Callable[[str], None], columns: list[str] | None,
           plot_columns: list[str] | None, after_run: Callable[[RunSlot, dict], dict] | None) -> SweepResult:
    slots = run_sweep(spec, log, after_run)
    axes = [a.name for a in spec.axes]
    runs = runs_frame(slots)
    summary = write_tables(spec.out, runs, axes, columns)
    metric = run_metric(slots)
    cols = columns or default_columns(summary)
    plot_cols = plot_columns or [c for c in cols if c != "params"][:3]
    figures = {}
    for name, path in (("metric_vs_value", plot_vs_value(summary, spec.axes, plot_cols, spec.out / "metric_vs_value.png")),
                       ("curves", plot_curves(slots, metric, spec.out / "curves.png"))):
        if path is not None:
            figures[name] = path
    log(f"results: {spec.out / 'results.md'}")
    return SweepResult(spec, slots, runs, summary, metric, cols, figures)
