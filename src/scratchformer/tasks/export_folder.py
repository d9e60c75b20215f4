"""Every export (onnx for classify and lm runs, transformers and ctranslate2 for translation
runs) is whole or absent: it is written into a staging folder beside `--out` and renamed into
place in one step at the end, with its completion record (`export_complete.json`: the format,
the source run, every file with its size and sha256) written last inside it.

    with staged_export(out, "onnx", run_dir) as stage:   # `out` checked first: new or empty, no link
        ... write everything into `stage` ...
    # on a clean exit: export_complete.json, then stage -> out (one rename)

So a killed export leaves `.NAME.partial-XXXX` beside `--out` (never a folder called `--out`), the
rerun works (and removes the leftovers of dead exports), and `serve --backend onnxruntime |
ctranslate2` refuses a folder without the record (`require_complete`).

The writers below are not ours: `transformers` (safetensors) and CTranslate2 report a full disk
as their own exception types (`SafetensorError`, `RuntimeError`) carrying the OS message, so
`staged_export` also recognises a full disk by that message and gives the one line of
`fileio.disk_full` in every format.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Iterator

from ..errors import UserError
from ..fileio import (DiskFull, atomic_write_text, disk_full, folder_mode, is_disk_full, link_refused, make_dirs,
                      remove)

COMPLETE = "export_complete.json"
_PID = ".pid"
_FULL_WORDS = ("no space left on device", "disk quota exceeded", "storagefull", "enospc", "os error 28")


def check_out(out_dir: str | Path) -> Path:
    """`--out` before any work: not a link (we would write where it points), not a file, and a
    new or empty folder (an export never mixes its files with others)."""
    out = Path(out_dir)
    if out.is_symlink():
        raise link_refused(out)
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} is a file: give a new folder to --out")
    if out.is_dir() and any(out.iterdir()):
        raise UserError(f"{out} is not empty: give a new folder to --out")
    return out


def looks_like_disk_full(exc: BaseException) -> bool:
    """A full disk behind `exc`: an OSError ENOSPC/EDQUOT anywhere in its chain, or a writer's own
    exception type whose message is the OS's (safetensors, CTranslate2, protobuf)."""
    seen = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if is_disk_full(e) or isinstance(e, DiskFull):
            return True
        text = str(e).lower()
        if any(w in text for w in _FULL_WORDS):
            return True
        e = e.__cause__ or e.__context__
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_dead_stages(out: Path) -> None:
    """The staging folders of exports to `out` whose process is gone (killed): removed."""
    with contextlib.suppress(OSError):
        for p in out.parent.glob(f".{out.name}.partial-*"):
            try:
                pid = int((p / _PID).read_text())
            except (OSError, ValueError):
                pid = -1
            if pid <= 0 or not _alive(pid):
                remove(p)


def _files(folder: Path) -> dict[str, dict]:
    from ..data.fetch import sha256_file

    return {p.relative_to(folder).as_posix(): {"bytes": p.stat().st_size, "sha256": sha256_file(p)}
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name not in (_PID, COMPLETE)}


@contextlib.contextmanager
def staged_export(out_dir: str | Path, fmt: str, source_run: str | Path) -> Iterator[Path]:
    """A staging folder to write the export of `source_run` into; on a clean exit it gets its
    completion record and becomes `out_dir` in one rename. On any failure it is removed and
    `out_dir` is left as it was (absent, or the empty folder it was); a full disk is `DiskFull`."""
    out = check_out(out_dir)
    try:
        make_dirs(out.parent)
        _remove_dead_stages(out)
        stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    except OSError as e:
        if is_disk_full(e):
            raise disk_full(out, None) from None
        raise
    try:
        try:
            (stage / _PID).write_text(str(os.getpid()))
            yield stage
            (stage / _PID).unlink()
            record = {"format": fmt, "source_run": str(source_run), "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                      "files": _files(stage)}
            atomic_write_text(stage / COMPLETE, json.dumps(record, indent=1, ensure_ascii=False) + "\n")
            folder_mode(stage)
            check_out(out)  # still new or empty (another export may have finished first)
            if out.is_dir():
                os.rmdir(out)
            os.replace(stage, out)
        except (UserError, KeyboardInterrupt):
            raise
        except BaseException as e:
            if looks_like_disk_full(e):
                raise disk_full(out, None) from None
            raise
    finally:
        remove(stage)


def require_complete(folder: str | Path, backend: str) -> dict:
    """The completion record of an export folder, its files there with their sizes; else one line
    saying the export is unfinished and how to redo it."""
    folder = Path(folder)
    redo = (f"export it again (`scratchformer export RUN --format {backend_format(backend)} --out NEW_FOLDER`) "
            "and serve the new folder")
    try:
        record = json.loads((folder / COMPLETE).read_text(encoding="utf-8"))
        files = record["files"]
    except FileNotFoundError:
        raise UserError(f"{folder} has no {COMPLETE}: it is not a finished export (written by an older version, "
                        f"or cut short); {redo}") from None
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(f"{folder}/{COMPLETE} is damaged; {redo}") from None
    for name, info in files.items():
        p = folder / name
        try:
            size = p.stat().st_size
        except OSError:
            raise UserError(f"{folder} lacks {name}, which its {COMPLETE} lists; {redo}") from None
        if size != info.get("bytes"):
            raise UserError(f"{folder}/{name} has {size} bytes where the export wrote {info.get('bytes')}; {redo}")
    return record


def backend_format(backend: str) -> str:
    return {"onnxruntime": "onnx", "ctranslate2": "ctranslate2"}.get(backend, backend)


def parity_failed(what: str, out: Path) -> UserError:
    """The one line of a failed parity check: what differs, that nothing was written, --no-check."""
    return UserError(f"{what}; {out} not written (`scratchformer export ... --no-check` writes it anyway, "
                     "unchecked)")

