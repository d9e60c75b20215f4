"""Run every cell × seed of a sweep as an ordinary training run, resumably.

Each run is `scratchformer train TASK --config BASE [data flags] --set ... --set train.seed=k
--out DIR/cells/<cell>/seed<k>`, made through `scratchformer.cli.main` (in a process of its own
by default, so its peak memory is its own). Beside the run folder the sweep keeps
`seed<k>.log` (the run's output) and, once the run is over, `seed<k>.json` (exit status,
diverged or not, seconds, peak memory). On a rerun:
  - a run with `seed<k>.json` is finished (or diverged): skipped;
  - a run folder with a checkpoint (`checkpoint.json`) was interrupted: resumed (`--resume`);
  - a run folder without a checkpoint holds no progress: removed and started over.
A cell's runs are reused only when the cell was trained with what is asked now
(`cells/<cell>/identity.json`, see identity.py): otherwise the sweep stops before it runs or
removes anything and names the setting that differs; `retrain_changed` (`--retrain-changed`)
retrains those cells instead. The whole sweep holds the lock of its `--out` folder
(train/runfolder.py): a second sweep or experiment there stops at once with the holder's pid.
A diverged run (the trainer's `TrainingDiverged`, exit 2 with "diverged" in its message) is
recorded as diverged and the sweep goes on; any other failure stops the sweep with its message.
"""
from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import UserError
from ..fileio import atomic_write_text, check_no_links, inside, make_dirs, open_append, remove
from ..train.checkpoint_store import has_checkpoint
from ..train.runfolder import lock_run_folder
from .child import run_train
from .grid import Axis, Cell, cells
from .identity import RETRAIN_FLAG, changes, data_identity, read_identity, resolved_recipe, write_identity


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
    quick: bool = False  # an experiment's --quick (part of what a cell is)
    retrain_changed: bool = False  # retrain the cells trained with other settings instead of refusing

    def __post_init__(self) -> None:
        self.out = Path(self.out)
        from ..tasks.faces import built_in, faces, having

        if self.task not in faces() or not faces()[self.task].sweep:
            raise UserError(f"--task {self.task!r}: choose {', '.join(having('sweep'))}")
        if self.isolate and not built_in(self.task):  # a child process would not know it
            raise UserError(f"--task {self.task} was registered in this process only: run its cells here "
                            "with --in-process")
        if self.seeds < 1:
            raise UserError(f"--seeds must be >= 1, got {self.seeds}")
        if self.config and not Path(self.config).is_file():
            raise UserError(f"--config {self.config} does not exist")
        for axis in self.axes:
            if any(k == "train.seed" for o in axis.overrides for k, _ in o):
                raise UserError(f"grid axis {axis.name!r} sets train.seed, which the sweep sets itself "
                                "(train.seed = 0..N-1): use --seeds N for repeats")
        if self.time_budget is not None and not (0 < self.time_budget < float("inf")):
            raise UserError(f"--time-budget must be a number of minutes > 0, got {self.time_budget}")

    def cells(self) -> list[Cell]:
        return cells(self.axes)

    def argv(self, cell: Cell, seed: int, run_dir: Path, resume: bool) -> list[str]:
        argv = ["train", self.task]
        if self.config:
            argv += ["--config", str(self.config)]
        for flag in ("data", "valid", "test"):
            if getattr(self, flag):
                argv += [f"--{flag}", str(getattr(self, flag))]
        for s in self.cell_sets(cell, seed):
            argv += ["--set", s]
        argv += list(self._sweep().argv)  # the task's own (classify: no TF-IDF baseline per run)
        return argv + ["--out", str(run_dir)] + (["--resume"] if resume else [])

    def _sweep(self):
        from ..tasks.faces import face

        return face(self.task).sweep

    def _has(self, key: str) -> bool:
        """Whether the task's recipe has the dotted option `key` (a sweep sets `train.seed` in every
        recipe, the quieter `train.progress` where there is one)."""
        from ..tasks.faces import face

        hints = face(self.task).recipe.hints()
        for part in key.split("."):
            if part not in hints:
                return False
            hints = hints[part].hints() if hasattr(hints[part], "hints") else {}
        return True

    def cell_sets(self, cell: Cell, seed: int | None = None) -> list[str]:
        """The `--set` overrides of the run `seed` of `cell` (None: of every run, the seed aside)."""
        sets = self._sweep().sets(self.config) + list(self.sets) + list(cell.sets)
        if seed is not None:
            sets += [f"train.seed={seed}"] + (["train.progress=false"] if self._has("train.progress") else [])
        if self.time_budget:
            sets.append(f"train.max_minutes={self.time_budget}")
        return sets

    def identity(self, cell: Cell, data: dict | None = None) -> dict:
        """What the runs of `cell` are: resolved recipe, data identity, --quick (identity.py)."""
        if data is None:
            data = {f: data_identity(f, getattr(self, f)) for f in ("data", "valid", "test")}
        identity = {"task": self.task, "quick": self.quick, "data": data,
                    "recipe": resolved_recipe(self.task, self.config, self.cell_sets(cell))}
        return json.loads(json.dumps(identity))  # as it reads back from identity.json (tuples as lists)

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
    with lock_run_folder(spec.out, "sweep"):
        return _run_sweep(spec, log, after_run)


