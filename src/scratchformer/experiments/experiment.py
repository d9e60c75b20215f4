"""`scratchformer experiment NAME`: a shipped spec -> a sweep -> verdicts -> `report.md`."""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import UserError
from ..fileio import atomic_write_text, inside, make_dirs
from ..train.runfolder import lock_run_folder
from .extrapolation import FIGURES
from .grid import axes_from, cells, label_of, parse_grid_arg
from .measures import MEASURES
from .report import write_report
from .runner import RunSlot, SweepSpec
from .spec import ExperimentSpec, Plan, prepare_data
from .sweep import SweepResult, sweep
from .verdict import Outcome, evaluate_check


@dataclass
class ExperimentResult:
    spec: ExperimentSpec
    plan: Plan
    sweep: SweepResult
    outcomes: list[Outcome]
    report: Path


def run_experiment(name: str, out: str | Path, quick: bool = False, seeds: int | None = None,
                   isolate: bool | None = None, sets: list[str] | None = None,
                   grid: list[str] | None = None, log: Callable[[str], None] = print,
                   retrain_changed: bool = False, data: str | None = None) -> ExperimentResult:
    """Run (or resume) experiment `name` into `out`. `isolate`: one process per run (default:
    yes for full runs, no in quick mode, where start-up time would dominate). `sets`: extra
    `--set` overrides for every run, after the spec's (e.g. a shorter run on a slow machine);
    `grid`: `KEY=V1,V2` replaces the values of that axis of the spec (or adds an axis).
    `retrain_changed`: retrain the cells of `out` trained with other settings (else refused).
    `data`: another registered data set of the spec's task in place of the spec's (the claim
    checked at another size, e.g. `thucnews-100k` for `thucnews`).
    The experiment holds the lock of `out` throughout (a second one there stops at once)."""
    spec = ExperimentSpec.load(name)
    if data is not None:
        spec.data = _same_task_dataset(spec, data)
    if seeds is not None and (isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1):
        raise UserError(f"--seeds must be a whole number >= 1, got {seeds!r}")
    for m in spec.measures:
        if m not in MEASURES:
            raise UserError(f"{spec.path}: unknown measure {m!r}; known: {', '.join(MEASURES)}")
    for f in spec.figures:
        if f not in FIGURES:
            raise UserError(f"{spec.path}: unknown figure {f!r}; known: {', '.join(FIGURES)}")
    plan = spec.resolved(quick, seeds)
    plan.sets += list(sets or [])
    for item in grid or []:  # `KEY=V1,V2`: this axis takes these values (a smaller grid)
        key, values = parse_grid_arg(item)
        named = plan.grid.get(key)
        if isinstance(named, dict):  # a named axis of the spec: keep these of its labels
            labels = {label_of(k): k for k in named}
            unknown = [v for v in values if label_of(v) not in labels]
            if unknown or not values:
                raise UserError(f"--grid {item}: {key!r} is a named axis of {spec.path.name}; choose among its "
                                f"labels: {', '.join(labels)}")
            values = {labels[label_of(v)]: named[labels[label_of(v)]] for v in values}
        plan.grid = {**plan.grid, key: values}
    axes = axes_from(plan.grid)  # before anything is made: an axis must name a folder inside out
    out = Path(out)
    for cell in cells(axes):
        inside(out / "cells", cell.name, "grid cell")
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file, not a folder; choose another --out")
    with lock_run_folder(out, "experiment"):
        return _run_experiment(spec, plan, axes, out, quick, isolate, sets, grid, log, retrain_changed, data)


def _run_experiment(spec: ExperimentSpec, plan: Plan, axes: list, out: Path, quick: bool, isolate: bool | None,
                    sets: list[str] | None, grid: list[str] | None, log: Callable[[str], None],
                    retrain_changed: bool, data: str | None) -> ExperimentResult:
    out = make_dirs(out)
    t0 = time.monotonic()
    flags, texts = prepare_data(spec, plan.subset, out)
    base = out / "base.json"
    atomic_write_text(base, json.dumps(spec.config, indent=1, ensure_ascii=False) + "\n")
    sw = SweepSpec(task=spec.task, out=out, axes=axes, seeds=plan.seeds, config=str(base),
                   sets=plan.sets, isolate=(not quick) if isolate is None else isolate, quick=quick,
                   retrain_changed=retrain_changed, **flags)

    def measure(slot: RunSlot, record: dict) -> dict:
        values = {}
        for m in spec.measures:  # a measure may give several columns (a dict)
            v = MEASURES[m](slot.run_dir, texts)
            values.update(v if isinstance(v, dict) else {m: v})
        return {"measures": {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in values.items()}}

    result = sweep(sw, log, columns=_columns(spec), plot_columns=spec.plot, after_run=measure if spec.measures else None)
    for name in spec.figures:  # the spec's own figures, beside the sweep's
        path = FIGURES[name][0](result.slots, out / f"{name}.png")
        if path is not None:
            result.figures[name] = path
    axes = [a.name for a in sw.axes]
    outcomes = [evaluate_check(c, result.runs, axes, quick) for c in spec.checks]
    extra = f" --data {spec.data}" if data is not None else ""
    extra += "".join(f" --grid {x}" for x in grid or []) + "".join(f" --set {x}" for x in sets or [])
    command = f"scratchformer experiment {spec.name}{' --quick' if quick else ''} --seeds {plan.seeds}{extra} --out {out}"
    report = write_report(spec, plan, result, outcomes, command, time.monotonic() - t0)
    for o in outcomes:
        log(f"{o.says}: {o.verdict} ({o.measured})")
    log(f"report: {report}")
    return ExperimentResult(spec, plan, result, outcomes, report)


def _same_task_dataset(spec: ExperimentSpec, name: str) -> str:
    from ..data.registry import get_dataset

    info = get_dataset(name)  # an unknown name: its one-line error with the known ones
    if info.task != spec.task:
        raise UserError(f"--data {name}: a {info.task} data set, but {spec.name} is a {spec.task} experiment; "
                        f"choose a registered {spec.task} data set (`scratchformer datasets`)")
    return info.name


def _columns(spec: ExperimentSpec) -> list[str] | None:
    if spec.columns is None:
        return None
    return list(spec.columns) + [m for m in spec.measures if m not in spec.columns]
