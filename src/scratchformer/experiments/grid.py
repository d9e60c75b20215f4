"""The grid of a sweep: axes, their cross product, and the folder name of each cell.

An axis is either one recipe key with values (`--grid model.encoder.n_heads=1,2,4`), or a
named axis whose values each stand for several `--set` overrides (spec files only), e.g.
`"ablation": {"none": {}, "no-residual": {"model.encoder.residual": false}}`.
A cell is one point of the cross product; its runs (one per seed) live in
`DIR/cells/<axis=label,...>/seed<k>`.
"""
from __future__ import annotations

import itertools
import json
from dataclasses import dataclass

from ..errors import UserError
from ..fileio import plain_name


def parse_value(raw: str):
    """`3` -> 3, `1e-3` -> 0.001, `true` -> True, `rope` -> 'rope' (JSON, else a plain string)."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def set_value(value) -> str:
    """The text after `--set key=`: strings as they are (`rope`), everything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def label_of(value) -> str:
    """How a value appears in folder names, tables and spec selectors: `0.001`, `true`, `rope`."""
    text = value if isinstance(value, str) else json.dumps(value)
    return text.replace("/", "_").replace(",", ";").replace("=", "-")


@dataclass(frozen=True)
class Axis:
    name: str  # the column and folder name (a key's last part, or the named axis)
    labels: tuple[str, ...]
    overrides: tuple[tuple[tuple[str, object], ...], ...]  # per label: (key, value) pairs
    values: tuple = ()  # the raw values (numbers can be plotted on a numeric axis)

    @classmethod
    def from_key(cls, key: str, values: list, name: str | None = None) -> "Axis":
        if not values:
            raise UserError(f"--grid {key}: give at least one value, e.g. {key}=1,2")
        labels = tuple(label_of(v) for v in values)
        if len(set(labels)) != len(labels):
            raise UserError(f"--grid {key}: values repeat ({', '.join(labels)})")
        return cls(name or key.split(".")[-1], labels, tuple(((key, v),) for v in values), tuple(values))

    @classmethod
    def named(cls, name: str, variants: dict) -> "Axis":
        if not isinstance(variants, dict) or not variants:
            raise UserError(f"grid axis {name!r}: expected {{label: {{key: value, ...}}, ...}}")
        labels = tuple(label_of(k) for k in variants)
        overrides = tuple(tuple(v.items()) for v in variants.values())
        return cls(name, labels, overrides, tuple(variants))

    def __post_init__(self) -> None:
        # the name and labels make the cell's folder name (OUT/cells/<axis=label,...>): never a path
        for text, what in [(self.name, "grid axis")] + [(lab, f"grid axis {self.name!r}: value") for lab in self.labels]:
            if not isinstance(text, str):
                raise UserError(f"{what} {text!r} must be a string")
            if any(c in text for c in "/\\\0"):  # '.' and '..' are fine: the cell is `axis=label`
                plain_name(text, what, where="OUT/cells")  # raises, saying which

    def numeric(self) -> bool:
        return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.values)


def parse_grid_arg(item: str) -> tuple[str, list]:
    """`KEY=V1,V2` -> (KEY, [V1, V2]); commas inside [...] or {...} do not split."""
    if "=" not in item:
        raise UserError(f"--grid expects KEY=V1,V2,..., got {item!r}")
    key, raw = item.split("=", 1)
    parts, depth, cur = [], 0, ""
    for ch in raw:
        depth += ch in "[{"
        depth -= ch in "]}"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return key.strip(), [parse_value(p.strip()) for p in parts if p.strip()]


def axes_from(grid: dict) -> list[Axis]:
    """Axes from a spec's grid: `{key: [values]}` or `{name: {label: {key: value}}}`. Two keys
    with the same last part keep their full dotted names."""
    last = [k.split(".")[-1] for k in grid]
    axes = []
    for key, spec in grid.items():
        if isinstance(spec, dict):
            axes.append(Axis.named(key, spec))
        else:
            short = key.split(".")[-1]
            axes.append(Axis.from_key(key, list(spec), short if last.count(short) == 1 else key))
    return axes


@dataclass(frozen=True)
class Cell:
    """One point of the grid: a label per axis and the `--set` overrides that make it."""

    labels: tuple[tuple[str, str], ...]  # (axis name, label)
    sets: tuple[str, ...]  # "key=json value"

    @property
    def name(self) -> str:
        return ",".join(f"{a}={v}" for a, v in self.labels) or "base"

    def label(self, axis: str) -> str:
        return dict(self.labels)[axis]

    def matches(self, selector: dict) -> bool:
        """True when the cell has each `axis: value` of the selector (values compared as labels)."""
        own = dict(self.labels)
        for axis, value in selector.items():
            if axis not in own:
                raise UserError(f"selector {selector}: no grid axis {axis!r}; axes: {', '.join(own)}")
            if own[axis] != label_of(value):
                return False
        return True


def cells(axes: list[Axis]) -> list[Cell]:
    """The cross product of the axes, in the order given (the last axis varies fastest)."""
    out = []
    for combo in itertools.product(*(range(len(a.labels)) for a in axes)):
        labels = tuple((a.name, a.labels[i]) for a, i in zip(axes, combo))
        sets = tuple(f"{k}={set_value(v)}" for a, i in zip(axes, combo) for k, v in a.overrides[i])
        out.append(Cell(labels, sets))
    return out
