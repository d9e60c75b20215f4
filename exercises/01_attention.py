"""第 1 步 · 缩放点积注意力 | Step 1 · Scaled dot-product attention

中文：写出论文里的那一行公式

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k + mask) · V

每个查询和每个键做点积得到分数，除以 √d_k（d_k 是每个头的维度），被掩码挡住的位置填 -1e9，
在**最后一维**（键的那一维）上做 softmax，再用这些权重对值加权求和。为什么要除以 √d_k：
d_k 个独立的单位方差分量的点积，方差是 d_k；不缩放时 d_k 一大，softmax 就饱和成近似 one-hot，
梯度几乎为零，“模型完全无法学习”。掩码约定：1 / True = 可以注意，0 / False = 挡住。

English: write the paper's one line above. Each query is dotted with each key, the scores are
divided by √d_k (the size of one head), blocked positions are filled with -1e9, the softmax runs
over the **last** dimension (the keys), and the weights average the values. Why √d_k: a dot product
of d_k independent unit-variance terms has variance d_k; unscaled, a large d_k saturates the softmax
into a near one-hot whose gradient is almost zero. Masks: 1 / True = may attend, 0 / False = blocked.

Shapes: query `(..., Tq, d_k)`, key and value `(..., Tk, d_k)`, mask broadcastable to
`(..., Tq, Tk)`, dropout an optional `nn.Dropout` for the weights (multi-head attention passes
its own in step 3). Returns `(output (..., Tq, d_k), weights (..., Tq, Tk))`.

评分 · Graded by: `scratchformer check exercises/01_attention.py` (it compares your function with
the reference on random inputs, with and without masks, and names the classic bugs:
`missing-scale`, `wrong-scale`, `mask-fill-zero`, `softmax-dim`).
参考答案 · Solution: `exercises/solutions/01_attention.py`.
"""
import math

import torch


def scaled_dot_product_attention(query, key, value, mask=None, dropout=None):
    d_k = query.size(-1)
    raise NotImplementedError('TODO 01: 分数 = Q Kᵀ / √d_k，用 masked_fill(mask == 0, -1e9) 挡住，在最后一维 softmax，再乘 V · scores = query @ key.transpose(-2, -1) / sqrt(d_k); mask with masked_fill(mask == 0, -1e9); softmax over dim=-1; return (weights @ value, weights)')
