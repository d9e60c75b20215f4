"""Fault injection at every file-system boundary: each byte write, fsync, rename, mkdir, unlink.

`Faults` wraps the functions every save goes through (`scratchformer.fileio.write_data` for the
bytes, and `os.fsync`, `os.replace`, `os.rename`, `os.mkdir`, `os.rmdir`, `os.unlink`, `os.open`)
and, while armed, counts the calls; at call number `fail_at` it raises `exc()`. With
`dead_after=True` every later call fails too: like a process killed at that instant, nothing
after it reaches the disk, not even the clean-up in `except`/`finally` blocks.
"""
from __future__ import annotations

import os
from typing import Callable

from scratchformer import fileio

OS_CALLS = ("fsync", "replace", "rename", "mkdir", "rmdir", "unlink", "open")


class Injected(RuntimeError):
    """The failure the tests inject (a crash that is not an OSError)."""


class Faults:
    def __init__(self, monkeypatch) -> None:
        self.armed = False
        self.count = 0
        self.ops: list[str] = []
        self.fail_at: int | None = None
        self.exc: Callable[[], BaseException] = lambda: Injected("injected crash")
        self.dead_after = False
        self.dead = False
        for name in OS_CALLS:
            # a real fsync only costs time here: no power is cut in these tests
            real = (lambda fd: None) if name == "fsync" else getattr(os, name)
            monkeypatch.setattr(os, name, self._wrap(name, real))
        monkeypatch.setattr(fileio, "write_data", self._wrap("write", fileio.write_data))

    def _wrap(self, name: str, real: Callable) -> Callable:
        def call(*args, **kw):
            if self.armed:
                if self.dead:
                    raise self.exc()
                self.count += 1
                target = getattr(args[0], "name", args[0]) if args else ""
                self.ops.append(f"{name} {os.path.basename(str(target))}")
                if self.count == self.fail_at:
                    self.dead = self.dead_after
                    raise self.exc()
            return real(*args, **kw)

        return call

    def reset(self, fail_at: int | None = None, exc=None, dead_after: bool = False) -> None:
        self.armed, self.count, self.ops, self.dead = False, 0, [], False
        self.fail_at, self.dead_after = fail_at, dead_after
        if exc is not None:
            self.exc = exc
