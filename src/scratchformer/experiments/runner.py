"""Run every cell × seed of a sweep as an ordinary training run, resumably.

Each run is `scratchformer train TASK --config BASE [data flags] --set ... --set train.seed=k
--out DIR/cells/<cell>/seed<k>`, made through `scratchformer.cli.main` (in a process of its own
by default, so its peak memory is its own). Beside the run folder the sweep keeps
`seed<k>.log` (the run's output) and, once the run is over, `seed<k>.json` (exit status,
diverged or not, seconds, peak memory). On a rerun:
  - a run with `seed<k>.json` is finished (or diverged): skipped;
  - a run folder with a checkpoint (`checkpoint.json`) was interrupted: resumed (`--resume`);
  - a run folder without a checkpoint holds no progress: removed and started over.
A diverged run (the trainer's `TrainingDiverged`, exit 2 with "diverged" in its message) is
recorded as diverged and the sweep goes on; any other failure stops the sweep with its message.
"""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import UserError
from ..fileio import atomic_write_text, check_no_links, inside, make_dirs, open_append, remove
from ..train.checkpoint_store import has_checkpoint
from .child import run_train
from .grid import Axis, Cell, cells


@dataclass
class SweepSpec:
    """What `scratchformer sweep` runs: a base recipe, a grid, seeds, and the train flags."""

    task: str
    out: Path
    axes: list[Axis]
    seeds: int = 1
    config: str | None = None  # the base recipe (JSON), as `train --config`
    sets: list[str] = field(default_factory=list)  # `--set` for every cell, before the grid's
    data: str | None = None
    valid: str | None = None
    test: str | None = None
    time_budget: float | None = None  # minutes per run (train.max_minutes)
    isolate: bool = True  # each run in a process of its own (honest peak memory)

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        if self.task not in ("classify", "translate", "lm"):
            raise UserError(f"--task {self.task!r}: choose classify, translate or lm")
        if self.seeds < 1:
            raise UserError(f"--seeds must be >= 1, got {self.seeds}")
        if self.config and not Path(self.config).is_file():
            raise UserError(f"--config {self.config} does not exist")

    def cells(self) -> list[Cell]:
        return cells(self.axes)

    def argv(self, cell: Cell, seed: int, run_dir: Path, resume: bool) -> list[str]:
        argv = ["train", self.task]
        if self.config:
            argv += ["--config", str(self.config)]
        for flag in ("data", "valid", "test"):
            if getattr(self, flag):
                argv += [f"--{flag}", str(getattr(self, flag))]
        # without --config a classify run is the adaptive default, which trains as many seeds as fit:
        # here the sweep's own seeds are the repeats, so each cell is one run (a --set can still say otherwise)
        one_run = ["ensemble=1"] if self.task == "classify" and not self.config else []
        sets = one_run + list(self.sets) + list(cell.sets) + [f"train.seed={seed}", "train.progress=false"]
        if self.time_budget:
            sets.append(f"train.max_minutes={self.time_budget}")
        for s in sets:
            argv += ["--set", s]
        if self.task == "classify":  # the TF-IDF baseline depends on the split, not the cell: fit it once, not per run
            argv.append("--no-baseline")
        return argv + ["--out", str(run_dir)] + (["--resume"] if resume else [])

    def describe(self) -> dict:
        return {"task": self.task, "config": self.config, "sets": self.sets, "data": self.data,
                "valid": self.valid, "test": self.test, "seeds": self.seeds,
                "time_budget": self.time_budget,
                "grid": {a.name: dict(zip(a.labels, [dict(o) for o in a.overrides])) for a in self.axes}}


