"""LayerNorm and RMSNorm, written out, with the fused kernel beside them.

The textbook LayerNorm (`(x - mean) / (x.std() + eps)`) is not what the Transformer papers
or `torch.nn.LayerNorm` compute: the variance is the *biased* one and eps sits *inside* the
square root. Ours is the real one; `fused=False` runs the readable math, tested equal to the
fused kernel.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class LayerNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5, bias: bool = True, fused: bool = True):
        super().__init__()
        self.eps = eps
        self.fused = fused
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: `(..., C)` -> `(..., C)`."""
        if self.fused:
            return F.layer_norm(x, self.weight.shape, self.weight, self.bias, self.eps)
        mean = x.mean(-1, keepdim=True)
        var = (x - mean).pow(2).mean(-1, keepdim=True)  # biased variance, as nn.LayerNorm
        y = (x - mean) * torch.rsqrt(var + self.eps) * self.weight
        return y if self.bias is None else y + self.bias


class RMSNorm(nn.Module):
    """Root-mean-square norm (no centring, no bias): `x / sqrt(mean(x^2) + eps) * w`."""

    def __init__(self, dim: int, eps: float = 1e-6, fused: bool = True):
        super().__init__()
        self.eps = eps
        self.fused = fused
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return F.rms_norm(x, self.weight.shape, self.weight, self.eps)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def make_norm(kind: str, dim: int, eps: float, bias: bool = True) -> nn.Module:
    return LayerNorm(dim, eps, bias) if kind == "layernorm" else RMSNorm(dim, eps)
