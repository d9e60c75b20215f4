"""Experiment specs: the JSON files in `recipes/experiments/` (read them, copy them, edit them).

A spec names a claim (Chinese original and English), a task and a registered data set, a base
recipe (`config`, the same JSON as `train --config`), `set` overrides for every run, the
`grid`, the number of `seeds`, the `checks` that decide the verdict (see `verdict.py`), and a
`quick` block (tiny model, few steps, a data subset) that the tests run. Keys:

  name, claim {zh, en}, source, task, data, config, set, grid, seeds, subset, measures,
  columns, plot, figures, checks, notes, quick {set, grid, seeds, subset}

`figures` names extra figures drawn from the run folders (`extrapolation.FIGURES`).

`subset` ({"train": n, "valid": n, "test": n} examples, or {"train": chars, "valid": chars}
for a language model) writes the first n of each split to `OUT/data/` and trains on those
files; without it the runs read the registered data set itself.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UserError
from ..tasks.runs import refuse_wrong_kind
from ..fileio import atomic_write_text, make_dirs

SPEC_DIR = Path(__file__).resolve().parents[3] / "recipes" / "experiments"


def available() -> list[str]:
    return sorted(p.stem for p in SPEC_DIR.glob("*.json")) if SPEC_DIR.is_dir() else []


@dataclass
class ExperimentSpec:
    name: str
    claim: dict
    task: str
    data: str
    config: dict
    grid: dict
    checks: list[dict]
    source: str = ""
    set: list[str] = field(default_factory=list)
    seeds: int = 3
    subset: dict | None = None
    measures: list[str] = field(default_factory=list)
    columns: list[str] | None = None
    plot: list[str] | None = None
    figures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    quick: dict = field(default_factory=dict)
    path: Path | None = None

    @classmethod
    def load(cls, name: str) -> "ExperimentSpec":
        """A shipped experiment by name, or a spec file by path."""
        path = Path(name)
        if not (path.suffix == ".json" and path.exists()):
            path = SPEC_DIR / f"{name}.json"
        if not path.exists():
            raise UserError(f"no experiment {name!r}; shipped: {', '.join(available()) or 'none'} "
                            "(or pass the path of a spec .json)")
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise UserError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
        if not isinstance(d, dict):
            raise UserError(f"{path}: expected a JSON object of spec keys, found {_kind(d)}")
        refuse_wrong_kind(d, path, "experiment spec")
        known = set(cls.__dataclass_fields__) - {"path"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise UserError(f"{path}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        missing = sorted({"name", "claim", "task", "data", "config", "grid", "checks"} - set(d))
        if missing:
            raise UserError(f"{path}: missing key(s) {', '.join(missing)}")
        check_spec(d, path)
        return cls(**d, path=path)

    def resolved(self, quick: bool, seeds: int | None) -> "Plan":
        q = self.quick if quick else {}
        unknown = sorted(set(q) - {"set", "grid", "seeds", "subset"})
        if unknown:
            raise UserError(f"{self.path}: quick has unknown key(s) {', '.join(unknown)}")
        return Plan(sets=list(self.set) + list(q.get("set", [])), grid=q.get("grid", self.grid),
                    seeds=seeds or q.get("seeds", self.seeds), subset=q.get("subset", self.subset), quick=quick)


def _kind(v) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null",
            int: "a number", float: "a number"}.get(type(v), type(v).__name__)


_STR_LIST = ("a list of strings", lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v))
_OBJECT = ("an object", lambda v: isinstance(v, dict))
_SEEDS = ("a whole number >= 1", lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 1)
_SUBSET = ("null or an object of whole numbers >= 1 per split",
           lambda v: v is None or (isinstance(v, dict) and all(
               k in ("train", "valid", "test") and isinstance(n, int) and not isinstance(n, bool) and n >= 1
               for k, n in v.items())))
_GRID = ("an object of one or more axes: {key: [values, ...]} or {name: {label: {key: value}}}",
         lambda v: isinstance(v, dict) and len(v) > 0 and all(isinstance(k, str) and (
             (isinstance(a, list) and len(a) > 0) or (isinstance(a, dict) and len(a) > 0 and all(
                 isinstance(o, dict) for o in a.values()))) for k, a in v.items()))
_TYPES = {
    "name": ("a string", lambda v: isinstance(v, str) and v.strip() != ""),
    "claim": ("an object {zh, en} of strings", lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values())),
    "task": ("the name of a task that sweeps (a face with `sweep`)", lambda v: v in _sweeping()),
    "data": ("a registered data set name (a string)", lambda v: isinstance(v, str) and v.strip() != ""),
    "config": _OBJECT, "grid": _GRID, "set": _STR_LIST, "seeds": _SEEDS, "subset": _SUBSET,
    "checks": ("a list of objects", lambda v: isinstance(v, list) and all(isinstance(c, dict) for c in v)),
    "source": ("a string", lambda v: isinstance(v, str)),
    "measures": _STR_LIST, "figures": _STR_LIST, "notes": _STR_LIST,
    "columns": ("null or a list of strings", lambda v: v is None or _STR_LIST[1](v)),
    "plot": ("null or a list of strings", lambda v: v is None or _STR_LIST[1](v)),
    "quick": _OBJECT,
}
def _sweeping() -> list[str]:
    from ..tasks.faces import having

    return having("sweep")


_QUICK = {"set": _STR_LIST, "grid": _GRID, "seeds": _SEEDS, "subset": _SUBSET}


CHECK_KINDS = ("diff", "ratio", "value", "diverged_more")  # verdict.py's


def check_spec(d: dict, path: Path) -> None:
    """Every key of a spec has the type it must have: one line naming the file and the key
    (before any file is written or any run starts)."""
    for key, value in d.items():
        what, ok = _TYPES[key]
        if not ok(value):
            raise UserError(f"{path}: {key!r} must be {what}, found {_kind(value)} {json.dumps(value)[:60]}")
    for i, check in enumerate(d.get("checks", [])):  # by kind, before any run: an unknown one judged nothing
        kind = check.get("kind", "diff")
        if kind not in CHECK_KINDS:
            raise UserError(f"{path}: check {i + 1} has kind {kind!r}; known kinds: {', '.join(CHECK_KINDS)}")
    for key, value in d.get("quick", {}).items():
        if key not in _QUICK:
            raise UserError(f"{path}: quick has unknown key {key!r}; known: {', '.join(_QUICK)}")
        what, ok = _QUICK[key]
        if not ok(value):
            raise UserError(f"{path}: 'quick.{key}' must be {what}, found {_kind(value)} {json.dumps(value)[:60]}")


@dataclass
class Plan:
    """What one invocation runs: the spec with `--quick` and `--seeds` applied."""

    sets: list[str]
    grid: dict
    seeds: int
    subset: dict | None
    quick: bool


def prepare_data(spec: ExperimentSpec, subset: dict | None, out: Path) -> tuple[dict, list[str]]:
    """The data flags of `train` (`--data/--valid/--test`) and some validation texts (for
    measurements). With a subset, its files are written to `out/data/` first."""
    from ..tasks.faces import face

    sweep = face(spec.task).sweep
    if not sweep:
        sweep()  # the one line saying why
    if subset and not sweep.subsets:
        raise UserError(f"{spec.path}: 'subset' is not written for {spec.task} specs; drop it (the runs read "
                        f"the registered data set {spec.data!r})")
    folder = make_dirs(out / "data", root=out) if subset else None  # `data/` linked elsewhere: refused
    return sweep.data(spec.data, subset, folder, lambda path, text: atomic_write_text(path, text, root=out))
