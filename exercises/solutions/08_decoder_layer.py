"""第 8 步 · 解码器层：因果自注意力 + 交叉注意力 | Step 8 · The decoder layer: causal and cross attention

中文：解码器层有三个子层，每个都包着残差和 LayerNorm（这里用 Post-LN，和第 6 步的 `EncoderLayer` 一样）：

    x = norm1(x + dropout(self_attn(x, x, x, tgt_mask)))              # 因果自注意力：只看已经生成的词
    x = norm2(x + dropout(cross_attn(x, memory, memory, src_mask)))   # 交叉注意力：Q 来自解码器，K、V 来自编码器输出
    x = norm3(x + dropout(ffn(x)))

两个经典错误：自注意力没有用因果掩码 `tgt_mask`（`no-causal-mask`：训练时偷看下一个词），
以及交叉注意力的 K、V 用了解码器自己的 x 而不是编码器的 `memory`（`cross-attention-kv`：
模型根本读不到源句子）。`tgt_mask` 是第 2 步的 `target_mask`（或 `subsequent_mask`），
`src_mask` 是源句子的 `padding_mask`，形状 `(B, 1, 1, S)`。

English: the decoder layer has three sublayers, each wrapped in a residual and a LayerNorm (Post-LN
here, like step 6's `EncoderLayer`; formulas above): causal self-attention over what has been
generated, cross-attention with Q from the decoder and K, V from the encoder's output `memory`, and
the feed-forward network. The two classic slips: self-attention without the causal `tgt_mask`
(`no-causal-mask`: in training each position peeks at the next token), and cross-attention reading
K and V from the decoder's own x instead of `memory` (`cross-attention-kv`: the model never reads the
source). `tgt_mask` is step 2's `target_mask` (or `subsequent_mask`), `src_mask` the source's
`padding_mask`, `(B, 1, 1, S)`.

Members: `self_attn`, `cross_attn`, `ffn`, `norm1`, `norm2`, `norm3`, `dropout`.
Shapes: x `(B, T, d_model)`, memory `(B, S, d_model)` -> `(B, T, d_model)`.

评分 · Graded by: `scratchformer check exercises/08_decoder_layer.py`.
参考答案 · Solution: `exercises/solutions/08_decoder_layer.py`.
"""
import math

import torch
from torch import nn


# ---- 已给出（第 1、2、3、4 步的答案）· Given: the solutions of steps 1, 2, 3 and 4 (paste your own if you like)
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
def subsequent_mask(size):
    return torch.tril(torch.ones(1, size, size, dtype=torch.bool))  # (1, T, T), True = may attend


# ---- 已给出的部分到此为止 · end of the given part


class DecoderLayer(nn.Module):
    """Post-LN: masked self-attention, cross-attention over the encoder's memory, feed-forward."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.ffn = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, src_mask=None, tgt_mask=None):
        # --- TODO 08a: 因果自注意力：x = norm1(x + dropout(self_attn(x, x, x, tgt_mask)[0])) · causal self-attention with tgt_mask, then residual + norm1
        x = self.norm1(x + self.dropout(self.self_attn(x, x, x, tgt_mask)[0]))
        # --- end TODO
        # --- TODO 08b: 交叉注意力：Q 用 x，K、V 用 memory，掩码 src_mask；再 norm2 · cross-attention: cross_attn(x, memory, memory, src_mask)[0], residual + norm2
        x = self.norm2(x + self.dropout(self.cross_attn(x, memory, memory, src_mask)[0]))
        # --- end TODO
        # --- TODO 08c: 前馈子层：x = norm3(x + dropout(ffn(x))) · feed-forward, residual + norm3
        return self.norm3(x + self.dropout(self.ffn(x)))  # (B, T, d_model)
        # --- end TODO
