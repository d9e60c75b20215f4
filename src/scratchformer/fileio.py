"""Atomic file writes: a reader (or a crash) sees the old file or the whole new one, never half.

Used for checkpoints, configs, tokenizers, metrics and the data cache alike. A full disk
(ENOSPC, or a quota: EDQUOT) while writing becomes `DiskFull`, a one-line `UserError` that
says how many bytes the write needed and how many were free; the temporary file is removed
and the destination is left as it was.

Every byte written and every rename goes through `write_data`, `os.fsync` and `os.replace`,
so a test can inject a failure at each boundary (tests/reliability).
"""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, BinaryIO, Callable

from scratchformer.errors import UserError

_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


class DiskFull(UserError):
    """No space left on the device while writing; the message says how much was needed."""


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in _FULL


def human_bytes(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def free_bytes(path: str | Path) -> int | None:
    """Free bytes on the file system of `path` (or of its nearest existing parent)."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def disk_full(what: str | Path, needed: int | None, where: str | Path | None = None,
              at_least: bool = False) -> DiskFull:
    """The one-line error for a write of `needed` bytes (`at_least`: or more) that found the
    disk full."""
    where = Path(where if where is not None else what)
    free = free_bytes(where)
    more = "more than " if at_least else ""
    need = f"it needs {more}{human_bytes(needed)}" if needed is not None else "it needs more space"
    have = f", {human_bytes(free)} free there" if free is not None else ""
    return DiskFull(f"no space left on the device writing {what}: {need}{have}; "
                    "free some space (or choose another folder) and run again")


def fsync_dir(directory: str | Path) -> None:
    """Make a rename durable; some file systems cannot fsync a directory, which is fine."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


_fsync_dir = fsync_dir  # the old private name


def write_data(f: BinaryIO, data: bytes) -> None:
    """The one place bytes reach a file (a fault-injection point for the tests)."""
    f.write(data)


def write_synced(path: str | Path, data: bytes) -> None:
    """Write `data` to a new file `path` and fsync it (no rename: for files inside a
    directory that is itself renamed into place, see train/checkpoint_store.py)."""
    try:
        with open(path, "xb") as f:
            write_data(f, data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        if is_disk_full(e):
            raise disk_full(path, len(data)) from None
        raise


def append_text(path: str | Path, text: str) -> None:
    """Append ``text`` to a log file (not atomic: a crash may cut the last line, which readers
    of the log skip); a full disk raises `DiskFull`."""
    data = text.encode("utf-8")
    try:
        with open(path, "ab") as f:
            write_data(f, data)
    except OSError as e:
        if is_disk_full(e):
            raise disk_full(path, len(data)) from None
        raise


class _Counting:
    """A file wrapper that counts the bytes written through it (for the DiskFull message)."""

    def __init__(self, f: BinaryIO) -> None:
        self._f, self.n = f, 0

    def write(self, data) -> int:
        write_data(self._f, data)
        self.n += len(data)
        return len(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def atomic_write(path: str | Path, write: Callable[[BinaryIO], Any], size: int | None = None) -> None:
    """Call ``write(f)`` on a temp file next to ``path``, fsync it, then rename it to ``path``.

    If anything fails (including ``write`` itself), the temp file is removed and ``path`` is
    left as it was. A full disk raises `DiskFull` (with ``size``, the bytes needed, when
    known; else at least the bytes written before the disk filled).
    """
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        if is_disk_full(e):
            raise disk_full(path, size) from None
        raise
    counted = None
    try:
        with os.fdopen(fd, "wb") as f:
            counted = _Counting(f)
            write(counted)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; these files are not secrets
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if is_disk_full(e):
            if size is None and counted is not None and counted.n:
                raise disk_full(path, counted.n, at_least=True) from None
            raise disk_full(path, size) from None
        raise
    fsync_dir(path.parent)


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    atomic_write(path, lambda f: f.write(data), size=len(data))


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))
