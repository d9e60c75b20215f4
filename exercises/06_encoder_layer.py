"""第 6 步 · 编码器层：先 Post-LN，再 Pre-LN | Step 6 · The encoder layer: Post-LN, then Pre-LN

中文：一个编码器层 = 多头自注意力 + 前馈网络，每个子层外面包一层残差连接和 LayerNorm。
LayerNorm 放在哪里有两种写法：

    Post-LN（论文）：   x = norm1(x + dropout(self_attn(x, x, x, mask)))
                        x = norm2(x + dropout(ffn(x)))
    Pre-LN（GPT-2 以后）：x = x + dropout(self_attn(norm1(x), norm1(x), norm1(x), mask))
                        x = x + dropout(ffn(norm2(x)))

残差 `x + ...` 不能丢（`no-residual`）：没有它，深层网络的梯度传不回去。Pre-LN 的残差路径上没有归一化，
深层时更容易训练；Post-LN 是论文的写法，通常需要学习率预热。两者都对：检查器会说明你选了哪一种。
先写 `EncoderLayer`（Post-LN），再写 `PreNormEncoderLayer`（Pre-LN）。

English: an encoder layer is multi-head self-attention plus the feed-forward network, each sublayer
wrapped in a residual connection and a LayerNorm. Where the LayerNorm goes has two answers
(formulas above): Post-LN as in the paper, or Pre-LN as in GPT-2 and most models since. Keep the
residual `x + ...` (`no-residual`): without it the gradient does not get back through a deep stack.
Pre-LN leaves the residual path unnormalised and trains more easily when deep; Post-LN is the
paper's and usually wants a learning-rate warmup. Both are right: the checker says which one you
wrote. Write `EncoderLayer` (Post-LN) first, then `PreNormEncoderLayer` (Pre-LN).

Members: `self_attn`, `ffn`, `norm1`, `norm2`, `dropout`. Shapes: x `(B, T, d_model)`, mask
`(B, 1, 1, T)` (1 = real token) -> `(B, T, d_model)`.

评分 · Graded by: `scratchformer check exercises/06_encoder_layer.py` (the Post-LN `EncoderLayer`), then
`scratchformer check exercises/06_encoder_layer.py --map encoder_layer=PreNormEncoderLayer` (the Pre-LN
one: the checker takes one class of each kind, and `--map` says which).
参考答案 · Solution: `exercises/solutions/06_encoder_layer.py`.
"""
import math

import torch
from torch import nn


# ---- 已给出（第 1、3、4 步的答案）· Given: the solutions of steps 1, 3 and 4 (paste your own if you like)
def scaled_dot_product_attention(query, key, value, mask=None, dropout=None):
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))  # (..., Tq, Tk)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    weights = torch.softmax(scores, dim=-1)
    probs = weights if dropout is None else dropout(weights)
    return probs @ value, weights


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        self.d_k, self.n_heads = d_model // n_heads, n_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, query, key, value, mask=None):
        B = query.size(0)
        q, k, v = (w(t).view(B, -1, self.n_heads, self.d_k).transpose(1, 2)  # (B, h, T, d_k)
                   for w, t in ((self.W_q, query), (self.W_k, key), (self.W_v, value)))
        out, weights = scaled_dot_product_attention(q, k, v, mask, self.dropout)
        out = out.transpose(1, 2).contiguous().view(B, -1, self.n_heads * self.d_k)  # (B, Tq, d_model)
        return self.W_o(out), weights


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))
# ---- 已给出的部分到此为止 · end of the given part


class EncoderLayer(nn.Module):
    """Post-LN, as in the paper."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        raise NotImplementedError("TODO 06a: Post-LN：x = norm1(x + dropout(self_attn(x, x, x, mask)[0]))，再 x = norm2(x + dropout(ffn(x))) · Post-LN: add the sublayer's output to x first, then normalise")


class PreNormEncoderLayer(EncoderLayer):
    """Pre-LN, as in GPT-2 and most models since: the same members as `EncoderLayer`, another forward."""

    def forward(self, x, mask=None):
        raise NotImplementedError("TODO 06b: Pre-LN：h = norm1(x); x = x + dropout(self_attn(h, h, h, mask)[0])；再 x = x + dropout(ffn(norm2(x))) · Pre-LN: normalise the sublayer's input, keep the residual path x unnormalised")
