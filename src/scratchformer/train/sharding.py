"""The model of an fsdp run (`train.strategy: fsdp`), as the Trainer uses it: sharded in place
over the processes (`distributed.shard_model`, FSDP2's `fully_shard`), with a weightless copy kept
beside it so that a plain, one-process module can be made from gathered weights (after fit, for a
task's hook), the full weights and optimizer state gathered onto rank 0 for the run folder's files,
and the full state of a checkpoint loaded back into the shards on resume.

Every method that gathers is a collective: all processes call it."""
from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Any

import torch

from .distributed import shard_model


class ShardedModel:
    def __init__(self, model: torch.nn.Module):
        """Shard `model` in place and keep its skeleton: its weights on the meta device, ties kept;
        non-persistent buffers (position tables) are real copies."""
        scales = {n: p.lr_scale for n, p in model.named_parameters() if hasattr(p, "lr_scale")}
        persistent = set(model.state_dict())
        memo: dict[int, Any] = {}
        for n, t in list(model.named_parameters()) + [(n, b) for n, b in model.named_buffers() if n in persistent]:
            meta = torch.empty_like(t, device="meta")
            memo[id(t)] = torch.nn.Parameter(meta, t.requires_grad) if isinstance(t, torch.nn.Parameter) else meta
        self.skeleton = copy.deepcopy(model, memo)
        self.model = model
        self.units = shard_model(model)
        for n, p in model.named_parameters():  # fully_shard made new parameters: keep their lr scale
            if n in scales:
                p.lr_scale = scales[n]

    def plain(self, full: dict[str, torch.Tensor], device: torch.device) -> torch.nn.Module:
        """A plain (unsharded) copy of the model holding the weights `full`, on `device`."""
        persistent = set(self.skeleton.state_dict())
        memo: dict[int, Any] = {}
        for n, t in list(self.skeleton.named_parameters()) + [
                (n, b) for n, b in self.skeleton.named_buffers() if n in persistent]:
            real = full[n].detach().to(device).clone()
            memo[id(t)] = torch.nn.Parameter(real, t.requires_grad) if isinstance(t, torch.nn.Parameter) else real
        return copy.deepcopy(self.skeleton, memo).to(device)

    def full_state(self, cpu_offload: bool = True) -> dict[str, torch.Tensor]:
        """The whole model's weights, gathered from every process's shard."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=cpu_offload))

    def full_optimizer_state(self, optimizer) -> dict:
        """AdamW's full state, by parameter name, gathered onto this process's CPU."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

        return get_optimizer_state_dict(self.model, optimizer,
                                        options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    @contextlib.contextmanager
    def gathered(self):
        """The whole model's weights on every process for the block (evaluation: a task may read
        weights without calling forward, as translation's lean decoder does)."""
        for m in self.units:
            m.set_reshard_after_forward(False)
            m.unshard()
        try:
            yield
        finally:
            for m in self.units:
                m.reshard()
                m.set_reshard_after_forward(True)

    def load(self, weights_path: Path, optimizer, optimizer_state: dict) -> None:
        """Resume: every process reads the full weights and optimizer state (the run folder is
        shared) and keeps its shard of them."""
        from safetensors.torch import load_file
        from torch.distributed.checkpoint.state_dict import (StateDictOptions, set_model_state_dict,
                                                             set_optimizer_state_dict)

        full = load_file(str(weights_path))
        model_keys = set(self.skeleton.state_dict())
        missing = sorted(model_keys - set(full))
        if missing:
            raise ValueError(f"{weights_path.name} lacks {', '.join(missing[:3])}")
        opts = StateDictOptions(full_state_dict=True)
        set_model_state_dict(self.model, {k: full[k] for k in model_keys}, options=opts)
        set_optimizer_state_dict(self.model, optimizer, optimizer_state, options=opts)
