"""What the Trainer leaves in a run folder, by name, and the two small files it keeps there
besides checkpoints: `train_status.json` (how far the run got: the loaders refuse an unfinished
run) and `metrics.jsonl` (one JSON line per log or evaluation, cut back to a checkpoint on resume).
Every write goes through `fileio`'s atomic, no-follow helpers."""
from __future__ import annotations

import json
from pathlib import Path

from scratchformer.fileio import atomic_write_bytes, atomic_write_text

WEIGHTS = "model.safetensors"
LAST = "last.safetensors"  # the checkpoint of runs written before checkpoint_store (read on resume)
STATE = "trainer_state.pt"
STATUS = "train_status.json"
METRICS = "metrics.jsonl"
CURVES = "curves.png"
CONFIG = "train_config.json"


def read_train_status(run_dir: str | Path) -> dict | None:
    """What the Trainer recorded of how far `run_dir` trained; None when it recorded nothing
    (a run of a version without the file). A damaged file reads as unfinished."""
    path = Path(run_dir) / STATUS
    if not path.exists():
        return None
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {"finished": False}
    return d if isinstance(d, dict) else {"finished": False}


def write_train_status(run_dir: Path, step: int, finished: bool, stop_reason: str | None = None) -> None:
    status: dict = {"finished": finished, "step": step}
    if finished:
        status["stop_reason"] = stop_reason
    atomic_write_text(run_dir / STATUS, json.dumps(status) + "\n")


def truncate_metrics(run_dir: Path, step: int) -> None:
    """Drop log lines written after `step` (the checkpoint), which the resumed run will redo."""
    path = run_dir / METRICS
    if not path.exists():
        return
    keep = []
    for line in path.read_text().splitlines():
        try:
            if json.loads(line)["step"] <= step:
                keep.append(line + "\n")
        except (json.JSONDecodeError, KeyError, TypeError):
            continue
    atomic_write_bytes(path, "".join(keep).encode())
