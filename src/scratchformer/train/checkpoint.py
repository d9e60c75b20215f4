"""Checkpoints: atomic file writes, model weights in safetensors, trainer state via torch.save.

Every write goes to a temporary file in the destination's directory, is fsync'ed, then
``os.replace``'d over the destination, so a crash leaves either the old file or the new one,
never half of one.

Weights (``save_weights``/``load_weights``) use safetensors, which refuses tensors that share
memory. Tied weights (e.g. an LM head sharing the embedding matrix) appear twice in a
``state_dict`` as the same tensor: we store each tensor once and record the other names as
aliases in the file's metadata. Loading fills the aliases back in and copies into the model's
existing parameters, so ties the model makes in its constructor are kept.

Trainer state (``save_state``/``load_state``) must hold only tensors and plain Python values
(dict, list, tuple, str, int, float, bool, None) so that it loads with
``torch.load(weights_only=True)``, which cannot run code from the file.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Callable

import torch
from safetensors import safe_open
from safetensors.torch import save as safetensors_bytes

from scratchformer.config import available_memory  # lives beside the other size checks; this name stays
from scratchformer.errors import UserError
from scratchformer.fileio import atomic_write, atomic_write_bytes

ALIASES_KEY = "scratchformer.aliases"

__all__ = [
    "atomic_write",
    "atomic_write_bytes",
    "save_weights",
    "load_weights",
    "read_weights_metadata",
    "save_state",
    "load_state",
    "state_to_bytes",
    "weights_to_bytes",
]


# ---------------------------------------------------------------------------- weights
def _few(items: list[str], n: int = 5) -> str:
    shown = ", ".join(items[:n])
    return shown + (f" (+{len(items) - n} more)" if len(items) > n else "")


def weights_to_bytes(model: torch.nn.Module | None, metadata: dict[str, str] | None = None,
                     state_dict: dict[str, torch.Tensor] | None = None) -> bytes:
    """Serialise ``model.state_dict()`` (or ``state_dict``, e.g. the full weights gathered from
    sharded processes) to safetensors bytes, storing tied tensors once."""
    unique: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}
    seen: dict[tuple, str] = {}
    for name, t in (model.state_dict() if state_dict is None else state_dict).items():
        t = t.detach()
        key = None
        if t.numel() > 0:
            key = (
                t.device,
                t.untyped_storage().data_ptr(),
                t.storage_offset(),
                tuple(t.shape),
                t.stride(),
                t.dtype,
            )
        if key is not None and key in seen:
            aliases[name] = seen[key]
            continue
        if key is not None:
            seen[key] = name
        # A copy of our own: no storage shared with anything else, contiguous, on the CPU.
        unique[name] = t.to("cpu", copy=True).contiguous()
    meta = {"format": "pt", ALIASES_KEY: json.dumps(aliases, sort_keys=True)}
    meta.update(metadata or {})
    return safetensors_bytes(unique, metadata=meta)


def save_weights(
    model: torch.nn.Module, path: str | Path, metadata: dict[str, str] | None = None
) -> None:
    """Atomically write the model's ``state_dict`` to a safetensors file (ties kept as aliases).

    ``metadata`` (str -> str) is stored in the file's header; read it back with
    ``read_weights_metadata``.
    """
    atomic_write_bytes(path, weights_to_bytes(model, metadata))


def _open_checked(path: Path):
    if not path.is_file():
        raise UserError(f"checkpoint {path} not found; check the path or train a model first")
    try:
        return safe_open(str(path), framework="pt", device="cpu")
    except Exception as e:  # noqa: BLE001 - any parse failure means an unusable file
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(f"checkpoint {path} is not a readable safetensors file ({msg})") from None


def read_weights_metadata(path: str | Path) -> dict[str, str]:
    """The string metadata stored in a safetensors file's header."""
    with _open_checked(Path(path)) as f:
        return dict(f.metadata() or {})


