"""Additive (Bahdanau) attention: the score is a small MLP instead of a dot product.

    score(q, k) = w_vᵀ tanh(W_q q + W_k k)          (Bahdanau et al. 2015; d2l 11.3)
    Attention(q, K, V) = softmax(score(q, K) + mask) · V
    # 加性注意力：查询和键各自投影到同一隐藏空间后相加，经 tanh，再与 w_v 做内积得到分数

Beside `scaled_dot_product_attention` (attention.py) as the readable reference of the other
scoring function of the textbooks. What differs: queries and keys may have different sizes
(W_q and W_k map both into `hidden_dim`), and the score is non-linear in (q, k), so it can
express what a bilinear q·k cannot (e.g. "the key nearest the query" for scalar inputs). What
it costs: the `(B, Tq, Tk, hidden)` features of every pair, where dot products need only the
`(B, Tq, Tk)` scores and a fused kernel; that is why the Transformer uses dot products.

Masks as everywhere in scratchformer (masks.py): `padding_mask` `(B, Tk)` bool, True = real
key; `attn_mask` `(Tq, Tk)` or `(B, Tq, Tk)` bool, True = may attend. A query whose keys are all
masked gets zero weights and a zero output (never NaN, never uniform weights over padding).
"""
from __future__ import annotations

import torch
from torch import nn

from .masks import check_mask


class AdditiveAttention(nn.Module):
    """`bias=True` adds one bias vector b inside the tanh, `tanh(W_q q + W_k k + b)` (d2l and
    Bahdanau et al. have none). Without it the score is an odd function of (q, k),
    score(−q, −k) = −score(q, k): on zero-centred inputs the key it ranks first for one example it
    ranks last for the mirrored one (`experiment attention-scores`: chance level on both tasks)."""

    def __init__(self, query_dim: int, key_dim: int, hidden_dim: int, dropout: float = 0.0, bias: bool = False):
        super().__init__()
        self.W_q = nn.Linear(query_dim, hidden_dim, bias=bias)
        self.W_k = nn.Linear(key_dim, hidden_dim, bias=False)
        self.w_v = nn.Linear(hidden_dim, 1, bias=False)
        self.dropout = nn.Dropout(dropout)

    def project_keys(self, k: torch.Tensor) -> torch.Tensor:
        """k `(B, Tk, Dk)` -> W_k k `(B, Tk, hidden)`: a decoder that attends over the same keys at
        every step (an RNN translator's memory) computes this once and passes it as `projected_keys`."""
        return self.W_k(k)

    def scores(self, q: torch.Tensor, k: torch.Tensor, projected_keys: torch.Tensor | None = None) -> torch.Tensor:
        """q `(B, Tq, Dq)`, k `(B, Tk, Dk)` -> `(B, Tq, Tk)`: w_vᵀ tanh(W_q q + W_k k) per pair."""
        kp = self.W_k(k) if projected_keys is None else projected_keys  # (B, Tk, hidden)
        features = self.W_q(q)[:, :, None, :] + kp[:, None, :, :]  # (B, Tq, Tk, hidden)
        return self.w_v(torch.tanh(features)).squeeze(-1)  # (B, Tq, Tk)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                padding_mask: torch.Tensor | None = None,
                attn_mask: torch.Tensor | None = None,
                projected_keys: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """q `(B, Tq, Dq)`, k `(B, Tk, Dk)`, v `(B, Tk, Dv)` -> `(out (B, Tq, Dv), weights (B, Tq, Tk))`.
        `projected_keys`: `project_keys(k)` computed earlier (the same numbers, once per source)."""
        check_mask(padding_mask, "padding_mask", allow_float=False)
        check_mask(attn_mask, "attn_mask", allow_float=False)
        scores = self.scores(q, k, projected_keys)
        allowed = torch.ones_like(scores, dtype=torch.bool)
        if padding_mask is not None:
            allowed = allowed & padding_mask[:, None, :]  # (B, 1, Tk)
        if attn_mask is not None:
            allowed = allowed & attn_mask  # (Tq, Tk) or (B, Tq, Tk)
        row_ok = allowed.any(-1, keepdim=True)  # (B, Tq, 1): False where every key is masked
        # -inf on blocked keys; rows with no key left are opened for the softmax and zeroed after
        scores = scores.masked_fill(~(allowed | ~row_ok), float("-inf"))
        weights = torch.softmax(scores.float(), dim=-1).to(q.dtype) * row_ok  # (B, Tq, Tk)
        return self.dropout(weights) @ v, weights  # (B, Tq, Dv)
