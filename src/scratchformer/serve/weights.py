"""Which weights a served name answers from, and whether the folder now holds other ones.

`identity(folder)` is what `/v1/models` reports per name: a sha256 digest over the files a
loader reads (weights, config, tokenizers, labels, the TF-IDF blend; an ensemble's members),
the training step of `train_status.json` and the time the weights were written. The digest is
taken before and after a load (`backends.load_backend`): when the two differ, the folder changed
while it was read (a `train --overwrite` writing into it) and the load is tried again, so a name
never serves a mix of two trainings.

`fingerprint(folder)` is the cheap check `--reload-on-change` polls: sizes and modification
times of the same files (no reading), which changes whenever a training writes a new model.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import os
from pathlib import Path

# the files of a run folder that define the model it serves (train/runfolder.py lists them all;
# checkpoints, curves, logs and reports are left out: they change without changing the model)
MODEL_FILES = frozenset({
    "config.json", "recipe.json", "labels.json", "members.json", "tokenizer.json", "src_tokenizer.json",
    "tgt_tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json", "model.safetensors",
    "baseline.json", "baseline.safetensors", "blend.json",
})
MODEL_DIRS = ("baseline",)  # plus member0, member1, ... (ensembles)
STATUS = "train_status.json"
_SKIP_IN_EXPORTS = frozenset({"README.md"})


def model_files(folder: Path) -> list[Path]:
    """The files that define the model in `folder`, sorted: a run folder's model files (and its
    members' and baseline's), or every file at the top of an export folder."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    if (folder / "export.json").is_file():
        return sorted(p for p in folder.iterdir() if p.name not in _SKIP_IN_EXPORTS and (p.is_file() or p.is_symlink()))
    out = [folder / n for n in MODEL_FILES if (folder / n).is_file() or (folder / n).is_symlink()]
    for sub in sorted(folder.iterdir()):
        if sub.is_dir() and not sub.is_symlink() and (sub.name in MODEL_DIRS or
                                                       (sub.name.startswith("member") and sub.name[6:].isdigit())):
            out += model_files(sub) + ([sub / STATUS] if (sub / STATUS).is_file() else [])
    return sorted(out)


def _digest(folder: Path, files: list[Path]) -> str:
    h = hashlib.sha256()
    for p in files:
        h.update(str(p.relative_to(folder)).encode("utf-8") + b"\0")
        if p.is_symlink():  # a link is recorded as where it points, never followed out of the folder
            h.update(b"link:" + os.readlink(p).encode("utf-8", "surrogateescape") + b"\0")
            continue
        with open(p, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        h.update(b"\0")
    return "sha256:" + h.hexdigest()


def _status_step(folder: Path) -> int | None:
    from ..tasks.runs import read_train_status  # serve reads run folders through tasks (house rule)

    for where in (folder, folder / "member0"):
        status = read_train_status(where)
        if status is not None and isinstance(status.get("step"), int):
            return status["step"]
    return None


def identity(folder: str | Path) -> dict | None:
    """{"digest", "step", "time"} of the model in `folder` (None: not a folder, e.g. `minilm`)."""
    folder = Path(folder)
    files = model_files(folder)
    if not files:
        return None
    newest = max(p.lstat().st_mtime for p in files)
    when = _dt.datetime.fromtimestamp(newest, _dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    return {"digest": _digest(folder, files), "step": _status_step(folder), "time": when}


def fingerprint(folder: str | Path) -> tuple:
    """Names, sizes and modification times of the model files and the finish record: changes
    whenever a training writes into `folder`; costs a few `stat` calls."""
    folder = Path(folder)
    files = model_files(folder) + ([folder / STATUS] if (folder / STATUS).exists() else [])
    out = []
    for p in files:
        try:
            st = p.lstat()
        except OSError:
            continue
        out.append((str(p), st.st_size, st.st_mtime_ns))
    return tuple(out)