def _run_sweep(spec: SweepSpec, log: Callable[[str], None],
               after_run: Callable[[RunSlot, dict], dict] | None) -> list[RunSlot]:
    make_dirs(spec.out)
    todo = slots(spec)
    identities = check_cells(spec, todo, log)  # before anything is written or removed
    atomic_write_text(spec.out / "sweep.json", json.dumps(spec.describe(), indent=1, ensure_ascii=False) + "\n")
    for i, slot in enumerate(todo, 1):
        where = f"[{i}/{len(todo)}] {slot.cell.name} seed {slot.seed}"
        if read_identity(slot.folder) != identities[slot.cell.name]:
            write_identity(slot.folder, identities[slot.cell.name])
        if slot.record() is not None:
            log(f"{where}: finished before, skipped")
            continue
        record = run_slot(spec, slot)
        if after_run is not None and record["status"] == "done":
            record.update(after_run(slot, record))
        atomic_write_text(slot.record_path, json.dumps(record, indent=1) + "\n", root=spec.out)
        log(f"{where}: {record['status']}{' (resumed)' if record['resumed'] else ''} in {record['wall_s']:.0f} s")
    return todo


def _cell_entries(folder: Path) -> list[Path]:
    """What the sweep keeps in a cell folder: the runs `seed<k>/`, their `seed<k>.json/.log`."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.name.startswith("seed") and p.name[4:5].isdigit())


def check_cells(spec: SweepSpec, todo: list[RunSlot], log: Callable[[str], None] = print) -> dict[str, dict]:
    """The identity of every cell asked for; a cell folder that holds runs made with other
    settings (or with none recorded) stops the sweep, naming what differs, unless
    `spec.retrain_changed`: then those runs are removed here and trained again."""
    data = {f: data_identity(f, getattr(spec, f)) for f in ("data", "valid", "test")}
    identities: dict[str, dict] = {}
    changed: list[tuple[RunSlot, str]] = []
    for slot in todo:
        if slot.cell.name in identities:
            continue
        now = identities[slot.cell.name] = spec.identity(slot.cell, data)
        if not _cell_entries(slot.folder):
            continue
        before = read_identity(slot.folder)
        if before is None:
            # runs that finished without a record of their settings (an older version) are not
            # taken on trust; unfinished ones hold nothing the tables would read: resumed as before
            if any(p.suffix == ".json" for p in _cell_entries(slot.folder)):
                changed.append((slot, "its runs record no settings (made by an older scratchformer)"))
        elif before != now:
            diff = changes(before, now)
            changed.append((slot, ", ".join(diff) if diff else "its recorded settings differ"))
    if changed and not spec.retrain_changed:
        slot, why = changed[0]
        more = f" (and {len(changed) - 1} more cell{'s' * (len(changed) > 2)})" if len(changed) > 1 else ""
        raise UserError(f"cell {slot.cell.name}: {why}{more}; pass {RETRAIN_FLAG} to retrain those cells, "
                        "or use another --out")
    for slot, why in changed:
        log(f"{slot.cell.name}: {why}: retrained")
        for p in _cell_entries(slot.folder):
            remove(p, spec.out)  # never through a link (fileio.remove)
    return identities


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
    returncode = run_child(cmd, logf)
    try:
        result = json.loads(result_path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):  # killed or crashed before writing it
        result = {"rc": returncode if returncode >= 0 else 128 - returncode,
                  "wall_s": None, "peak_rss_mib": None}
    remove(result_path, root=slot.folder)
    return result


def run_child(cmd: list[str], logf) -> int:
    """Run one cell's child process to its end; its exit status. A SIGTERM or SIGHUP to this
    process (the sweep or experiment) is passed on to the child, which stops (its last checkpoint
    resumes), and then this process stops too (SystemExit 128 + the signal): a signal to the parent
    never leaves a child training alone. Ctrl-C reaches both already (one process group)."""
    proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT)
    got: list[int] = []

    def forward(signum, _frame) -> None:
        got.append(signum)
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, forward)
    try:
        returncode = proc.wait()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if got:
        raise SystemExit(128 + got[0])
    return returncode


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
