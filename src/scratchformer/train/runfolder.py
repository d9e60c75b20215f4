"""Run folders are protected: one command at a time, and never a file lost that we did not write.

- **Lock** (`lock_run_folder`): an exclusive ``fcntl.flock`` on ``RUN/.lock`` for the whole
  command. A second command on the same folder stops at once with a one-line error naming the
  holder's pid (written into the lock file). The kernel releases a flock when its process
  dies, so a lock left by a killed process never blocks. The lock is re-entrant within one
  process (the CLI takes it, then `Trainer.fit` takes it again).
- **Claim** (`claim_run_folder`, for the `train` verbs): a fresh run goes only into a missing
  or empty folder, unless ``resume`` (continue the run there) or ``overwrite``; overwriting
  deletes only the files this project writes (`PROJECT_FILES`, `PROJECT_PATTERNS`,
  `PROJECT_DIRS`) and keeps everything else.
- `Trainer.fit(resume=False)` refuses a folder that already holds a run (`holds_run`) unless
  the command claimed the folder in this process or ``overwrite=True`` is passed.
"""
from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import re
import stat
from pathlib import Path
from typing import Iterator

from scratchformer import fileio
from scratchformer.errors import UserError

try:
    import fcntl
except ImportError:  # not on Windows: no lock there, the other protections still hold
    fcntl = None  # type: ignore[assignment]

LOCK = ".lock"

# Every file a training, evaluation or inference command may write at the top of a run folder.
PROJECT_FILES = frozenset({
    "config.json", "recipe.json", "train_config.json", "labels.json", "members.json",
    "tokenizer.json", "src_tokenizer.json", "tgt_tokenizer.json", "vocab.txt",
    "tokenizer_config.json", "special_tokens_map.json",
    "model.safetensors", "averaged.safetensors", "final.json",
    "checkpoint.json", "last.safetensors", "trainer_state.pt",
    "metrics.jsonl", "curves.png", "valid_metrics.json", "pretrain_summary.json",
    "attention.png", "attention.html", "align.png", "doctor.md", "doctor.json",
})
PROJECT_PATTERNS = ("*_metrics.json", "confusion_*.png", "*_hyps.txt", ".*.tmp", "attention_*.png", "doctor_*.png")
# folders we create: name pattern -> what inside is ours ("run": a run folder of its own)
# (a tuple: any of these patterns)
PROJECT_DIRS = {"checkpoints": "*", "snapshots": "step-*.safetensors", "member[0-9]*": "run",
                "baseline": ("baseline.json", "baseline.safetensors", "blend.json", ".*.tmp")}
# what means "a run was trained here" (the Trainer refuses to start a fresh one on top)
RUN_MARKERS = ("config.json", "train_config.json", "model.safetensors", "metrics.jsonl",
               "checkpoint.json", "checkpoints", "trainer_state.pt", "last.safetensors")

_held: dict[str, list] = {}  # real path -> [file descriptor, depth, pid of the holder]
_claimed: set[str] = set()  # folders a command claimed for a fresh run in this process


def _key(path: Path) -> str:
    return os.path.realpath(path)


def _holder(lock_file: Path) -> str:
    try:
        text = lock_file.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        text = ""
    m = re.match(r"(\d+)", text)
    return f"pid {m.group(1)}" if m else "another process"


@contextlib.contextmanager
def lock_run_folder(path: str | Path, what: str = "command") -> Iterator[Path]:
    """Hold an exclusive lock on the run folder `path` (created if missing) while inside."""
    path = Path(path)
    key = _key(path)
    if key in _held and _held[key][2] != os.getpid():  # inherited by a fork: not ours
        del _held[key]
    if key in _held:  # already ours: nested use in the same process
        _held[key][1] += 1
        try:
            yield path
        finally:
            _held[key][1] -= 1
        return
    try:
        if fileio.root_of(path) is not None:  # a member of an ensemble: itself no link
            fileio.make_dirs(path)
        else:  # the run folder itself may be a link: the user chose where it lives
            path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UserError(f"{path} exists and is not a folder; choose another --out") from None
    if fcntl is None:
        with fileio.confined_to(path):
            yield path
        return
    lock_file = path / LOCK
    fd = _open_lock(lock_file)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UserError(f"{path} is in use by another scratchformer command ({_holder(lock_file)}); "
                        "wait for it to finish, or use another folder") from None
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {what}\n".encode())
    except OSError:
        pass  # the lock holds without the note (e.g. a full disk)
    _held[key] = [fd, 1, os.getpid()]
    try:
        with fileio.confined_to(path):
            yield path
    finally:
        del _held[key]
        _claimed.discard(key)
        os.close(fd)  # releases the flock; the file stays (removing it would race a waiter)


def _open_lock(lock_file: Path) -> int:
    """The lock file, opened without following a link: its note is written in place (truncated
    first), which through a link (or a second hard link) would change a file elsewhere."""
    try:
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as e:
        if lock_file.is_symlink():
            raise fileio.link_refused(lock_file) from None
        if e.errno == errno.EISDIR:
            raise UserError(f"{lock_file} is a folder; scratchformer keeps its lock note there: "
                            "move it away and run again") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        os.close(fd)
        raise (fileio.link_refused(lock_file, hard=True) if stat.S_ISREG(st.st_mode) else
               UserError(f"{lock_file} is not a regular file; move it away and run again"))
    return fd


