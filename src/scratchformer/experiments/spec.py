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
        known = set(cls.__dataclass_fields__) - {"path"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise UserError(f"{path}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        missing = sorted({"name", "claim", "task", "data", "config", "grid", "checks"} - set(d))
        if missing:
            raise UserError(f"{path}: missing key(s) {', '.join(missing)}")
        return cls(**d, path=path)

    def resolved(self, quick: bool, seeds: int | None) -> "Plan":
        q = self.quick if quick else {}
        unknown = sorted(set(q) - {"set", "grid", "seeds", "subset"})
        if unknown:
            raise UserError(f"{self.path}: quick has unknown key(s) {', '.join(unknown)}")
        return Plan(sets=list(self.set) + list(q.get("set", [])), grid=q.get("grid", self.grid),
                    seeds=seeds or q.get("seeds", self.seeds), subset=q.get("subset", self.subset), quick=quick)


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
    from ..data.registry import load_dataset

    if spec.task == "lm":
        text = load_dataset(spec.data)
        if not subset:
            return {"data": spec.data}, []
        folder = make_dirs(out / "data", root=out)  # `data/` linked elsewhere: refused
        n, m = int(subset["train"]), int(subset.get("valid", subset["train"] // 10))
        cut = int(len(text) * 0.9)  # validation from the part `train lm` holds out by default
        atomic_write_text(folder / "train.txt", text[:n], root=out)
        atomic_write_text(folder / "valid.txt", text[cut:cut + m], root=out)
        return {"data": str(folder / "train.txt"), "valid": str(folder / "valid.txt")}, []
    if spec.task != "classify":
        if subset:
            raise UserError(f"{spec.path}: 'subset' works for classify and lm specs, not {spec.task}")
        return {"data": spec.data}, []
    data = load_dataset(spec.data)
    texts = [t for t, _ in data.valid[:32]]
    if not subset:
        return {"data": spec.data}, texts
    folder = make_dirs(out / "data", root=out)
    flags = {}
    for split in ("train", "valid", "test"):
        pairs = getattr(data, split)[: int(subset.get(split, len(getattr(data, split))))]
        rows = "".join(json.dumps({"text": t, "label": lab}, ensure_ascii=False) + "\n" for t, lab in pairs)
        atomic_write_text(folder / f"{split}.jsonl", rows, root=out)
        flags["data" if split == "train" else split] = str(folder / f"{split}.jsonl")
    return flags, texts
