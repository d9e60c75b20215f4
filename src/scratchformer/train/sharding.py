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
        # the model's own order (registration), never a set's: each key is a collective, and a set of
        # strings iterates in an order that differs between processes (PYTHONHASHSEED): gloo aborts
        model_keys = list(self.skeleton.state_dict())
        missing = [k for k in model_keys if k not in full]
        if missing:
            raise ValueError(f"{weights_path.name} lacks {', '.join(missing[:3])}")
        opts = StateDictOptions(full_state_dict=True)
        set_model_state_dict(self.model, {k: full[k] for k in model_keys}, options=opts)
        set_optimizer_state_dict(self.model, optimizer, optimizer_state, options=opts)


def _groups_by_name(model: torch.nn.Module, optimizer) -> list[list[str]]:
    """The optimizer's parameter groups as parameter names, in the optimizer's own order."""
    name_of = {id(p): n for n, p in model.named_parameters()}  # a tied weight by its first name, as fsdp
    return [[name_of[id(p)] for p in g["params"]] for g in optimizer.param_groups]


def optimizer_state_by_number(state: dict, model: torch.nn.Module, optimizer) -> dict:
    """An fsdp checkpoint's optimizer state (keyed by parameter name) as `optimizer.load_state_dict`
    takes it in one process (keyed by number, in the optimizer's order): an fsdp run resumes anywhere."""
    groups = _groups_by_name(model, optimizer)
    saved = state["param_groups"]
    if len(saved) != len(groups) or any(set(a["params"]) != set(b) for a, b in zip(saved, groups)):
        raise ValueError("its optimizer groups hold other parameters than this model's")
    out, n = {"state": {}, "param_groups": []}, 0
    for g, names in zip(saved, groups):
        out["param_groups"].append({**g, "params": list(range(n, n + len(names)))})
        for name in names:
            if name in state["state"]:
                out["state"][n] = state["state"][name]
            n += 1
    return out


def optimizer_state_by_name(state: dict, model: torch.nn.Module, optimizer) -> dict:
    """The reverse: a one-process (or ddp) checkpoint's optimizer state keyed by name, as
    `ShardedModel.load` takes it, so that run resumes under fsdp."""
    groups = _groups_by_name(model, optimizer)
    saved = state["param_groups"]
    if len(saved) != len(groups) or any(len(a["params"]) != len(b) for a, b in zip(saved, groups)):
        raise ValueError("its optimizer groups hold other parameters than this model's")
    out = {"state": {}, "param_groups": []}
    for g, names in zip(saved, groups):
        out["param_groups"].append({**g, "params": names})
        for number, name in zip(g["params"], names):
            if number in state["state"]:
                out["state"][name] = state["state"][number]
    return out
