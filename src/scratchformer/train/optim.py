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
