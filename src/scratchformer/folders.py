"""Whole-or-absent folders: a cache or an export is filled in a staging folder beside its place,
closed by one completion record (every file's size and sha256, and the caller's metadata), renamed
into place in one step, and verified against that record before each use.

Split from `fileio.py`, which keeps the single files (atomic writes, appends, deletes, never through
a link) and the staging folder (`staged_folder`); everything here writes through it.
"""
from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path
from typing import Any, Callable, Iterator
from scratchformer.errors import UserError

from .fileio import _OWNER, atomic_write_text, disk_full, inside, is_disk_full, make_dirs, remove, staged_folder


# ----------------------------------------------------------------------------- whole-or-absent folders
# A cache or an export is a folder that is whole or absent: filled in a staging folder beside its
# place, closed by a completion record (every file's size and sha256, and the caller's metadata)
# and renamed into place in one step (`whole_folder`); verified against that record before each
# use (`check_whole`), and rebuilt, or named for deletion, when it does not match (`whole`,
# `not_whole`). The caller names its record file; the format is one:
#
#     {"record_version": 2, <the caller's metadata>..., "written": "2026-12-05T06:00:00Z",
#      "files": {"model.safetensors": {"bytes": 1234, "sha256": "..."}, "sub/x.bin": {...}}}
#
# Older records are still read (`read_record`): version 1 is a JSON object without
# `record_version` (metadata and `files` side by side, as above: prepared data's, the decoded e5
# folder's, exports'); version 0 is a bare sha256 line (the BERT cache's), which lists no files
# and so is never taken as whole.
#
# A digest that is recorded is checked, at a cost small next to the work it feeds: a file is
# hashed again only when its identity (size, mtime_ns, ctime_ns, inode) differs from the one it
# had at its last check that passed, kept in a sidecar `<record>.verified` (written atomically; a
# read-only folder keeps it in this process only). A file rewritten at the same size gets a new
# ctime even when its mtime is put back with os.utime, and the kernel alone sets ctime.

RECORD_VERSION = 2
_RESERVED = ("record_version", "files", "written")
_checked: dict[tuple[str, str], tuple] = {}  # (folder, record) -> identity at the last check that passed, this process


class Record:
    """A completion record as read: its format `version` (2 now; 1 and 0 the older ones), the
    caller's `meta`, and `files` (path -> {"bytes", "sha256"}; None when it lists none)."""

    def __init__(self, version: int, meta: dict, files: dict | None) -> None:
        self.version, self.meta, self.files = version, meta, files


class RecordDamaged(ValueError):
    """A completion record that is neither the current format nor an older one."""


def file_sha256(path: str | Path) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks (the one hashing of files: caches, downloads)."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_record(folder: str | Path, name: str, meta: dict, files: dict[str, dict] | None = None,
                 skip: tuple[str, ...] = ()) -> dict:
    """Write the completion record `name` into `folder` (atomically): `meta`, and every file's
    size and sha256 (`files` gives those already known, e.g. hashed while written; the rest are
    hashed now). Returns the record."""
    import json
    import time

    folder = Path(folder)
    clash = [k for k in meta if k in _RESERVED]
    if clash:
        raise ValueError(f"completion record metadata may not use the names {clash}")
    known = dict(files or {})
    ours = {name, _OWNER, _memo_path(folder, name).name, *skip}  # the record, fileio's own files at the top
    listed = {p.relative_to(folder).as_posix() for p in folder.rglob("*")
              if p.is_file() and not p.is_symlink() and p.relative_to(folder).as_posix() not in ours}
    missing = sorted(set(known) - listed)
    if missing:
        raise ValueError(f"completion record of {folder} lists {missing[0]}, which is not there")
    for rel in sorted(listed - set(known)):
        p = folder / rel
        known[rel] = {"bytes": p.stat().st_size, "sha256": file_sha256(p)}
    record = {"record_version": RECORD_VERSION, **meta,
              "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "files": {k: known[k] for k in sorted(known)}}
    atomic_write_text(folder / name, json.dumps(record, indent=1, ensure_ascii=False, sort_keys=False) + "\n")
    return record


def read_record(folder: str | Path, name: str) -> Record | None:
    """The completion record `name` of `folder` (None: there is none); `RecordDamaged` when it
    is unreadable. Reads this format (2) and the older ones (1: JSON; 0: a bare sha256 line)."""
    import json
    import re

    try:
        text = (Path(folder) / name).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise RecordDamaged(str(e)) from None
    if re.fullmatch(r"[0-9a-f]{64}\s*", text):
        return Record(0, {"sha256": text.strip()}, None)
    try:
        data = json.loads(text)
    except ValueError:
        raise RecordDamaged("not JSON") from None
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict) or not all(
            isinstance(v, dict) and isinstance(v.get("bytes"), int) and isinstance(v.get("sha256"), str)
            for v in data["files"].values()):
        raise RecordDamaged("no list of files")
    if any(Path(rel).is_absolute() or ".." in Path(rel).parts for rel in data["files"]):
        raise RecordDamaged("a file outside its folder")  # never hashed: a record names files below it
    version = data.get("record_version", 1)
    meta = {k: v for k, v in data.items() if k not in _RESERVED}
    return Record(version if isinstance(version, int) else -1, meta, data["files"])


