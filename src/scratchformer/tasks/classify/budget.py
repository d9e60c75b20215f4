"""A time budget for a whole `train classify` run, planned before training starts.

A few real training steps of a throwaway copy of the model, on real batches, give the time of
one step; a few validation batches give the time of an evaluation. The plan is then arithmetic:

    cost(steps) = steps · t_step + (⌊steps / eval_every⌋ + 1) · (valid batches · t_eval + t_save)
    left        = budget − time already spent − test batches · t_eval − overhead
    max_steps   = epochs · steps_per_epoch  if cost(that) ≤ slack · left,  else the largest steps
                  with cost(steps) ≤ slack · left

so the learning-rate schedule (warmup + cosine over `max_steps`) is planned for the steps that
fit, instead of being cut off midway. `train.max_minutes` = left is a hard stop for a machine
that slows down after the measurement (the shared 2-core machines drift by ±30%).
时间预算：先实测几步训练和评估的耗时，再把学习率计划排到预算内能跑完的步数。
"""
from __future__ import annotations

import contextlib
import io
import math
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Callable

import torch

from ...errors import UserError

SLACK = 0.9  # plan 90% of what is left: room for noise on a shared machine
OVERHEAD_S = 5.0  # curves, confusion plots, the last checkpoint
EVALS_PER_EPOCH = 2  # early stopping and the best checkpoint see each half epoch
MIN_EVALS = 4  # ... and at least this many points in a run cut short
MAX_MEMBERS = 5  # ensemble=0: at most this many members (the measured gain flattens by 5 seeds)
ENSEMBLE_EVAL_SHARE = 0.05  # of an ensemble's budget, kept for its own valid and test passes


@dataclass(frozen=True)
class StepTimes:
    """Seconds per optimizer step (forward, backward, AdamW on an average batch), per
    forward-only evaluation batch, and per checkpoint write."""

    train_step: float
    eval_batch: float
    save: float = 0.0


@dataclass(frozen=True)
class Plan:
    budget_s: float
    spent_s: float
    times: StepTimes
    steps_per_epoch: int
    wanted_steps: int  # epochs · steps_per_epoch
    max_steps: int
    eval_every: int
    planned_s: float  # cost(max_steps) + test
    max_minutes: float  # hard stop for training
    members_fit: int = 1  # whole runs like this one that fit in the budget (ensemble=0 trains that many)

    @property
    def cut(self) -> bool:
        return self.max_steps < self.wanted_steps

    def to_dict(self) -> dict:
        d = asdict(self)
        d["times"] = {k: round(v, 4) for k, v in d["times"].items()}
        for k in ("budget_s", "spent_s", "planned_s", "max_minutes"):
            d[k] = round(d[k], 2)
        return d

    def line(self) -> str:
        t = self.times
        fit = (f"only {self.max_steps} steps ({self.max_steps / self.steps_per_epoch:.1f} epochs) fit"
               if self.cut else f"all {self.wanted_steps} steps ({self.wanted_steps / self.steps_per_epoch:.0f} epochs) fit")
        hint = f" (room for {self.members_fit} such runs)" if self.members_fit > 1 else ""
        return (f"time budget {self.budget_s / 60:.1f} min ({self.spent_s:.0f} s spent): measured {t.train_step * 1000:.0f} ms/step, "
                f"{t.eval_batch * 1000:.0f} ms/eval batch; {fit}, planned {self.planned_s / 60:.1f} min{hint} -> "
                f"train.max_steps {self.max_steps}, eval every {self.eval_every} steps, hard stop {self.max_minutes:.1f} min")


