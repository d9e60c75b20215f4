"""The one thing `attention` and `doctor` ask of a task: its inspect slot.

Every task that can be inspected fills the `inspect` slot of its face (tasks/faces.py):
`inspect(run_dir)` returns an `Inspector`. This package finds it through `task_of(run_dir)`,
so a new task brings its own slot and nothing here changes. The records an inspector returns
(`AttentionResult`, `Subject`, ...) are defined in `tasks/inspection.py`, below both.
"""
from __future__ import annotations

from pathlib import Path
from typing import Protocol

from ..errors import UserError
from ..tasks.faces import task_of
from ..tasks.inspection import AttentionResult, Subject


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
    face = task_of(run_dir)
    if not face.inspect:
        raise UserError(f"{run_dir} holds a {face.name!r} run, and that task has no inspect slot: "
                        "attention and doctor cannot read it")
    return face.inspect(run_dir)
