"""Why a fast path was not taken, as a value of the call that decided it.

`MultiHeadAttention.forward` decides, per call, whether the fused kernel runs (`fused_path_blocker`)
and whether a sliding window runs blocked (`window_path_blocker`); both return the reason as a
string (None = the fast path ran), as PyTorch's `transformer.py` does. A model is shared: a server
calls one model from several worker threads at once, so the reason is never stored on the module.
The caller who wants it asks for the reasons of its own calls:

    with path_reasons() as why:       # this thread's (and this context's) calls only
        model(x)
    why.fused   # [(module, reason or None), ...] one per attention call, in order
    why.window  # the same for the window decision (windowed self-attention only)

Two threads each get their own record (a `ContextVar`: each thread runs in its own context).
`MultiHeadAttention.last_path_reason` / `last_window_reason` are kept, deprecated and read-only:
the reason of that module's last call *in the reading thread*.
# 快速路径为何未被采用：作为本次调用的返回值，而不是存在共享模块上的状态
"""
from __future__ import annotations

import contextlib
import threading
import weakref
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Iterator

import torch
from torch import nn

KINDS = ("fused", "window")


@dataclass
class PathReasons:
    """The decisions of the attention calls made inside one `path_reasons()` block."""

    fused: list[tuple[nn.Module, str | None]] = field(default_factory=list)
    window: list[tuple[nn.Module, str | None]] = field(default_factory=list)

    def of(self, module: nn.Module, kind: str = "fused") -> list[str | None]:
        """The reasons of `module`'s own calls, in order."""
        return [r for m, r in getattr(self, kind) if m is module]


_open: ContextVar[PathReasons | None] = ContextVar("scratchformer_path_reasons", default=None)
_last = threading.local()  # per thread: module -> {kind: reason}, for the deprecated spellings


@contextlib.contextmanager
def path_reasons() -> Iterator[PathReasons]:
    """Collect the fast-path decisions of the attention calls made inside, in this thread."""
    record = PathReasons()
    token = _open.set(record)
    try:
        yield record
    finally:
        _open.reset(token)


def decided(module: nn.Module, kind: str, reason: str | None) -> str | None:
    """Called by the module that decided: hands `reason` to the caller's open record (if any)
    and to the reading thread's last-reason table; returns `reason`. Under torch.compile nothing
    is recorded (Dynamo traces no ContextVar; the compiled graph decided once, at tracing)."""
    if torch.compiler.is_compiling():
        return reason
    record = _open.get()
    if record is not None:
        getattr(record, kind).append((module, reason))
    table = getattr(_last, "table", None)
    if table is None:
        table = _last.table = weakref.WeakKeyDictionary()
    table.setdefault(module, {})[kind] = reason
    return reason


def last_reason(module: nn.Module, kind: str) -> str | None:
    """The reason of `module`'s last `kind` decision made in this thread (None if none yet)."""
    table = getattr(_last, "table", None)
    return None if table is None else table.get(module, {}).get(kind)
