"""The one thing `attention` and `doctor` ask of a task: its inspect slot.

Every task package that can be inspected has `tasks/<task>/inspect.py` with `load(run_dir)`,
which returns an `Inspector`. This package finds it by the run's task name (config.json "task"),
so a new task brings its own slot and nothing here changes. The records an inspector returns
(`AttentionResult`, `Subject`, ...) are defined in `tasks/inspection.py`, below both.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Protocol

from ..errors import UserError
from ..tasks.inspection import AttentionResult, Subject
from ..tasks.runs import RunDir


class Inspector(Protocol):
    task: str
    run_dir: Path  # the folder examined (an ensemble's first member, for instance)

    def attention(self, text: str) -> AttentionResult:
        """The attention views of one text through the run's model."""

    def subject(self, data: str | None, split: str, n: int) -> Subject:
        """What `doctor` examines: `n` samples of `split` (or of the file `data`)."""


def load(run_dir: str | Path) -> Inspector:
    """The inspector of the run in `run_dir`, from its task's inspect slot."""
    run_dir = Path(run_dir)
    task = RunDir(run_dir).task_name()
    try:
        slot = importlib.import_module(f"scratchformer.tasks.{task}.inspect")
    except ModuleNotFoundError as e:
        if e.name not in (f"scratchformer.tasks.{task}", f"scratchformer.tasks.{task}.inspect"):
            raise
        raise UserError(f"{run_dir} holds a {task!r} run, and that task has no inspect slot "
                        f"(tasks/{task}/inspect.py): attention and doctor cannot read it") from None
    return slot.load(run_dir)
