"""A run's counters (`TrainState`, saved in each checkpoint) and the error a NaN stop raises."""
from __future__ import annotations

from dataclasses import dataclass, field

from scratchformer.errors import UserError


class TrainingDiverged(UserError):
    """The loss or the gradients became NaN/Inf. Raised before the bad update is applied."""


@dataclass
class TrainState:
    """Counters of a run; saved in ``trainer_state.pt`` and restored on resume."""

    step: int = 0  # optimizer steps done
    epoch: int = 0  # the epoch in progress (0-based); at an epoch boundary, epochs done
    batch_in_epoch: int = 0  # micro-batches of `epoch` already consumed
    best_metric: float | None = None
    best_step: int | None = None
    bad_evals: int = 0  # evaluations since the last improvement (early stopping)
    elapsed: float = 0.0  # seconds, summed over resumed runs (for max_minutes)
    last_eval: dict[str, float] = field(default_factory=dict)
    last_eval_step: int | None = None
    stop_reason: str | None = None
    # the training-loss window not logged yet (kept so logs are continuous across a resume)
    window_loss: float = 0.0
    window_count: int = 0
    window_extras: dict[str, float] = field(default_factory=dict)
