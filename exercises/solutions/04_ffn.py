"""第 4 步 · 逐位置前馈网络 | Step 4 · Position-wise feed-forward network

中文：注意力把各位置的信息混在一起；前馈网络再对**每个位置各自**做同一个两层变换：

    FFN(x) = max(0, x W_1 + b_1) W_2 + b_2        （d_model → d_ff → d_model，论文里 d_ff = 4·d_model）

激活函数夹在两层中间，dropout 放在激活之后。忘了激活函数（`ffn-no-activation`）时，两层线性叠起来
仍是一个线性映射，这一层就失去了它存在的意义。ReLU 和 GELU 都可以：检查器把这当作一个选择，只作说明。

English: attention mixes the positions; the feed-forward network then applies the same two-layer
map to **each position on its own** (formula above; d_model -> d_ff -> d_model, d_ff = 4·d_model in
the paper). The activation sits between the two layers, dropout after the activation. Without the
activation (`ffn-no-activation`) two linear layers are one linear map, and the block loses its
point. ReLU or GELU are both fine: the checker notes which one you chose.

Members: `linear1 (d_model -> d_ff)`, `linear2 (d_ff -> d_model)`, `dropout`.
Shapes: x `(B, T, d_model)` -> `(B, T, d_model)`.

评分 · Graded by: `scratchformer check exercises/04_ffn.py`.
参考答案 · Solution: `exercises/solutions/04_ffn.py`.
"""
import torch
from torch import nn


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        # --- TODO 04: linear1 → ReLU → dropout → linear2 · return self.linear2(self.dropout(torch.relu(self.linear1(x))))
        return self.linear2(self.dropout(torch.relu(self.linear1(x))))  # (B, T, d_ff) inside
        # --- end TODO
