"""What a sweep cell holds: its resolved recipe and the identity of its data, kept beside the runs.

A rerun into the same `--out` reuses a cell's runs only when what is asked now equals what
trained them: the recipe resolved from `--config` and every `--set` (the seed aside, it is the
cell's own), `--quick`, and the data (a content hash of each file; a registered set by its name
and the sha256 of its pinned archives). Anything else would table the old runs under the new
settings. `cells/<cell>/identity.json` (written atomically before the cell's first run) holds it;
`changes(old, new)` says what differs in words a user can act on.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..fileio import atomic_write_text, make_dirs

IDENTITY = "identity.json"
RETRAIN_FLAG = "--retrain-changed"
# what a cell's runs may set for themselves: not part of what the cell is
_OWN = ("train.seed", "train.progress")


def recipe_class(task: str):
    """The recipe class of `task`, from its face (tasks/faces.py)."""
    from ..tasks.faces import face

    return face(task).recipe


def _flat(d: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def resolved_recipe(task: str, config: str | None, sets: list[str]) -> dict[str, Any]:
    """The recipe a cell's runs train with (before the sizes derived from the data), as dotted
    keys. A bad `--set` or `--config` stops here, before any run starts or anything is removed."""
    from ..tasks.runs import resolve_recipe

    own = [s for s in sets if s.split("=", 1)[0].strip() not in _OWN]
    flat = _flat(resolve_recipe(recipe_class(task), config, own).to_dict())
    return {k: v for k, v in flat.items() if k not in _OWN}


def data_identity(flag: str, value: str | None) -> dict[str, Any] | None:
    """`--data/--valid/--test VALUE`: a file by its sha256, a registered set by name + pins."""
    if not value:
        return None
    path = Path(value)
    if path.is_file():
        from ..data.fetch import sha256_file

        return {"file": str(value), "sha256": sha256_file(path)}
    from ..tasks.runs import registered

    info = registered(value)
    if info is None:  # a path that does not exist: the run itself will say so
        raise UserError(f"--{flag} {value}: no such file (and not a registered data set); "
                        "check the path or see `scratchformer datasets`")
    return {"dataset": info.name, "sha256": sorted(p.sha256 for p in info.pins)}


def describe_data(d: dict | None) -> str:
    if d is None:
        return "not given"
    if "file" in d:
        return f"{d['file']} (sha256 {d['sha256'][:12]})"
    return f"registered {d['dataset']!r}"


def changes(old: dict, new: dict) -> list[str]:
    """What differs between the identity a cell was trained with and the one asked now."""
    out = []
    if bool(old.get("quick")) != bool(new.get("quick")):
        out.append(f"--quick was {'on' if old.get('quick') else 'off'}, now {'on' if new.get('quick') else 'off'}")
    for flag in ("data", "valid", "test"):
        a, b = (old.get("data") or {}).get(flag), (new.get("data") or {}).get(flag)
        if a != b:
            out.append(f"--{flag} was {describe_data(a)}, now {describe_data(b)}")
    ra, rb = old.get("recipe") or {}, new.get("recipe") or {}
    for key in sorted(set(ra) | set(rb)):
        if ra.get(key, "(unset)") != rb.get(key, "(unset)"):
            out.append(f"{key} was {_show(ra.get(key, '(unset)'))}, now {_show(rb.get(key, '(unset)'))}")
    return out


def _show(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v)


def read_identity(folder: Path) -> dict | None:
    """The identity a cell folder records; None when it records none. A damaged file is an error."""
    path = folder / IDENTITY
    if not path.exists() and not path.is_symlink():
        return None
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(f"{path} is damaged ({type(e).__name__}); pass {RETRAIN_FLAG} to retrain the "
                        "cell, or restore the file") from None
    if not isinstance(d, dict) or not isinstance(d.get("recipe"), dict):
        raise UserError(f"{path} is not a cell identity (expected an object with a 'recipe'); pass "
                        f"{RETRAIN_FLAG} to retrain the cell, or restore the file")
    return d


def write_identity(folder: Path, identity: dict) -> None:
    make_dirs(folder)
    atomic_write_text(folder / IDENTITY, json.dumps(identity, indent=1, ensure_ascii=False) + "\n")
