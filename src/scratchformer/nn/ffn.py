"""Position-wise feed-forward network: ReLU / GELU (the paper, BERT) or SwiGLU (LLaMA)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .fast_linear import Linear


class FeedForward(nn.Module):
    """`linear_in -> activation -> dropout -> linear_out`, the layout of torch's
    TransformerEncoderLayer. For SwiGLU, `linear_in` computes gate and value in one
    matmul: `silu(gate) * value`.
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu",
                 dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.activation = activation
        n_in = 2 * d_ff if activation == "swiglu" else d_ff
        self.linear_in = Linear(d_model, n_in, bias=bias)
        self.linear_out = Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: `(B, T, C)` -> `(B, T, C)`."""
        h = self.linear_in(x)  # (B, T, d_ff) or (B, T, 2*d_ff)
        if self.activation == "relu":
            h = F.relu(h)
        elif self.activation == "gelu":
            h = F.gelu(h)  # exact erf GELU, as BERT and torch's "gelu"
        elif self.activation == "gelu_tanh":
            h = F.gelu(h, approximate="tanh")
        else:
            gate, value = h.chunk(2, dim=-1)  # (B, T, d_ff) each
            h = F.silu(gate) * value
        if self.training and self.dropout.p > 0:  # in eval not even called (small-input overhead)
            h = self.dropout(h)
        return self.linear_out(h)
