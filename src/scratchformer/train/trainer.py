"""The one task-agnostic Trainer (see docs/contracts.md for the Task protocol it drives).

One optimizer step:
  1. take ``accumulation`` micro-batches from ``train_batches(epoch)`` (fewer at an epoch end);
  2. ``total = sum(task.count(b))`` over them;
  3. for each: ``(task.loss_sum(b) / total).backward()`` under the precision's autocast, so the
     summed gradient is exactly the gradient of the mean loss over the whole step;
  4. stop with `TrainingDiverged` if the loss or the gradient norm is NaN/Inf (before the
     update, so the weights stay finite and no bad checkpoint is ever written);
  5. with ``adversarial`` > 0, the same micro-batches ``adversarial_steps`` more times with each
     input embedding moved along its gradient (train/adversarial.py), their mean gradient added;
  6. clip the global gradient norm, AdamW step, schedule step.

AdamW decays only parameters with 2 or more dimensions (weight matrices, embedding tables);
biases and normalisation gains/offsets (1-D) are not decayed.

Files in ``run_dir``:
  - ``train_config.json`` and whatever ``task.save`` writes (once, at the start of a fresh run);
  - ``train_status.json``: ``{"finished": false, "step": N}`` while training (written when a
    fit starts, N its first step), ``{"finished": true, "step", "stop_reason"}`` once it ended; what
    ``tasks.runs.require_finished`` reads to refuse a half-trained run;
  - ``metrics.jsonl``: one JSON line per log (split "train") and per evaluation (split "valid");
  - ``curves.png``: the curves of ``metrics.jsonl``, redrawn at each evaluation and at the end;
  - ``model.safetensors``: the best model by ``cfg.metric`` when there is a validation set,
    otherwise the latest; its metadata says where in the batch stream it was saved (``_position``);
  - ``checkpoint.json`` + ``checkpoints/step-N/``: one atomic checkpoint (train/checkpoint_store.py)
    with everything ``fit(resume=True)`` needs to continue exactly as if never interrupted
    (weights, optimizer, schedule, counters, position in the epoch, best metric, patience,
    RNG states of python/numpy/torch, GradScaler); a kill at any instant leaves one to resume.

Several processes (torchrun, train/distributed.py): each takes every N-th micro-batch; the stop
reason of each step, the evaluation numbers (best checkpoint, early stopping), NaN stops and the
elapsed time are rank 0's (``Distributed.agree``), so every process stops at the same step; only
rank 0 writes files. ``cfg.strategy`` 'fsdp' shards ``task.model`` in place (FSDP2); every file
gets the full weights gathered onto rank 0, and after ``fit`` the task holds a plain module again.

Exact resume relies on ``train_batches(epoch)`` yielding the same batches for the same epoch
each time (the contract). Evaluation runs on forked RNG streams, so evaluating (or not) never
changes the training trajectory. ``fit()`` holds an exclusive lock on ``run_dir``
(train/runfolder.py); a fresh ``fit()`` refuses a folder that holds another run unless
``overwrite=True``, which deletes only the files this project writes.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterable

import torch
from tqdm import tqdm

from scratchformer.errors import UserError
from scratchformer.train.adversarial import EmbeddingAdversary
from scratchformer.train.checkpoint_store import CheckpointStore
from scratchformer.train.checkpointing import CheckpointMixin
from scratchformer.train.config import TrainConfig
from scratchformer.train.device import resolve_device, resolve_precision
from scratchformer.train.distributed import Distributed
from scratchformer.train.evaluation import EvaluationMixin
from scratchformer.train.optim import adamw, param_groups
from scratchformer.train.rng import seed_everything, set_rng_state
from scratchformer.train.runfolder import (RUN_MARKERS, claimed, clear_project_files, holds_run, lock_run_folder,
                                           refuse_links)
from scratchformer.train.run_files import CONFIG
from scratchformer.train.schedules import make_lr_lambda
from scratchformer.train.sharding import ShardedModel
from scratchformer.train.sparse_embeddings import SparseEmbeddings, densify_gradients
from scratchformer.train.state import TrainingDiverged, TrainState
from scratchformer.train.weight_average import WeightAverage

__all__ = ["Trainer", "TrainingDiverged", "TrainState"]

_END = object()


class Trainer(EvaluationMixin, CheckpointMixin):
    """Train ``task.model`` on ``train_batches`` with the settings of ``cfg``.

    ``train_batches(epoch)`` returns an iterable of batches, the same for the same epoch;
    ``valid_batches()`` returns an iterable of validation batches (or pass None). Batches have
    ``.to(device)``. ``fit()`` runs until ``max_steps``/``epochs``/``max_minutes``/early stopping
    and returns a summary dict; ``fit(resume=True)`` continues from ``run_dir``'s checkpoint.
    Use one Trainer per ``fit`` call (to resume, build a new Trainer and call ``fit(resume=True)``).
    ``trainer.state`` (a `TrainState`) holds the counters; ``trainer.summary()`` the results.
    """

    def __init__(
        self,
        task: Any,
        train_batches: Callable[[int], Iterable],
        valid_batches: Callable[[], Iterable] | None = None,
        cfg: TrainConfig | None = None,
        run_dir: str | Path = "runs/train",
    ) -> None:
        self.cfg = cfg = cfg if cfg is not None else TrainConfig()
        cfg.validate()
        if cfg.max_steps is None and cfg.epochs is None and cfg.max_minutes is None:
            raise UserError("the run has no end: set max_steps, epochs or max_minutes in the train config")
        self.task = task
        self.train_batches = train_batches
        self.valid_batches = valid_batches
        self.run_dir = Path(run_dir)
        self.store = CheckpointStore(self.run_dir)
        self.device = resolve_device(cfg)
        self.dist = Distributed(self.device)
        self.model: torch.nn.Module = task.model
        self.model.to(self.device)
        self.dist.broadcast_parameters(self.model)
        if cfg.grad_checkpointing:
            if not callable(getattr(self.model, "set_gradient_checkpointing", None)):
                raise UserError(
                    f"grad_checkpointing is on but {type(self.model).__name__} has no "
                    "set_gradient_checkpointing(); turn it off for this model"
                )
            self.model.set_gradient_checkpointing(True)
        self.sharded = cfg.strategy == "fsdp" and self.dist.enabled  # one process: nothing to shard
        if cfg.ema and self.sharded:
            raise UserError("train.ema does not work with train.strategy=fsdp (the average would need the "
                            "whole model on each process); use strategy ddp or set ema=0")
        self._sharded = ShardedModel(self.model) if self.sharded else None  # train/sharding.py
        self._params = [p for p in self.model.parameters() if p.requires_grad]
        self._average = WeightAverage(self.model, cfg.ema) if cfg.ema else None
        if cfg.adversarial and self.sharded:
            raise UserError("train.adversarial does not work with train.strategy=fsdp (its second pass would "
                            "need the padding passes too); use strategy ddp or set adversarial=0")
        self._adversary = (EmbeddingAdversary(self.model, cfg.adversarial, cfg.adversarial_steps)
                           if cfg.adversarial else None)
        self._sparse = SparseEmbeddings(self.model)
        if self._sparse.tables and self.sharded:  # fully_shard keeps its gradients dense, shard by shard
            if self.dist.is_main:
                print(f"train: dense gradients for the {len(self._sparse.tables)} embedding table(s) marked "
                      "sparse_gradient: strategy fsdp shards dense gradients only", file=sys.stderr, flush=True)
            self._sparse.tables = []
        if not self._params:
            raise UserError("the model has no trainable parameters")
        groups = param_groups(self.model, cfg.weight_decay)
        for g in groups:  # per-parameter learning rates: `p.lr_scale` (see param_groups)
            g["lr"] = cfg.lr * g["lr_scale"]
        self.optimizer, why_not_fused = adamw(groups, cfg.lr, cfg.betas, cfg.eps, sharded=self.sharded)
        self._fused = why_not_fused is None
        if why_not_fused and self.dist.is_main:
            print(f"train: AdamW not fused: {why_not_fused}", file=sys.stderr, flush=True)
        self.precision, note = resolve_precision(cfg.precision, self.device)
        if note:
            print(f"train: {note}", file=sys.stderr, flush=True)
        self.scaler = torch.amp.GradScaler(self.device.type, enabled=self.precision == "fp16")
        self.total_steps = self._total_steps()
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, make_lr_lambda(cfg, self.total_steps)
        )
        self.state = TrainState()
        self._saved_step: int | None = None
        self._last_lr = cfg.lr
        self._last_train_loss: float | None = None
        self._last_tps: float | None = None
        self._win_tokens = 0
        self._win_t0 = time.monotonic()
        self._t0 = time.monotonic()
        self._elapsed0 = 0.0

    # ------------------------------------------------------------------ setup helpers
    def _unshard(self) -> None:
        """fsdp, after fit: ``task.model`` becomes a plain module again on every process, with the
        final weights (gathered from the shards); the sharded one is dropped."""
        full = self._sharded.full_state(cpu_offload=False)
        self.task.model = self.model = self._sharded.plain(full, self.device)

    def _after_step(self) -> None:
        """The task's optional `after_step` hook, on rank 0, with that step's weights in
        ``task.model``: under fsdp a plain copy on the CPU, gathered for it (a collective, every
        process joins: one gather of the whole model per step, the price of the hook)."""
        st = self.state
        if not self.sharded:
            if self.dist.is_main:
                self.task.after_step(st.step, self.total_steps)
            return
        full = self._full_state()
        if full is None:
            return
        self.task.model = self._sharded.plain(full, torch.device("cpu"))
        try:
            self.task.after_step(st.step, self.total_steps)
        finally:
            self.task.model = self.model

    @contextlib.contextmanager
    def _gathered(self):
        """fsdp: the whole model's weights gathered on every process for the block (evaluation:
        a task may read weights without calling forward, as translation's lean decoder does)."""
        with self._sharded.gathered() if self.sharded else contextlib.nullcontext():
            yield

    def _full_state(self) -> dict[str, torch.Tensor] | None:
        """The model's full weights on rank 0 (None on the others): under fsdp gathered from every
        process's shard onto its CPU (a collective: every process calls it)."""
        if not self.sharded:
            return self.model.state_dict() if self.dist.is_main else None
        full = self._sharded.full_state()
        return full if self.dist.is_main else None

    def _total_steps(self) -> int | None:
        """Optimizer steps of the whole run, if known (the decaying schedules need it)."""
        cfg = self.cfg
        needs_total = cfg.schedule in ("cosine", "linear")
        per_epoch = None
        if cfg.epochs is not None:
            batches = self.train_batches(0)
            try:
                n = len(batches)  # type: ignore[arg-type]
            except TypeError:
                n = sum(1 for _ in batches) if needs_total else None
            if n == 0:
                raise UserError("train_batches(0) yielded no batches; check the training data")
            if n is not None:
                per_epoch = math.ceil(n / cfg.accumulation)
        candidates = [c for c in (cfg.max_steps, per_epoch and cfg.epochs * per_epoch) if c]
        total = min(candidates) if candidates else None
        if needs_total and total is None:
            raise UserError(
                f"schedule '{cfg.schedule}' needs the length of the run: set max_steps or epochs "
                "(with only max_minutes, use schedule 'constant' or 'noam')"
            )
        return total

    def _averaged_weights(self):
        """Inside: ``self.model`` holds the weight average when ``cfg.ema`` is on (evaluation and
        the kept model), its own weights otherwise."""
        if self._average is None:
            return contextlib.nullcontext()
        return self._average.swapped_into(self.model)

    def _autocast(self):
        if self.precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    def _elapsed(self) -> float:
        return self._elapsed0 + time.monotonic() - self._t0

    # ------------------------------------------------------------------ the run
    def fit(self, resume: bool = False, overwrite: bool = False) -> dict[str, Any]:
        """Train until a stop condition; return the final and best metrics.

        With ``resume=True``, restore the checkpoint in ``run_dir`` and continue exactly where
        it stopped (the batches of the current epoch already consumed are skipped). A fresh
        run refuses a ``run_dir`` holding another run, unless ``overwrite=True`` (then only the
        files this project writes are deleted). ``run_dir`` is locked until ``fit`` returns.
        """
        if resume and not self.run_dir.is_dir():
            self.store.latest()  # raises: nothing to resume
        if not self.dist.is_main:  # rank 0 holds the lock and writes the files
            return self._fit(resume, overwrite)
        with lock_run_folder(self.run_dir, "train"):
            return self._fit(resume, overwrite)

    def _fit(self, resume: bool, overwrite: bool) -> dict[str, Any]:
        cfg = self.cfg
        if self.dist.is_main:  # the one writer of the run folder
            self.run_dir.mkdir(parents=True, exist_ok=True)
            refuse_links(self.run_dir)  # before the first step, not at the first save
        rng = None
        if resume:
            rng = self._load_checkpoint()
        else:
            self.state = TrainState()
            self._saved_step = None
            if self.dist.is_main:
                if not claimed(self.run_dir) and holds_run(self.run_dir):
                    if not overwrite:
                        found = [m for m in RUN_MARKERS if (self.run_dir / m).exists()]
                        raise UserError(
                            f"{self.run_dir} already holds a run ({', '.join(found)}); resume it "
                            "(resume=True / --resume), replace it (overwrite=True / --overwrite: only "
                            "the files this project writes are deleted) or use another folder")
                    clear_project_files(self.run_dir)
                cfg.save_json(self.run_dir / CONFIG)
                self.task.save(self.run_dir)
            seed_everything(cfg.seed + self.dist.rank)  # other dropout masks on each process
        st = self.state
        self._write_status(False)
        self._t0, self._elapsed0 = time.monotonic(), st.elapsed
        self._win_t0, self._win_tokens = time.monotonic(), 0
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)

        bar = tqdm(
            total=self.total_steps,
            initial=st.step,
            desc="train",
            unit="step",
            dynamic_ncols=True,
            disable=None if cfg.progress and self.dist.is_main else True,
        )
        try:
            with self._sparse.active():
                reason = self._loop(bar, rng)
            st.stop_reason = reason
            if self.valid_batches is not None and st.last_eval_step != st.step:
                self._evaluate(bar)
            self._log_train(bar)
            self._save()
            self._write_status(True)
        finally:
            bar.close()
        self._plot()
        self.dist.barrier()
        if self.sharded:
            self._unshard()
        return self.summary()

    def _loop(self, bar, rng: dict | None) -> str:
        cfg, st = self.cfg, self.state
        reason = self._stop_reason()
        while reason is None:
            batches = iter(self.train_batches(st.epoch))
            for _ in range(st.batch_in_epoch):  # resume: skip what was already consumed
                if next(batches, _END) is _END:
                    raise UserError(
                        f"train_batches({st.epoch}) yielded fewer than the {st.batch_in_epoch} "
                        "batches the checkpoint consumed; it must be deterministic in (seed, epoch)"
                    )
            if rng is not None:  # restored after skipping, as if the skip never happened
                set_rng_state(rng, self.device)
                rng = None
            world = self.dist.world
            while True:
                # with several processes each takes every world-th micro-batch of the group;
                # a remainder too small to give each one a batch ends the epoch
                micro = list(islice(batches, cfg.accumulation * world))
                if len(micro) < world:
                    break
                mine = micro[self.dist.rank :: world]
                # fsdp: every process must run as many forward/backward passes (each one gathers
                # the shards); one short of a micro-batch repeats its last one at weight 0
                pad = -(-len(micro) // world) - len(mine) if self.sharded else 0
                if pad:
                    self._train_step(mine, pad)
                else:
                    self._train_step(mine)
                st.step += 1
                st.batch_in_epoch += len(micro)
                if hasattr(self.task, "after_step"):  # optional (docs/contracts.md)
                    self._after_step()
                bar.update(1)
                if st.step % cfg.log_every == 0:
                    self._log_train(bar)
                evaluated = bool(cfg.eval_every) and st.step % cfg.eval_every == 0
                if evaluated:
                    evaluated = self._evaluate(bar)
                reason = self._stop_reason()
                if reason is not None:
                    return reason  # fit() writes the final checkpoint
                if (cfg.save_every and st.step % cfg.save_every == 0) or (
                    not cfg.save_every and evaluated
                ):
                    self._save()
            # the epoch is over
            if st.batch_in_epoch == 0:
                raise UserError(f"train_batches({st.epoch}) yielded no batches; check the training data")
            st.epoch += 1
            st.batch_in_epoch = 0
            if cfg.eval_every == 0:
                self._evaluate(bar)
            reason = self._stop_reason()
            if reason is None and not cfg.save_every:
                self._save()
        return reason

    def _stop_reason(self) -> str | None:
        """Why the run stops now (None: it goes on), decided on rank 0 for every process: its
        clock alone decides `max_minutes`, so all processes stop at the same step."""
        return self.dist.agree(self._stop_reason_here)

    def _stop_reason_here(self) -> str | None:
        cfg, st = self.cfg, self.state
        if cfg.max_steps is not None and st.step >= cfg.max_steps:
            return "max_steps"
        if cfg.epochs is not None and st.epoch >= cfg.epochs:
            return "epochs"
        if cfg.early_stopping_patience and st.bad_evals >= cfg.early_stopping_patience:
            return "early_stopping"
        if cfg.max_minutes is not None and self._elapsed() >= 60 * cfg.max_minutes:
            return "max_minutes"
        return None

    def _train_step(self, micro: list, pad: int = 0) -> None:
        """One optimizer step over the micro-batches ``micro`` (see the module docstring); `pad`
        more passes over the last one at weight 0 (fsdp: the same passes on every process)."""
        cfg, st, task = self.cfg, self.state, self.task
        step_no = st.step + 1
        total = int(self.dist.sum([float(sum(int(task.count(b)) for b in micro))], self.device)[0])
        if total <= 0:
            raise UserError(f"step {step_no}: task.count() is {total} for the whole step; batches must hold items")
        loss_total = torch.zeros((), device=self.device, dtype=torch.float64)
        extras: dict[str, float] = {}
        tokens = 0
        micro = [b.to(self.device) for b in micro]
        adversary = self._adversary
        with adversary.record() if adversary else contextlib.nullcontext():
            for i, b in enumerate(micro + micro[-1:] * pad):
                loss, extra = self._backward(b, total, padding=i >= len(micro))
                if loss is None:
                    continue
                loss_total += loss.detach().double()
                for k, v in (extra or {}).items():
                    extras[k] = extras.get(k, 0.0) + float(v)
                tokens += int(task.batch_tokens(b))
        if adversary:  # the same micro-batches K more times, each embedding moved along its gradient
            adversarial = 0.0
            for _ in adversary.passes():
                adversarial += sum(float(self._backward(b, total * adversary.steps)[0].detach()) for b in micro)
            extras["adversarial_loss"] = adversarial / adversary.steps
        densify_gradients(self._params)  # before the all-reduce, clipping and optimizer (sparse_embeddings.py)
        if self.dist.enabled:
            if not self.sharded:  # fsdp summed them shard by shard during backward
                self.dist.sum_gradients(self._params)
            keys = sorted(extras)
            sums = self.dist.sum([loss_total.item(), float(tokens)] + [extras[k] for k in keys], self.device)
            loss_total.fill_(sums[0])
            tokens = int(sums[1])
            extras = dict(zip(keys, sums[2:]))
        loss_value = loss_total.item()
        if not self.dist.agree(lambda: math.isfinite(loss_value)):  # a NaN stop: rank 0's call
            self.optimizer.zero_grad(set_to_none=True)
            raise self._diverged(step_no, f"the loss is {loss_value}")

        if self.scaler.is_enabled():
            self.scaler.unscale_(self.optimizer)
        if cfg.grad_clip:
            norm = torch.nn.utils.clip_grad_norm_(self._params, cfg.grad_clip)
        else:
            norm = torch.nn.utils.get_total_norm([p.grad for p in self._params if p.grad is not None])
        norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)  # fsdp: a DTensor
        if not self.scaler.is_enabled() and not self.dist.agree(lambda: math.isfinite(norm)):
            self.optimizer.zero_grad(set_to_none=True)
            raise self._diverged(step_no, f"the gradient norm is {norm}")

        group = self.optimizer.param_groups[0]  # logged: the base lr (lr_scale 1 groups come first)
        self._last_lr = group["lr"] / group.get("lr_scale", 1.0)
        if self.scaler.is_enabled():
            self.scaler.step(self.optimizer)  # skips the update if fp16 gradients overflowed
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        if self._average is not None:
            self._average.update(self.model)

        st.window_loss += loss_value
        st.window_count += total
        for k, v in extras.items():
            st.window_extras[k] = st.window_extras.get(k, 0.0) + v
        self._win_tokens += tokens

    def _backward(self, b, total: int, padding: bool = False):
        """One forward/backward of ``task.loss_sum(b) / total``; returns (loss sum, extras), or
        (None, {}) for a padding pass (fsdp: joins the collectives, adds nothing)."""
        with self._autocast():
            out = self.task.loss_sum(b)
        loss, extra = out if isinstance(out, tuple) else (out, {})
        scaled = loss / total
        if padding:
            (scaled * 0.0).backward()
            return None, {}
        (self.scaler.scale(scaled) if self.scaler.is_enabled() else scaled).backward()
        return loss, extra

    def _diverged(self, step: int, what: str) -> TrainingDiverged:
        if self._saved_step is not None:
            kept = f"the last good checkpoint (step {self._saved_step}) was kept in {self.run_dir}"
        else:
            kept = "no checkpoint had been written yet"
        return TrainingDiverged(
            f"training diverged at step {step}: {what}; likely causes: learning rate too high "
            "(lower lr or add warmup), fp16 overflow (use bf16 or fp32), or bad data "
            f"(NaN/Inf inputs or labels); nothing with NaN weights was saved, {kept}"
        )