def plan_budget(budget_s: float, spent_s: float, times: StepTimes, steps_per_epoch: int, epochs: int | None,
                valid_batches: int, test_batches: int, eval_every: int = 0, member_setup_s: float = 0.0) -> Plan:
    """The plan (see the module docstring). `eval_every` > 0 is kept; 0 means
    `EVALS_PER_EPOCH` per epoch (and at least `MIN_EVALS` in a run cut short).
    `members_fit`: how many whole runs (each `cost + test + member_setup_s`, the setup being its
    tokenizer, encoding and timing) fit in what is left after the ensemble's own evaluations."""
    spe = max(1, steps_per_epoch)
    left = budget_s - spent_s - test_batches * times.eval_batch - OVERHEAD_S
    usable = SLACK * left
    per_eval = valid_batches * times.eval_batch + times.save if valid_batches else times.save
    wanted = (epochs or 1_000_000) * spe

    def every(steps: int) -> int:
        return eval_every or max(1, min(math.ceil(spe / EVALS_PER_EPOCH), steps // MIN_EVALS))

    def cost(steps: int) -> float:
        return steps * times.train_step + (steps // every(steps) + 1) * per_eval

    if cost(wanted) <= usable:
        steps = wanted
    else:  # the largest steps that fit: cost is increasing in steps, so bisect
        lo, hi = 0, wanted
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if cost(mid) <= usable else (lo, mid - 1)
        steps = lo
    if steps < 1:
        need = (budget_s - usable + cost(1)) / 60
        raise UserError(f"a time budget of {budget_s / 60:g} min leaves no time to train ({spent_s:.0f} s already "
                        f"spent, {times.train_step:.2f} s per step); raise --time-budget (at least ~{need:.1f} min)")
    planned = cost(steps) + test_batches * times.eval_batch
    per_member = planned + member_setup_s
    members = (min(MAX_MEMBERS, int(usable * (1 - ENSEMBLE_EVAL_SHARE) // per_member))
               if steps == wanted and per_member > 0 else 1)
    return Plan(budget_s, spent_s, times, spe, wanted, steps, every(steps), planned, max(left, 1.0) / 60, max(members, 1))


# ----------------------------------------------------------------------------- measurement

StepTimer = Callable[..., StepTimes]  # (recipe, model, train_batches, valid_batches) -> StepTimes


def measure_step_times(recipe, model: torch.nn.Module, train_batches: list, valid_batches: list,
                       n_steps: int = 6) -> StepTimes:
    """Time real training steps of `model` — a throwaway copy: its weights are changed — on
    `n_steps` batches spread over the epoch (batches are length-bucketed, so a spread sample
    averages the lengths), then forward passes on validation batches and one checkpoint
    serialisation (medians). Each batch runs twice and only the second is timed: the first run of a new
    shape builds kernels and buffers (2-3x slower), which a whole run pays once per shape."""
    from ..runs import eval_mode
    from .task import ClassificationTask

    task = ClassificationTask(model, recipe, None, [])
    from ...train.adversarial import EmbeddingAdversary
    from ...train.device import resolve_precision
    from ...train.optim import adamw, param_groups
    from ...train.sparse_embeddings import SparseEmbeddings, densify_gradients

    tc = recipe.train  # the run's optimizer (fused where it can be), so its time is the run's
    opt, _ = adamw(param_groups(model, tc.weight_decay), tc.lr, tc.betas, tc.eps)

    precision, _ = resolve_precision(recipe.train.precision, torch.device("cpu"))  # what the run will use
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    autocast = (lambda: torch.autocast("cpu", dtype=dtype)) if dtype else contextlib.nullcontext

    # the trainer's step exactly: its sparse n-gram gradients and, with train.adversarial, its K more passes
    adversary = EmbeddingAdversary(model, tc.adversarial, tc.adversarial_steps) if tc.adversarial else None
    sparse = SparseEmbeddings(model)

    def backward(b) -> None:
        with autocast():
            loss, _ = task.loss_sum(b)
        (loss / len(b.labels)).backward()

    def step(b) -> float:
        t0 = time.perf_counter()
        with sparse.active():
            with adversary.record() if adversary else contextlib.nullcontext():
                backward(b)
            for _ in adversary.passes() if adversary else ():
                backward(b)
        densify_gradients(list(model.parameters()))
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    def forward(b) -> float:
        t0 = time.perf_counter()
        with autocast():
            task.logits(b)
        return time.perf_counter() - t0

    model.train()
    steps = [(step(b), step(b))[1] for b in _spread(train_batches, n_steps)]
    with eval_mode(model):
        evals = [(forward(b), forward(b))[1] for b in _spread(valid_batches or train_batches, 3)]
    t0 = time.perf_counter()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, io.BytesIO())
    save = time.perf_counter() - t0
    # medians: one step slowed by another process on a shared machine does not skew the plan
    return StepTimes(statistics.median(steps), statistics.median(evals), save)


def _spread(items: list, k: int) -> list:
    """k items evenly spaced over `items` (all of them when there are fewer)."""
    if len(items) <= k:
        return list(items)
    return [items[round(i * (len(items) - 1) / (k - 1))] if k > 1 else items[0] for i in range(k)]