@dataclass
class RunSlot:
    """Where one seed of one cell lives."""

    cell: Cell
    seed: int
    folder: Path  # DIR/cells/<cell>

    @property
    def run_dir(self) -> Path:
        return self.folder / f"seed{self.seed}"

    @property
    def record_path(self) -> Path:
        return self.folder / f"seed{self.seed}.json"

    @property
    def log_path(self) -> Path:
        return self.folder / f"seed{self.seed}.log"

    def record(self) -> dict | None:
        try:
            return json.loads(self.record_path.read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            return None


def slots(spec: SweepSpec) -> list[RunSlot]:
    return [RunSlot(c, s, inside(spec.out / "cells", c.name, "grid cell")) for c in spec.cells() for s in range(spec.seeds)]


def run_sweep(spec: SweepSpec, log: Callable[[str], None] = print,
              after_run: Callable[[RunSlot, dict], dict] | None = None) -> list[RunSlot]:
    """Run what is not finished yet; return every slot. `after_run(slot, record)` may add
    measurements to a new record (e.g. head redundancy) before it is written."""
    make_dirs(spec.out)
    atomic_write_text(spec.out / "sweep.json", json.dumps(spec.describe(), indent=1, ensure_ascii=False) + "\n")
    todo = slots(spec)
    for i, slot in enumerate(todo, 1):
        where = f"[{i}/{len(todo)}] {slot.cell.name} seed {slot.seed}"
        if slot.record() is not None:
            log(f"{where}: finished before, skipped")
            continue
        record = run_slot(spec, slot)
        if after_run is not None and record["status"] == "done":
            record.update(after_run(slot, record))
        atomic_write_text(slot.record_path, json.dumps(record, indent=1) + "\n", root=spec.out)
        log(f"{where}: {record['status']}{' (resumed)' if record['resumed'] else ''} in {record['wall_s']:.0f} s")
    return todo


def run_slot(spec: SweepSpec, slot: RunSlot) -> dict:
    """Train one slot (fresh or resumed); the record of how it ended. Raises on failures that
    are not divergence, and on an interruption."""
    make_dirs(slot.folder, root=spec.out)  # refuses a linked cells/ or cell folder
    check_no_links(slot.run_dir, root=spec.out)
    resume = has_checkpoint(slot.run_dir)
    if not resume:
        remove(slot.run_dir, root=spec.out)  # killed before its first checkpoint: nothing to resume
    argv = spec.argv(slot.cell, slot.seed, slot.run_dir, resume)
    with open_append(slot.log_path, root=spec.out) as logf:
        logf.write(f"$ scratchformer {' '.join(argv)}\n")
        logf.flush()
        result = _run_isolated(argv, slot, logf) if spec.isolate else _run_here(argv, logf)
    error = _last_error(slot.log_path)
    rc = result["rc"]
    if rc == 130:
        raise KeyboardInterrupt
    diverged = rc == 2 and "diverged" in error
    if rc != 0 and not diverged:
        raise UserError(f"run {slot.run_dir} failed (exit {rc}): {error or 'see its log'} "
                        f"(log: {slot.log_path}); fix it and rerun the sweep to continue")
    return {"status": "diverged" if diverged else "done", "diverged": diverged, "error": error or None,
            "resumed": resume, **result}


def _run_isolated(argv: list[str], slot: RunSlot, logf) -> dict:
    result_path = slot.folder / f"seed{slot.seed}.result.json"
    remove(result_path, root=slot.folder)
    cmd = [sys.executable, "-m", "scratchformer.experiments.child", str(result_path), *argv]
    proc = subprocess.run(cmd, stdout=logf, stderr=subprocess.STDOUT, check=False)
    try:
        result = json.loads(result_path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):  # killed or crashed before writing it
        result = {"rc": proc.returncode if proc.returncode >= 0 else 128 - proc.returncode,
                  "wall_s": None, "peak_rss_mib": None}
    remove(result_path, root=slot.folder)
    return result


def _run_here(argv: list[str], logf) -> dict:
    with contextlib.redirect_stdout(logf), contextlib.redirect_stderr(logf):
        try:
            return run_train(argv)
        except Exception as e:  # noqa: BLE001 - a crash of one run is reported like a child's
            traceback.print_exc()
            print(f"error: {type(e).__name__}: {e}")
            return {"rc": 1, "wall_s": None, "peak_rss_mib": None}


def _last_error(log_path: Path) -> str:
    """The last `error: ...` line the latest attempt (after the last `$ scratchformer`) printed."""
    lines = log_path.read_text(encoding="utf-8", errors="replace").splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("$ scratchformer ")]
    lines = lines[starts[-1]:] if starts else lines
    errors = [line[len("error: "):] for line in lines if line.startswith("error: ")]
    return errors[-1] if errors else ""