# ---------------------------------------------------------------------------- contents
def _ours(name: str, is_dir: bool) -> str | tuple[str, ...] | None:
    """What of entry `name` is ours: "file", a pattern (or tuple of patterns) of files inside,
    "run", or None."""
    if is_dir:
        return next((inner for pat, inner in PROJECT_DIRS.items() if fnmatch.fnmatchcase(name, pat)), None)
    if name in PROJECT_FILES or any(fnmatch.fnmatchcase(name, p) for p in PROJECT_PATTERNS):
        return "file"
    return None


def project_files(path: str | Path) -> list[Path]:
    """The files and folders in `path` that this project wrote (a folder after its contents).
    A link under one of our names is listed as itself, never followed."""
    path = Path(path)
    out: list[Path] = []
    if not path.is_dir():
        return out
    for entry in sorted(path.iterdir()):
        if entry.is_symlink():
            if _ours(entry.name, False) is not None or _ours(entry.name, True) is not None:
                out.append(entry)
            continue
        ours = _ours(entry.name, entry.is_dir())
        if ours is None:
            continue
        if ours == "file" or ours == "*":  # a file, or a folder that is all ours
            out.append(entry)
        elif ours == "run":
            out += project_files(entry) + [entry]
        else:
            patterns = ours if isinstance(ours, tuple) else (ours,)
            out += [p for p in sorted(entry.iterdir())
                    if any(fnmatch.fnmatchcase(p.name, pat) for pat in patterns)] + [entry]
    return out


def clear_project_files(path: str | Path) -> list[Path]:
    """Delete what `project_files` lists (folders only when empty afterwards); keep the rest.
    A link under one of our names (`checkpoints/` to another folder, a `member0` that is another
    run) is refused before anything is deleted: deleting through it would reach outside."""
    path = Path(path)
    found = project_files(path)
    refuse_links(path, found)
    removed = []
    for p in found:
        if p.is_dir() and _ours(p.name, True) != "*":
            if not fileio.remove_empty_dir(p, root=path):
                continue  # not empty: it holds something of the user's
        else:
            fileio.remove(p, root=path)
        removed.append(p)
    return removed


def refuse_links(path: str | Path, found: list[Path] | None = None) -> None:
    """Refuse (`fileio.LinkRefused`, one line naming it) a run folder where one of the names we
    write is a link: checked before a `train` verb changes anything there."""
    link = next((p for p in (project_files(path) if found is None else found) if p.is_symlink()), None)
    if link is not None:
        raise fileio.link_refused(link)


def holds_run(path: str | Path) -> bool:
    path = Path(path)
    return any((path / m).exists() for m in RUN_MARKERS)


def _contents(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir() if p.name != LOCK) if path.is_dir() else []


def _resumable(path: Path) -> bool:
    """A checkpoint here or in an ensemble member, or an ensemble's list of finished members."""
    from scratchformer.train.checkpoint_store import has_checkpoint

    members = [p for p in path.glob("member[0-9]*") if p.is_dir()]
    return has_checkpoint(path) or (path / "members.json").exists() or any(map(has_checkpoint, members))


def claim_run_folder(path: str | Path, resume: bool, overwrite: bool) -> None:
    """Check (and with `overwrite`, clear) the `--out` folder of a `train` verb; call it
    while holding `lock_run_folder(path)`. One-line UserErrors say what to do instead."""
    path = Path(path)
    if resume and overwrite:
        raise UserError("--resume continues the run in --out and --overwrite replaces it; give one of them")
    if resume:
        if not path.exists():
            raise UserError(f"--resume: {path} does not exist; give the --out of an earlier run, "
                            "or drop --resume to start a new one")
        if not _resumable(path):
            raise UserError(f"--resume: {path} holds no run to resume (no checkpoint); give the --out "
                            "of an earlier run, or start a new one without --resume (--overwrite to "
                            "replace what is there)")
        refuse_links(path)
        return
    if path.exists() and not path.is_dir():
        raise UserError(f"--out {path} is a file, not a folder; choose another --out")
    found = _contents(path)
    if found and not overwrite:
        what = "a run" if holds_run(path) else f"{len(found)} entries"
        shown = ", ".join(found[:4]) + (", ..." if len(found) > 4 else "")
        raise UserError(f"--out {path} is not empty: it holds {what} ({shown}); pass --resume to "
                        "continue that run, --overwrite to replace the run's files (other files are "
                        "kept), or choose a new folder")
    if overwrite:
        clear_project_files(path)
    _claimed.add(_key(path))


@contextlib.contextmanager
def run_folder(path: str | Path, resume: bool = False, overwrite: bool = False,
               what: str = "train") -> Iterator[Path]:
    """Lock `path` and claim it for a run (what a `train` verb does around its whole work):
    ``with run_folder(out, overwrite=True): train_classifier(recipe, out)`` replaces an
    earlier run there (only our files) instead of refusing it."""
    if resume:  # a missing folder: say so before the lock creates it
        claim_run_folder(path, resume, overwrite)
    with lock_run_folder(path, what):
        claim_run_folder(path, resume, overwrite)
        yield Path(path)


def claimed(path: str | Path) -> bool:
    """Whether a command in this process claimed `path` for a fresh run (`claim_run_folder`)."""
    return _key(Path(path)) in _claimed
