"""A training checkpoint is one atomic unit: a directory, made complete, then named by a pointer.

Layout in a run directory::

    checkpoint.json                  the pointer: {"format": 2, "dir": "checkpoints/step-00000040",
                                     "step": 40, "files": {name: size in bytes}}
    checkpoints/step-00000040/
        weights.safetensors          the model (safetensors, tied tensors stored once)
        state.pt                     optimizer, schedule, counters, RNG states (weights_only)

Saving step N (`CheckpointStore.save`):
  1. write both files into a fresh ``checkpoints/.tmp-step-N-<pid>/``, fsync each file and the
     directory;
  2. rename that directory to ``checkpoints/step-N`` (or ``step-N-1`` when ``step-N`` is the
     checkpoint in use: re-saving the same step never touches the one the pointer names),
     fsync ``checkpoints/``;
  3. replace ``checkpoint.json`` atomically (temp file, fsync, ``os.replace``, fsync the run
     directory). **This rename is the commit point.**
  4. remove everything else under ``checkpoints/`` (the previous checkpoint, leftovers of a
     save that was killed).

Every step works by name inside ``checkpoints/``, opened from the run directory without following
a link (`scratchformer.fileio.open_folder`): a ``checkpoints/`` that links to another folder is
refused with one line, so pruning can never delete that folder's files.

Before the commit point the pointer still names the previous complete checkpoint, which no
step touches; after it, the new one. So a kill -9, a power cut or a full disk at any instant
leaves a run that resumes: from the previous checkpoint or from the new one. Step 4 can fail
harmlessly (its leftovers are removed by the next save). Resuming checks that the files the
pointer names exist with the recorded sizes.

A full disk raises `DiskFull` (one line: the bytes the checkpoint needed, the bytes free), after
removing the partial directory; the previous checkpoint stays.

Runs written before this format (``last.safetensors`` + ``trainer_state.pt`` in the run
directory, renamed one after the other) still resume; their first new save removes them.
"""
from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from scratchformer.errors import UserError
from scratchformer import fileio
from scratchformer.fileio import DiskFull, atomic_write_bytes, disk_full, is_disk_full

POINTER = "checkpoint.json"
ROOT = "checkpoints"
WEIGHTS_FILE, STATE_FILE = "weights.safetensors", "state.pt"
LEGACY_WEIGHTS, LEGACY_STATE = "last.safetensors", "trainer_state.pt"  # before format 2
FORMAT = 2


@dataclass(frozen=True)
class Checkpoint:
    """One complete checkpoint: the weights file, the trainer-state file and its step."""

    weights: Path
    state: Path
    step: int | None  # None for a legacy checkpoint (its step is in its files)
    legacy: bool = False


