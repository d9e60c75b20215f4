"""The optimizer's parameter groups: which parameters decay, and at which learning-rate scale."""
from __future__ import annotations

import torch

from scratchformer.errors import UserError


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: decay on parameters with >= 2 dims (matrices), none on biases and norms.

    A parameter may carry an ``lr_scale`` attribute (e.g. 0.1 for a pretrained encoder under a
    fresh head); it then trains at ``lr * lr_scale`` under the same schedule. Each group says
    its ``lr_scale``; the groups at scale 1 come first (decay, then no decay).
    """
    groups: dict[tuple[float, bool], list] = {}
    for p in model.parameters():
        if p.requires_grad:
            key = (float(getattr(p, "lr_scale", 1.0)), p.ndim >= 2)
            if not key[0] > 0:
                raise UserError(f"lr_scale must be > 0, got {key[0]} (freeze with requires_grad=False)")
            groups.setdefault(key, []).append(p)
    order = sorted(groups, key=lambda k: (k[0] != 1.0, -k[0], not k[1]))
    return [{"params": groups[k], "weight_decay": weight_decay if k[1] else 0.0, "lr_scale": k[0]}
            for k in order]


# Devices whose AdamW has a fused kernel in torch (one pass over all parameters per step).
FUSED_DEVICES = ("cpu", "cuda")


def why_not_fused(params: list[torch.Tensor], sharded: bool) -> str | None:
    """None when AdamW may take its fused kernel for `params`, else the reason it may not."""
    if sharded:
        return "the parameters are sharded (fsdp): their AdamW takes torch's multi-tensor path"
    devices = sorted({p.device.type for p in params} - set(FUSED_DEVICES))
    if devices:
        return f"torch has no fused AdamW on {', '.join(devices)}"
    if any(not p.is_floating_point() for p in params):
        return "a parameter is not floating point"
    return None


def adamw(groups: list[dict], lr: float, betas, eps: float, sharded: bool = False
          ) -> tuple[torch.optim.AdamW, str | None]:
    """AdamW over `groups` (see `param_groups`), fused where it can be, and why not otherwise.

    Fused is the same update as the readable single-tensor loop (tests/train/test_optim.py holds
    them within 1e-6 over 20 steps), done in one pass over memory instead of ~10 tensor ops per
    parameter. For a model with large embedding tables (hashed bigrams: 25.6M of a 27M-parameter
    classifier) the single-tensor loop was 58% of a training step on CPU; fused is ~5x faster
    there (benchmarks/optimizer.py)."""
    why = why_not_fused([p for g in groups for p in g["params"]], sharded)
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps, fused=True if why is None else None), why


def keep_fused(optimizer: torch.optim.Optimizer, fused: bool) -> None:
    """After `load_state_dict`: the groups take the saved `fused` flag, and a checkpoint of an
    older version (not fused) would turn the fast path off for the rest of the run."""
    for g in optimizer.param_groups:
        g["fused"] = True if fused else None
