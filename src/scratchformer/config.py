"""Dataclass configs that round-trip through JSON, with typed values, typed `--set` and freezing.

`JsonConfig` is the one config mechanism of the project: every config (blocks, models,
training, task recipes) is a dataclass that inherits it, so `cfg.to_dict()`, `Cfg.from_dict(d)`,
`cfg.save_json(path)` and `Cfg.load_json(path)` work the same everywhere. It lives at the
bottom of the package (beside `errors`) because `nn`, `train` and `tasks` all build on it.

Every value is checked against its field's type when a config is built from a dict (a JSON
file or `--set`): `"False"` is not a bool, `"abc"` is not an int. `set_path("a.b.c", "text")`
parses a command-line string by the field's type (bools: true/false/1/0/yes/no; `null` for
optional fields; lists as JSON or comma-separated) and names the closest valid key when a key
is unknown. `freeze()` makes a resolved recipe read-only, so nothing changes it after it was
recorded in the run directory.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
import os
import types
import typing
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable, TypeVar

from .errors import UserError

T = TypeVar("T", bound="JsonConfig")
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _closest(name: str, known) -> str:
    near = difflib.get_close_matches(name, list(known), n=1, cutoff=0.7)
    return f"did you mean {near[0]!r}? " if near else ""


def _type_name(hint) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def _is_config(hint) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint) and issubclass(hint, JsonConfig)


def check_value(value: Any, hint, where: str) -> Any:
    """`value` (from JSON) as the type `hint` says, or a one-line UserError naming `where`."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint is object:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return check_value(value, arg, where)
            except UserError as e:
                errors.append(str(e))
        raise UserError(f"{where} must be {' or '.join(_type_name(a) for a in args)}, got {value!r}")
    if _is_config(hint):
        if isinstance(value, hint):
            return value
        if not isinstance(value, dict):
            raise UserError(f"{where} must be a section (a JSON object), got {value!r}")
        return hint.from_dict(value, where)
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise UserError(f"{where} must be true or false, got {value!r}")
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise UserError(f"{where} must be a whole number, got {value!r}")
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise UserError(f"{where} must be a number, got {value!r}")
    if hint is str:
        if isinstance(value, str):
            return value
        raise UserError(f"{where} must be a string, got {value!r}")
    if hint in (list, dict) or origin in (list, tuple, dict):
        want = origin or hint
        if want is tuple and isinstance(value, list):
            value = tuple(value)
        if want is list and isinstance(value, tuple):
            value = list(value)
        if not isinstance(value, want):
            raise UserError(f"{where} must be a {want.__name__}, got {value!r}")
        if want is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise UserError(f"{where} must have {len(args)} values, got {len(value)}")
            return tuple(check_value(v, a, f"{where}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
        if want is list and args:
            return [check_value(v, args[0], f"{where}[{i}]") for i, v in enumerate(value)]
        return value
    return value


def parse_text(raw: str, hint, where: str) -> Any:
    """A command-line string as the type `hint` says (see the module docstring)."""
    text = raw.strip()
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if text.lower() in ("null", "none") and type(None) in args:
            return None
        for arg in (a for a in args if a is not type(None)):
            try:
                return parse_text(raw, arg, where)
            except UserError:
                continue
        raise UserError(f"{where} must be {' or '.join(_type_name(a) for a in args)}, got {raw!r}")
    if hint is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise UserError(f"{where} must be true or false (or 1/0, yes/no), got {raw!r}")
    if hint is int:
        try:
            return int(text)
        except ValueError:
            try:
                return check_value(float(text), int, where)
            except ValueError:
                raise UserError(f"{where} must be a whole number, got {raw!r}") from None
    if hint is float:
        try:
            return float(text)
        except ValueError:
            raise UserError(f"{where} must be a number, got {raw!r}") from None
    if hint is str:
        return raw
    if hint in (list, dict) or origin in (list, tuple, dict) or _is_config(hint):
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            if (origin or hint) in (list, tuple):  # "a,b,c"
                value = [_scalar(v) for v in text.split(",") if v.strip()]
            else:
                raise UserError(f"{where} must be JSON ({_type_name(hint)}), got {raw!r}") from None
        return check_value(value, hint, where)
    return check_value(json.loads(text), hint, where)


def _scalar(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text.strip()


class JsonConfig:
    """Mixin for dataclass configs: JSON round trip, typed values, readable errors on bad keys.

    A subclass may map old option names to new ones in `RENAMED = {"old": "new"}`: files and
    `--set` keys written with the old name keep working.
    """

    RENAMED: typing.ClassVar[dict[str, str]] = {}

    def to_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]

    @classmethod
    def hints(cls) -> dict[str, Any]:
        """Field name -> resolved type, in field order (cached per class)."""
        cache = cls.__dict__.get("_hints_cache")
        if cache is None:
            resolved = typing.get_type_hints(cls)
            cache = {f.name: resolved[f.name] for f in fields(cls)}  # type: ignore[arg-type]
            type.__setattr__(cls, "_hints_cache", cache)
        return cache

    @classmethod
    def _key(cls, key: str, where: str) -> str:
        key = cls.RENAMED.get(key, key)
        known = cls.hints()
        if key not in known:
            raise UserError(f"no option {key!r} in {cls.__name__}{f' ({where})' if where else ''} (unknown key); "
                            f"{_closest(key, known)}known: {', '.join(sorted(known))}")
        return key

    @classmethod
    def from_dict(cls: type[T], d: dict[str, Any], where: str = "") -> T:
        if not isinstance(d, dict):
            raise UserError(f"{where or cls.__name__}: expected a JSON object, got {type(d).__name__}")
        hints = cls.hints()
        values = {}
        for key, value in d.items():
            key = cls._key(key, where)
            values[key] = check_value(value, hints[key], f"{where}.{key}" if where else key)
        return cls(**values)

    def set_path(self, path: str, raw: str) -> None:
        """Set `model.encoder.d_model` from the command-line text `raw`, typed by the field
        (in place, before the recipe is frozen)."""
        self._set(path, raw, parse_text)

    def set_value(self, path: str, value: Any) -> None:
        """Set a dotted option to a Python value, checked against the field's type."""
        self._set(path, value, check_value)

    def _set(self, path: str, raw: Any, convert) -> None:
        parts = path.split(".")
        node: JsonConfig = self
        for i, part in enumerate(parts):
            where = ".".join(parts[:i])
            if not isinstance(node, JsonConfig):
                raise UserError(f"--set {path}: {where} is not a section of the config")
            key = type(node)._key(part, where)
            hint = type(node).hints()[key]
            if i == len(parts) - 2 and (typing.get_origin(hint) or hint) is dict:
                # one key of a free-form dict, e.g. data.dataset_options.fields=title: a JSON
                # value, or the text itself (only the loader knows the key's type)
                inner = raw if convert is check_value else _scalar(raw)
                object.__setattr__(node, key, {**(getattr(node, key) or {}), parts[-1]: inner})
                node.__post_init__() if hasattr(node, "__post_init__") else None
                return
            if i == len(parts) - 1:
                value = convert(raw, hint, ".".join(parts[:i] + [key]))
                object.__setattr__(node, key, value)
                node.__post_init__() if hasattr(node, "__post_init__") else None
            else:
                child = getattr(node, key)
                if child is None and _is_config(_optional_of(hint)):  # e.g. an unset sub-config
                    child = _optional_of(hint)()
                    object.__setattr__(node, key, child)
                node = child

    def freeze(self: T) -> T:
        """Make this config and every sub-config read-only; returns self."""
        for f in fields(self):  # type: ignore[arg-type]
            v = getattr(self, f.name)
            if isinstance(v, JsonConfig):
                v.freeze()
        object.__setattr__(self, "_frozen", True)
        return self

    @property
    def frozen(self) -> bool:
        return self.__dict__.get("_frozen", False)

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__dict__.get("_frozen"):
            raise AttributeError(f"{type(self).__name__} is frozen (a resolved recipe); "
                                 f"use .replace({name}=...) to make a changed copy")
        object.__setattr__(self, name, value)

    def replace(self: T, **changes: Any) -> T:
        new = dataclasses.replace(self, **changes)  # type: ignore[type-var]
        new.__dict__.pop("_frozen", None)
        return new

    def copy(self: T) -> T:
        """A deep, unfrozen copy."""
        return type(self).from_dict(self.to_dict())

    def save_json(self, path: str | os.PathLike) -> None:
        """Write atomically: a crash never leaves half a config behind."""
        from .fileio import atomic_write_text

        atomic_write_text(path, json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n")

    @classmethod
    def load_json(cls: type[T], path: str | os.PathLike) -> T:
        path = Path(path)
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UserError(f"config file {path} not found") from None
        except UnicodeDecodeError as e:
            raise UserError(f"{path}: not UTF-8 text (byte {e.start}); is it a config file?") from None
        except json.JSONDecodeError as e:
            raise UserError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
        try:
            return cls.from_dict(d)
        except UserError as e:
            raise UserError(f"{path}: {e}") from None
        except (TypeError, ValueError) as e:
            raise UserError(f"{path}: invalid value ({e})") from None


def _optional_of(hint):
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if len(args) == 1 else hint


def _plain(v: Any) -> Any:
    if isinstance(v, JsonConfig):
        return v.to_dict()
    if isinstance(v, (list, tuple)):
        return type(v)(_plain(x) for x in v)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


# ----------------------------------------------------------------------------- size knobs
# Range checks for the size-like knobs, where they enter (a config's `__post_init__`), and for
# the memory a model's sizes imply, before anything is allocated. A size knob is refused in one
# line when it is below what the code can work with (`check_count`: one hashed bucket divides by
# zero, a vocabulary of 0 indexes nothing) or when the memory it implies cannot exist on this
# machine (`check_table`: a hashed table of 99,999,999,999 rows asks the allocator for terabytes).
# `check_model_memory` weighs a whole model, built on the meta device (no memory), against the
# memory there is before the real one is built for training: every size knob of every recipe
# (vocabularies, buckets, d_model, d_ff, layers, position tables, classes) is covered by that one
# count, and the message names the largest tensor, which names its knob. Memory is
# `available_memory` (MemAvailable on Linux; no check where it is unknown).
BYTES_PER_WEIGHT = 4  # fp32 weights, as every model here is built
TRAIN_BYTES_PER_WEIGHT = 16  # weights, gradients and Adam's two moments, fp32


def available_memory() -> int | None:
    """Bytes of memory the machine can still give (MemAvailable), or None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _human(n: float) -> str:
    from .fileio import human_bytes

    return human_bytes(n) if n < 1 << 40 else f"{n / (1 << 40):,.1f} TiB"


def check_count(where: str, value: Any, least: int = 1, off: bool = False, hint: str = "") -> None:
    """`value` is a whole number >= `least` (or 0 when `off`: the feature is off); else one line."""
    ok = isinstance(value, int) and not isinstance(value, bool) and (value >= least or (off and value == 0))
    if not ok:
        rule = f"0 (off) or >= {least}" if off else f"a whole number >= {least}"
        raise UserError(f"{where} must be {rule}{hint}, got {value!r}")


def check_buckets(where: str, value: Any) -> None:
    """A hashed-bucket count: 0 (off) or >= 2 (bucket 0 is for specials and padding; one bucket
    would hash everything into it, and `n - 1` buckets would be none)."""
    check_count(where, value, least=2, off=True, hint=" (bucket 0 is for specials and padding)")


def check_table(where: str, rows: int, width: int, free: int | None = None) -> None:
    """A table of `rows` x `width` fp32 weights that `where` asks for must fit in the memory
    there is (weights alone; training needs about 4x): else one line with the sizes."""
    free = available_memory() if free is None else free
    need = rows * width * BYTES_PER_WEIGHT
    if free is not None and need > free:
        raise UserError(f"{where}={rows:,} asks for a table of {rows:,} x {width:,} weights, {_human(need)}, and "
                        f"{_human(free)} of memory is available; choose a smaller {where} (e.g. {1 << 20:,})")


def check_model_memory(build: Callable[[], Any], what: str = "the model", free: int | None = None,
                       per_weight: int | None = None) -> None:
    """`build()` on the meta device (no memory) and weigh it: `per_weight` bytes per weight must
    fit in the machine's memory; else one line naming the size and the largest tensor (whose name
    says which knob made it). By default 16 (training on the CPU: weights, gradients and Adam's two
    moments), or 4 where a GPU is present (the model is built here, then moved; its optimizer state
    lives on the GPU, sharded or not)."""
    import torch

    if per_weight is None:
        per_weight = BYTES_PER_WEIGHT if torch.cuda.is_available() else TRAIN_BYTES_PER_WEIGHT
    with torch.device("meta"):
        ghost = build()
    sizes = [(name, tuple(p.shape), p.numel()) for name, p in ghost.named_parameters()]
    total = sum(n for _, _, n in sizes)
    free = available_memory() if free is None else free
    need = total * per_weight
    if free is not None and need > free and sizes:
        name, shape, n = max(sizes, key=lambda s: s[2])
        raise UserError(f"{what} has {total:,} weights and needs about {_human(need)} of memory to "
                        f"{'train' if per_weight == TRAIN_BYTES_PER_WEIGHT else 'build'} "
                        f"({_human(free)} is available); its largest tensor is {name} "
                        f"({' x '.join(f'{d:,}' for d in shape)}): make the setting behind it smaller")