def _identity(folder: Path, files) -> tuple:
    """(path, size, mtime_ns, ctime_ns, inode) of each file: what changes when a file does."""
    out = []
    for rel in sorted(files):
        st = os.stat(folder / rel, follow_symlinks=False)
        out.append((rel, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
    return tuple(out)


def _memo_path(folder: Path, name: str) -> Path:
    return folder / f"{name}.verified"


def _memo_read(folder: Path, name: str) -> tuple | None:
    import json

    try:
        data = json.loads(_memo_path(folder, name).read_text(encoding="utf-8"))
        return tuple(tuple(x) for x in data["identity"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _memo_write(folder: Path, name: str, ident: tuple) -> None:
    import json

    with contextlib.suppress(OSError, UserError):  # a read-only cache: remembered in this process only
        atomic_write_text(_memo_path(folder, name), json.dumps({"identity": [list(x) for x in ident]}) + "\n")


def check_whole(folder: str | Path, name: str, want: dict | None = None, verb: str = "write",
                memo: bool = True) -> str | None:
    """None when `folder` is whole: its record `name` holds `want` (each key with that value) and
    every file it lists has the recorded size and sha256 (hashed again only when a file's identity
    changed since the last check that passed, see above; `memo=False`: no sidecar is written into
    the folder). Else what is wrong, in a few words ("absent" when there is no folder)."""
    folder = Path(folder)
    if not folder.is_dir():
        return "absent"
    try:
        record = read_record(folder, name)
    except RecordDamaged:
        return f"its {name} is damaged"
    if record is None:
        return f"it has no {name} (a {verb} that was cut short)"
    if record.files is None:
        return f"its {name} is an older record without file digests"
    if record.version not in (1, RECORD_VERSION) or any(record.meta.get(k) != v for k, v in (want or {}).items()):
        return "it was written by another version"
    try:
        ident = _identity(folder, record.files)
    except OSError:
        gone = [n for n in sorted(record.files) if not (folder / n).is_file()]
        return f"{gone[0] if gone else 'a file'} is missing"
    key = (str(folder.absolute()), name)
    if _checked.get(key) == ident or (memo and _memo_read(folder, name) == ident):
        _checked[key] = ident
        return None
    for rel, info in sorted(record.files.items()):
        size = (folder / rel).stat().st_size
        if size != info["bytes"]:
            return f"{rel} has {size} bytes where the {verb} wrote {info['bytes']}"
        if file_sha256(folder / rel) != info["sha256"]:
            return f"{rel} does not have the sha256 the {verb} recorded"
    _checked[key] = ident
    if memo:
        _memo_write(folder, name, ident)
    return None


def not_whole(folder: str | Path, why: str, how: str = "run again") -> UserError:
    """The one line for a folder that is not whole and cannot be repaired here: what is wrong
    and exactly what to delete."""
    return UserError(f"{folder} is not whole ({why}); delete the folder {folder} and {how}")


class Staging:
    """A staging folder being filled (`path`), with the caller's metadata for the record (`meta`)
    and the digests of files already hashed while written (`files`: path -> {"bytes", "sha256"})."""

    def __init__(self, path: Path, meta: dict) -> None:
        self.path, self.meta, self.files = path, meta, {}


@contextlib.contextmanager
def whole_folder(target: str | Path, name: str, meta: dict | None = None, replace: bool = False,
                 owned: bool = False, into_empty: bool = False, memo: bool = True) -> Iterator[Staging]:
    """Fill ``stage.path`` (a folder beside `target`); on a clean exit the completion record
    `name` is written into it (``stage.meta`` and every file's size and sha256) and it becomes
    `target` in one rename (`staged_folder`, which says what `replace`, `owned` and `into_empty`
    do; by default another process's finished `target` is kept). On a failure nothing appears.
    `memo`: the check sidecar is written at once (the first use need not hash again); False for
    folders that hold only what their record lists (exports)."""
    with staged_folder(target, replace=replace, owned=owned, into_empty=into_empty) as tmp:
        stage = Staging(tmp, dict(meta or {}))
        yield stage
        ours = write_record(tmp, name, stage.meta, stage.files)["files"]
    target = Path(target)
    if not memo:
        return
    with contextlib.suppress(OSError, RecordDamaged):  # just hashed: the first use need not hash it again
        theirs = read_record(target, name)
        if theirs is not None and theirs.files == ours:  # ours, not another process's kept in its place
            ident = _identity(target, ours)
            _checked[(str(target.absolute()), name)] = ident
            _memo_write(target, name, ident)


def whole(target: str | Path, name: str, fill: Callable[[Staging], Any], want: dict | None = None,
          what: str = "cache folder", verb: str = "write", log: Callable[[str], Any] | None = None,
          rebuild: bool = False) -> bool:
    """`target` verified against its record (`check_whole`), else built again by `fill(stage)`
    inside `whole_folder` (`want` is put into the record); a folder that is there but not whole
    is said in one line to `log` before. Returns whether it was built now. A folder that cannot be
    written (read-only, full disk) is one line naming what to delete."""
    why = "rebuild asked" if rebuild else check_whole(target, name, want, verb)
    if why is None:
        return False
    if why not in ("absent", "rebuild asked") and log is not None:
        log(f"the {what} {target} is not whole ({why}): building it again")
    try:
        with whole_folder(target, name, want, replace=why != "absent") as stage:
            fill(stage)
    except OSError as e:
        if is_disk_full(e):
            raise disk_full(target, None) from None
        if e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise UserError(f"cannot write the {what} {target}: {e.strerror}; "
                            + (f"delete {target} by hand, or " if Path(target).exists() else "")
                            + "set SCRATCHFORMER_CACHE to a writable folder, and run again") from None
        raise
    return True
