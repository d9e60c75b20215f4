"""Every export (onnx for classify and lm runs, transformers and ctranslate2 for translation
runs) is whole or absent: it is written into a staging folder beside `--out` and renamed into
place in one step at the end, with its completion record (`export_complete.json`, in
`folders.write_record`'s format: the format, the source run, every file with its size and sha256)
written last inside it; serving checks every file against it (`require_complete`).

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
import time
from pathlib import Path
from typing import Iterator

from ..errors import UserError
from ..fileio import DiskFull, disk_full, is_disk_full, link_refused
from ..folders import RecordDamaged, check_whole, read_record, whole_folder

COMPLETE = "export_complete.json"
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


@contextlib.contextmanager
def staged_export(out_dir: str | Path, fmt: str, source_run: str | Path) -> Iterator[Path]:
    """A staging folder to write the export of `source_run` into (`folders.whole_folder`: owned,
    so a rerun removes the stages of killed exports); on a clean exit it gets its completion
    record and becomes `out_dir` in one rename. On any failure it is removed and `out_dir` is left
    as it was (absent, or the empty folder it was); a full disk is `DiskFull`."""
    out = check_out(out_dir)
    try:
        with whole_folder(out, COMPLETE, {"format": fmt, "source_run": str(source_run)}, owned=True,
                          into_empty=True, memo=False) as stage:
            yield stage.path
            stage.meta["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
            check_out(out)  # still new or empty (another export may have finished first)
    except (UserError, KeyboardInterrupt):
        raise
    except BaseException as e:
        if looks_like_disk_full(e):
            raise disk_full(out, None) from None
        raise


def require_complete(folder: str | Path, backend: str) -> dict:
    """The completion record of an export folder (its metadata and files) when every file it
    lists has the recorded size and sha256 (`folders.check_whole`, hashed on every open: an export
    folder gets no sidecar, serving watches its files); else one line saying what is wrong and
    how to redo the export."""
    folder = Path(folder)
    redo = (f"export it again (`scratchformer export RUN --format {backend_format(backend)} --out NEW_FOLDER`) "
            "and serve the new folder")
    try:
        record = read_record(folder, COMPLETE)
    except RecordDamaged:
        raise UserError(f"{folder}/{COMPLETE} is damaged; {redo}") from None
    if record is None:
        raise UserError(f"{folder} has no {COMPLETE}: it is not a finished export (written by an older version, "
                        f"or cut short); {redo}")
    why = check_whole(folder, COMPLETE, verb="export", memo=False)
    if why is not None:
        raise UserError(f"{folder} is not the folder the export wrote: {why}; delete it, {redo}")
    return {**record.meta, "files": record.files}


def backend_format(backend: str) -> str:
    return {"onnxruntime": "onnx", "ctranslate2": "ctranslate2"}.get(backend, backend)


def parity_failed(what: str, out: Path) -> UserError:
    """The one line of a failed parity check: what differs, that nothing was written, --no-check."""
    return UserError(f"{what}; {out} not written (`scratchformer export ... --no-check` writes it anyway, "
                     "unchecked)")

