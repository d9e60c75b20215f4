"""The Trainer's checkpoints: one atomic save of everything a resume needs, and the restore.

A mixin of `Trainer` (train/trainer.py), kept apart so the loop reads on its own; it uses the
Trainer's `cfg`, `state`, `model`, `optimizer`, `scheduler`, `scaler`, `dist`, `device`, `store`
and `run_dir`. What a checkpoint holds and why a kill at any instant leaves one to resume: see
the module docstring of train/trainer.py and train/checkpoint_store.py.
"""
from __future__ import annotations

import dataclasses

import torch

from scratchformer.errors import UserError
from scratchformer.train.checkpoint import (
    atomic_write_bytes,
    load_state,
    load_weights,
    read_weights_metadata,
    state_to_bytes,
    weights_to_bytes,
)
from scratchformer.train.optim import keep_fused
from scratchformer.train.rng import get_rng_state, rng_from_tensors, rng_tensors, seed_everything
from scratchformer.train.run_files import WEIGHTS, truncate_metrics
from scratchformer.train.sharding import optimizer_state_by_name, optimizer_state_by_number
from scratchformer.train.state import TrainState


class CheckpointMixin:
    def _position(self) -> dict[str, str]:
        """Where in the batch stream the weights are: after `step` optimizer steps, every batch of
        the epochs before `epoch` and the first `batch_in_epoch` of it (`doctor` counts the tokens
        those batches held, so it judges a saved model by what it has seen)."""
        st = self.state
        return {"step": str(st.step), "epoch": str(st.epoch), "batch_in_epoch": str(st.batch_in_epoch)}

    def _weights_bytes(self, metadata: dict[str, str] | None = None) -> bytes:
        """The weights as safetensors bytes (b"" on the processes other than rank 0 under fsdp)."""
        full = self._full_state()
        if full is None:
            return b""
        # the parameters only: a buffer may hold -inf on purpose (an additive causal mask, a learner's own)
        buffers = {n for n, _ in self.model.named_buffers()}
        finite = torch.stack([torch.isfinite(t.detach()).all() for n, t in full.items()
                              if t.is_floating_point() and n not in buffers] or [torch.tensor(True)])
        if not bool(finite.all()):
            raise self._diverged(self.state.step, "the weights contain NaN/Inf")
        return weights_to_bytes(None, metadata, state_dict=full)

    def _save(self) -> None:
        """Write one atomic checkpoint (and the latest model if there is no validation set)."""
        st = self.state
        st.elapsed = self.dist.agree(self._elapsed)  # rank 0's clock, for every process's counters
        rng = get_rng_state(self.device)
        ranks_rng = self.dist.gather_tensors(rng_tensors(rng))  # each process's dropout stream
        data = self._weights_bytes(self._position())
        optimizer = self._optimizer_state()
        if not self.dist.is_main:
            self._saved_step = st.step
            return
        state = state_to_bytes({
            "format": 1,
            "train": dataclasses.asdict(st),
            "optimizer": optimizer,
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "rng": rng,
            "rng_ranks": [rng_from_tensors(parts, rng) for parts in ranks_rng],
            "strategy": "fsdp" if self.sharded else "ddp",
            "config": self.cfg.to_dict(),
            "weight_average": self._average.state_dict() if self._average is not None else None,
        })
        self.store.save(st.step, data, state)
        self._saved_step = st.step
        if self.valid_batches is None:  # no best to keep: the latest (the average under train.ema)
            if self._average is not None:
                with self._averaged_weights():
                    data = self._weights_bytes(self._position())
            atomic_write_bytes(self.run_dir / WEIGHTS, data)

    def _optimizer_state(self) -> dict | None:
        """AdamW's state: as `state_dict()` (by parameter number), or under fsdp the full state
        gathered onto rank 0 (by parameter name; None elsewhere)."""
        if not self.sharded:
            return self.optimizer.state_dict()
        full = self._sharded.full_optimizer_state(self.optimizer)
        return full if self.dist.is_main else None

    def _load_checkpoint(self) -> dict:
        """Restore weights, optimizer, schedule, scaler and counters; return the RNG states."""
        ck = self.store.latest()
        state = load_state(ck.state)
        try:
            train = TrainState(**state["train"])
            weights_step = read_weights_metadata(ck.weights).get("step")
            if weights_step != str(train.step) or ck.step not in (None, train.step):
                raise UserError(
                    f"the checkpoint in {self.run_dir} is inconsistent: {ck.weights.name} is from step "
                    f"{weights_step} but {ck.state.name} from step {train.step} (a run of an older "
                    "version interrupted while saving?); start a fresh run with --overwrite"
                )
            saved_by = state.get("strategy", "ddp")
            optimizer_state = state["optimizer"]
            if saved_by == "fsdp" and not self.sharded:  # by name -> by number: resumes in one process too
                optimizer_state = optimizer_state_by_number(optimizer_state, self.model, self.optimizer)
            elif saved_by != "fsdp" and self.sharded:
                optimizer_state = optimizer_state_by_name(optimizer_state, self.model, self.optimizer)
            if self.sharded:
                self._sharded.load(ck.weights, self.optimizer, optimizer_state)
            else:
                load_weights(self.model, ck.weights)
                self.optimizer.load_state_dict(optimizer_state)
                keep_fused(self.optimizer, self._fused)
            self.scheduler.load_state_dict(state["scheduler"])
            if self._average is not None:
                if state.get("weight_average") is None:
                    raise UserError(
                        f"the checkpoint in {self.run_dir} holds no weight average (it was trained without "
                        f"train.ema); resume with ema=0 as it was, or start a fresh run")
                self._average.load_state_dict(state["weight_average"])
            if self.scaler.is_enabled() and state.get("scaler"):
                self.scaler.load_state_dict(state["scaler"])
        except (KeyError, TypeError, ValueError) as e:
            raise UserError(
                f"the checkpoint in {self.run_dir} does not fit this model/config ({e}); "
                "start a fresh run or use the original settings"
            ) from None
        self.state = train
        self._saved_step = train.step
        self._truncate_metrics(train.step)
        ranks = state.get("rng_ranks") or []
        if len(ranks) == self.dist.world:
            return ranks[self.dist.rank]
        if self.dist.rank:  # saved by another number of processes: a fresh stream of this one's own
            seed_everything(self.cfg.seed + self.dist.rank + 7919 * train.step)
            return get_rng_state(self.device)
        return state["rng"]

    def _truncate_metrics(self, step: int) -> None:
        if self.dist.is_main:
            truncate_metrics(self.run_dir, step)
