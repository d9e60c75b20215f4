"""Learning-rate schedules: pure functions ``step -> multiplier`` on the base learning rate.

Convention: ``step`` is the 1-based number of the optimizer step about to be taken (the first
update is step 1). With ``warmup`` steps of linear warmup, step ``s <= warmup`` gets
``s / warmup``, so the first update is not wasted on a zero learning rate and step ``warmup``
is the first at the full rate. ``make_lr_lambda`` adapts these to ``torch.optim.lr_scheduler
.LambdaLR``, whose counter is 0-based.
"""

from __future__ import annotations

import math
from typing import Callable

__all__ = [
    "warmup_cosine",
    "warmup_linear",
    "constant_with_warmup",
    "noam",
    "noam_peak",
    "make_lr_lambda",
]


def _warmup(step: int, warmup: int) -> float | None:
    """The warmup multiplier, or None once warmup is over."""
    if warmup > 0 and step <= warmup:
        return step / warmup
    return None


def _progress(step: int, warmup: int, total: int) -> float:
    """Fraction of the post-warmup phase done after ``step``: 0 at ``warmup``, 1 at ``total``."""
    if total <= warmup:
        return 1.0
    return min(1.0, max(0.0, (step - warmup) / (total - warmup)))


def warmup_cosine(step: int, warmup: int, total: int, min_ratio: float = 0.0) -> float:
    """Linear warmup to 1, then half a cosine down to ``min_ratio`` reached at ``step == total``."""
    w = _warmup(step, warmup)
    if w is not None:
        return w
    p = _progress(step, warmup, total)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * p))


def warmup_linear(step: int, warmup: int, total: int, min_ratio: float = 0.0) -> float:
    """Linear warmup to 1, then a straight line down to ``min_ratio`` at ``step == total``."""
    w = _warmup(step, warmup)
    if w is not None:
        return w
    return 1.0 - (1.0 - min_ratio) * _progress(step, warmup, total)


def constant_with_warmup(step: int, warmup: int) -> float:
    """Linear warmup to 1, then 1."""
    w = _warmup(step, warmup)
    return 1.0 if w is None else w


def noam(step: int, d_model: int | None, warmup: int) -> float:
    """The Transformer paper's schedule, normalised so that its peak (at ``step == warmup``) is 1.

    The paper uses ``d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)``. Dividing by the
    peak value ``d_model**-0.5 * warmup**-0.5`` gives ``min(step / warmup, (warmup / step)**0.5)``:
    linear warmup, then decay as ``step**-0.5``. ``d_model`` therefore cancels out; it is
    accepted so call sites read like the paper. To get the paper's absolute rates, multiply by
    ``noam_peak(d_model, warmup)`` (the Trainer does so when ``TrainConfig.noam_d_model`` is set).
    """
    if warmup < 1:
        raise ValueError("noam needs warmup >= 1")
    step = max(step, 1)
    return min(step / warmup, math.sqrt(warmup / step))


def noam_peak(d_model: int, warmup: int) -> float:
    """The paper's peak learning-rate factor ``d_model**-0.5 * warmup**-0.5``."""
    return d_model**-0.5 * warmup**-0.5


def make_lr_lambda(cfg, total_steps: int | None) -> Callable[[int], float]:
    """A ``LambdaLR`` function for ``cfg.schedule``.

    ``total_steps`` is the number of optimizer steps of the whole run; the decaying schedules
    ('cosine', 'linear') need it, 'constant' and 'noam' do not.
    """
    warmup, kind = cfg.warmup_steps, cfg.schedule
    if kind in ("cosine", "linear") and not total_steps:
        raise ValueError(f"schedule {kind!r} needs the total number of steps")
    if kind == "cosine":
        return lambda i: warmup_cosine(i + 1, warmup, total_steps, cfg.min_lr_ratio)
    if kind == "linear":
        return lambda i: warmup_linear(i + 1, warmup, total_steps, cfg.min_lr_ratio)
    if kind == "constant":
        return lambda i: constant_with_warmup(i + 1, warmup)
    if kind == "noam":
        scale = noam_peak(cfg.noam_d_model, warmup) if cfg.noam_d_model else 1.0
        return lambda i: scale * noam(i + 1, cfg.noam_d_model, warmup)
    raise ValueError(f"unknown schedule {kind!r}")