def load_weights(
    model: torch.nn.Module, path: str | Path, strict: bool = True
) -> tuple[list[str], list[str]]:
    """Load a ``save_weights`` file into ``model``; returns ``(missing, unexpected)`` keys.

    Raises UserError, in one line, when the file does not fit: missing and unexpected keys
    (only when ``strict``) and shape mismatches (always).
    """
    path = Path(path)
    with _open_checked(path) as f:
        meta = dict(f.metadata() or {})
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    try:
        aliases = json.loads(meta.get(ALIASES_KEY, "{}"))
    except json.JSONDecodeError:
        raise UserError(f"checkpoint {path} has corrupt alias metadata") from None
    for name, target in aliases.items():
        if target in tensors:
            tensors[name] = tensors[target]

    expected = model.state_dict()
    missing, unexpected = _fit_problems(path, {k: tuple(v.shape) for k, v in expected.items()},
                                        {k: tuple(v.shape) for k, v in tensors.items()}, strict)
    usable = {k: v for k, v in tensors.items() if k in expected}
    model.load_state_dict(usable, strict=False)
    return missing, unexpected


def _fit_problems(path: Path, expected: dict[str, tuple], found: dict[str, tuple], strict: bool,
                  config: str | Path | None = None) -> tuple[list[str], list[str]]:
    """Missing and unexpected keys; raises the one-line UserError when the file does not fit."""
    missing = [k for k in expected if k not in found]
    unexpected = [k for k in found if k not in expected]
    mismatched = [f"{k} is {found[k]} in the checkpoint but {v} in the model"
                  for k, v in expected.items() if k in found and found[k] != v]
    problems = []
    if strict and missing:
        problems.append(f"missing keys: {_few(missing)}")
    if strict and unexpected:
        problems.append(f"unexpected keys: {_few(unexpected)}")
    if mismatched:
        problems.append(f"shape mismatch: {_few(mismatched, 3)}")
    if problems:
        if config is not None:
            raise UserError(f"{config} does not match {path}: {'; '.join(problems)} (a changed or damaged "
                            "config.json? restore it, or retrain)")
        raise UserError(
            f"checkpoint {path} does not fit this model: {'; '.join(problems)} "
            "(was it trained with a different model config?)"
        )
    return missing, unexpected


def weights_shapes(path: str | Path) -> dict[str, tuple]:
    """Every tensor's shape in a safetensors file (aliases included), from its header alone."""
    path = Path(path)
    with _open_checked(path) as f:
        meta = dict(f.metadata() or {})
        shapes = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    try:
        aliases = json.loads(meta.get(ALIASES_KEY, "{}"))
    except json.JSONDecodeError:
        raise UserError(f"checkpoint {path} has corrupt alias metadata") from None
    for name, target in aliases.items():
        if target in shapes:
            shapes[name] = shapes[target]
    return shapes


def build_checked(build: Callable[[], torch.nn.Module], path: str | Path, config: str | Path,
                  strict: bool = True) -> torch.nn.Module:
    """``build()`` the model that ``config`` describes and load ``path`` into it, but only after
    its shapes were checked against the weights file's header on the meta device (no memory),
    and its size against the memory there is: a config.json with absurd sizes (d_model 100000,
    a vocabulary of 1e9) is a one-line error instead of a death in the allocator."""
    path = Path(path)
    found = weights_shapes(path)  # a missing or unreadable file says so first
    with torch.device("meta"):
        ghost = build()
    expected = {k: tuple(v.shape) for k, v in ghost.state_dict().items()}
    _fit_problems(path, expected, found, strict, config)
    need = sum(v.numel() * v.element_size() for v in ghost.state_dict().values())
    free = available_memory()
    if free is not None and need > free:
        from scratchformer.fileio import human_bytes

        raise UserError(f"{config}: the model needs {human_bytes(need)} of memory for its weights alone, "
                        f"{human_bytes(free)} is available; use a machine with more memory")
    model = build()
    load_weights(model, path, strict)
    return model


# ---------------------------------------------------------------------------- trainer state
def state_to_bytes(state: dict[str, Any]) -> bytes:
    """``torch.save`` a dict of tensors and plain values into bytes."""
    buf = io.BytesIO()
    torch.save(state, buf)
    return buf.getvalue()


def save_state(state: dict[str, Any], path: str | Path) -> None:
    """Atomically ``torch.save`` a dict of tensors and plain values."""
    atomic_write_bytes(path, state_to_bytes(state))


def load_state(path: str | Path) -> dict[str, Any]:
    """``torch.load(weights_only=True)`` a ``save_state`` file (onto the CPU)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"trainer state {path} not found; nothing to resume, start without resume")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(f"trainer state {path} cannot be loaded ({msg})") from None