class CheckpointStore:
    """The checkpoints of one run directory (see the module docstring)."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self.root = self.run_dir / ROOT
        self.pointer = self.run_dir / POINTER

    # ------------------------------------------------------------------ reading
    def _read_pointer(self) -> dict | None:
        if not self.pointer.exists():
            return None
        try:
            ptr = json.loads(self.pointer.read_text(encoding="utf-8"))
            if not isinstance(ptr, dict) or not isinstance(ptr.get("dir"), str):
                raise ValueError("no 'dir'")
        except (ValueError, UnicodeDecodeError) as e:
            raise UserError(f"{self.pointer} is corrupt ({e}); the run cannot be resumed, "
                            "start it again with --overwrite") from None
        if Path(ptr["dir"]).is_absolute() or ".." in Path(ptr["dir"]).parts:
            raise UserError(f"{self.pointer} names {ptr['dir']!r}, outside the run directory")
        return ptr

    def exists(self) -> bool:
        """Whether there is a checkpoint to resume from (new or legacy format)."""
        return self.pointer.exists() or (self.run_dir / LEGACY_STATE).exists()

    def latest(self) -> Checkpoint:
        """The checkpoint to resume from; a one-line UserError when there is none or it is
        incomplete."""
        ptr = self._read_pointer()
        if ptr is None:
            w, s = self.run_dir / LEGACY_WEIGHTS, self.run_dir / LEGACY_STATE
            if s.exists():
                return Checkpoint(w, s, None, legacy=True)
            if not self.run_dir.is_dir():
                raise UserError(f"{self.run_dir} does not exist: nothing to resume, start without resume")
            raise UserError(f"{self.run_dir} holds no checkpoint ({POINTER} is missing): nothing to "
                            "resume (did the run stop before its first save?); start it again without "
                            "resume, with --overwrite (overwrite=True)")
        d = self.run_dir / ptr["dir"]
        ck = Checkpoint(d / WEIGHTS_FILE, d / STATE_FILE, ptr.get("step"))
        for name, size in (ptr.get("files") or {}).items():
            f = d / name
            if not f.is_file() or f.stat().st_size != size:
                found = f"{f.stat().st_size} bytes" if f.is_file() else "missing"
                raise UserError(f"checkpoint file {f} is {found}, {POINTER} recorded {size} bytes: "
                                "the checkpoint was changed after it was written; restore it or "
                                "start again with --overwrite")
        return ck

    # ------------------------------------------------------------------ writing
    def save(self, step: int, weights: bytes, state: bytes) -> Checkpoint:
        """Write one checkpoint as a unit (steps 1-4 of the module docstring)."""
        ptr = self._read_pointer() if self.pointer.exists() else None
        in_use = Path(ptr["dir"]).name if ptr else None
        name = f"step-{step:08d}"
        if name == in_use:
            name += "-1"
        final = self.root / name
        tmp = f".tmp-{name}-{os.getpid()}"
        files = {WEIGHTS_FILE: weights, STATE_FILE: state}
        try:
            # every step by name in `checkpoints/`, opened from the run directory without following
            # a link: `checkpoints/` linked to another folder would have that folder's files pruned
            with fileio.open_folder(self.root, root=self.run_dir) as ck:
                try:
                    ck.remove(tmp)
                    ck.mkdir(tmp)
                    with ck.sub(tmp) as t:
                        for fname, data in files.items():
                            t.write_synced(fname, data)
                        t.fsync()
                    ck.remove(name)  # a leftover of a killed save; never the checkpoint in use
                    ck.replace(tmp, name)
                    ck.fsync()
                except BaseException:
                    with contextlib.suppress(OSError):
                        ck.remove(tmp)
                    raise
            pointer = {"format": FORMAT, "dir": f"{ROOT}/{name}", "step": step,
                       "files": {k: len(v) for k, v in files.items()}}
            atomic_write_bytes(self.pointer, (json.dumps(pointer, indent=1) + "\n").encode(), root=self.run_dir)
        except BaseException as e:
            if is_disk_full(e) or isinstance(e, DiskFull):
                raise disk_full(f"the checkpoint of step {step} in {self.root}",
                                sum(map(len, files.values())), self.run_dir) from None
            raise
        self._prune(keep=name)
        return Checkpoint(final / WEIGHTS_FILE, final / STATE_FILE, step)

    def _prune(self, keep: str) -> None:
        """Remove older checkpoints and leftovers; a failure here loses nothing."""
        with contextlib.suppress(OSError), fileio.open_folder(self.root, root=self.run_dir, create=False) as ck:
            for n in ck.names():
                if n != keep:
                    ck.remove(n)
        for legacy in (LEGACY_WEIGHTS, LEGACY_STATE):  # superseded by the pointer
            with contextlib.suppress(OSError):
                self._remove(self.run_dir / legacy)

    def clear(self) -> None:
        """Remove every checkpoint (a fresh run replaces the old one)."""
        for p in (self.pointer, self.root, self.run_dir / LEGACY_WEIGHTS, self.run_dir / LEGACY_STATE):
            self._remove(p)

    def _remove(self, p: Path) -> None:
        """Remove a file or real folder of this run directory; a link is refused, never followed."""
        fileio.remove(p, root=self.run_dir)


def has_checkpoint(run_dir: str | Path) -> bool:
    """Whether `run_dir` holds a checkpoint to resume from (e.g. an interrupted ensemble member)."""
    return CheckpointStore(run_dir).exists()
