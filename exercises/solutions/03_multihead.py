"""第 3 步 · 多头注意力 | Step 3 · Multi-head attention

中文：一个头只能学一种“看”的方式；h 个头在各自 d_k = d_model / h 维的子空间里各做一次注意力，
拼起来再投影回 d_model：

    head_i = Attention(Q W_Q,i, K W_K,i, V W_V,i)
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W_O

实现时不用真的建 h 个小矩阵：用 4 个 `nn.Linear(d_model, d_model)`（W_q、W_k、W_v、W_o），
把投影结果 `view` 成 `(B, T, h, d_k)` 再 `transpose(1, 2)` 成 `(B, h, T, d_k)`。
最常见的两个错误：直接 `view(B, h, T, d_k)`（把不同位置的数混进同一个头，`heads-not-transposed`），
以及合并时忘了先 `transpose(1, 2)` 就 `view(B, T, d_model)`（`heads-merge-order`）；
合并前要 `.contiguous()`。

English: one head learns one way of looking; h heads attend in their own d_k = d_model / h
dimensional subspaces, and their outputs are concatenated and projected back (formula above).
No need for h small matrices: four `nn.Linear(d_model, d_model)` (W_q, W_k, W_v, W_o), the
projections viewed as `(B, T, h, d_k)` then `transpose(1, 2)` to `(B, h, T, d_k)`. The two classic
slips: a direct `view(B, h, T, d_k)` (positions mixed into one head, `heads-not-transposed`), and
merging with `view(B, T, d_model)` before transposing back (`heads-merge-order`); call
`.contiguous()` before the merging view.

Shapes: query `(B, Tq, d_model)`, key and value `(B, Tk, d_model)`, mask broadcastable to
`(B, h, Tq, Tk)` (1 / True = may attend, as in step 2). Returns `(output (B, Tq, d_model),
weights (B, h, Tq, Tk))`.

评分 · Graded by: `scratchformer check exercises/03_multihead.py`.
参考答案 · Solution: `exercises/solutions/03_multihead.py`.
"""
import math

import torch
from torch import nn


def scaled_dot_product_attention(query, key, value, mask=None, dropout=None):
    """已给出（第 1 步的答案）· Given: step 1's solution (paste your own if you like)."""
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))  # (..., Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = torch.softmax(scores, dim=-1)
    probs = weights if dropout is None else dropout(weights)  # dropout on the weights, in training only
    return probs @ value, weights


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        assert d_model % n_heads == 0, "d_model must be a multiple of n_heads"
        self.d_k = d_model // n_heads
        self.n_heads = n_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        B = query.size(0)
        # --- TODO 03a: 投影后拆成多头：W_q(query).view(B, -1, h, d_k).transpose(1, 2) → (B, h, T, d_k)，K、V 同样 · project, then .view(B, -1, n_heads, d_k).transpose(1, 2) for q, k and v
        q = self.W_q(query).view(B, -1, self.n_heads, self.d_k).transpose(1, 2)  # (B, h, Tq, d_k)
        k = self.W_k(key).view(B, -1, self.n_heads, self.d_k).transpose(1, 2)  # (B, h, Tk, d_k)
        v = self.W_v(value).view(B, -1, self.n_heads, self.d_k).transpose(1, 2)  # (B, h, Tk, d_k)
        # --- end TODO
        # --- TODO 03b: 每个头做注意力，再 transpose(1, 2).contiguous().view(B, -1, d_model) 合并，过 W_o · attend per head, merge with transpose(1, 2).contiguous().view(B, -1, h * d_k), then W_o; return (output, weights)
        out, weights = scaled_dot_product_attention(q, k, v, mask, self.dropout)  # (B, h, Tq, d_k), (B, h, Tq, Tk)
        out = out.transpose(1, 2).contiguous().view(B, -1, self.n_heads * self.d_k)  # (B, Tq, d_model)
        return self.W_o(out), weights
        # --- end TODO
