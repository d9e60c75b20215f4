"""第 7 步 · 正弦位置编码 | Step 7 · Sinusoidal positional encoding

中文：注意力本身不知道词的顺序（把输入打乱，输出也只是跟着打乱）。论文给每个位置 p 加一个固定向量：

    PE[p, 2i]   = sin(p / 10000^(2i / d_model))
    PE[p, 2i+1] = cos(p / 10000^(2i / d_model))

在 `__init__` 里算好 `(1, max_len, d_model)` 的表，`forward(x)` 返回 `x + pe[:, :T]`。
这张表必须用 `self.register_buffer("pe", pe)` 注册（`pe-not-buffer`）：写成普通属性 `self.pe = pe` 时，
`model.to("cuda")` 不会搬它，`state_dict()` 里也没有它。指数里是 2i / d_model（2i 就是偶数列的下标
0, 2, 4, ...）；偶数列用 sin，奇数列用 cos（`pe-wrong-formula`）。

English: attention alone does not know the order of the tokens (shuffle the input and the output is
only shuffled alike). The paper adds a fixed vector to each position p (formula above). Compute the
`(1, max_len, d_model)` table in `__init__`; `forward(x)` returns `x + pe[:, :T]`. Register the table
with `self.register_buffer("pe", pe)` (`pe-not-buffer`): as a plain attribute `self.pe = pe` it does
not move with `model.to("cuda")` and is missing from `state_dict()`. The exponent is 2i / d_model
with 2i the even index itself (0, 2, 4, ...), sine on even channels, cosine on odd ones
(`pe-wrong-formula`).

Shapes: x `(B, T, d_model)` with T <= max_len -> `(B, T, d_model)`.

评分 · Graded by: `scratchformer check exercises/07_positional.py`.
参考答案 · Solution: `exercises/solutions/07_positional.py`.
"""
import math

import torch
from torch import nn


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=5000):
        super().__init__()
        # --- TODO 07a: 算出 (max_len, d_model) 的表，偶数列 sin、奇数列 cos，再 register_buffer("pe", pe.unsqueeze(0)) · position = arange(max_len)[:, None]; div_term = exp(arange(0, d_model, 2) * (-log(10000) / d_model)); pe[:, 0::2] = sin(position * div_term); pe[:, 1::2] = cos(...); self.register_buffer("pe", pe.unsqueeze(0))
        position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)  # (max_len, 1)
        div_term = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model)
        pe[:, 0::2] = torch.sin(position * div_term)  # (max_len, d_model / 2)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))  # (1, max_len, d_model): moves with .to(), saved in state_dict
        # --- end TODO

    def forward(self, x):
        # --- TODO 07b: 加上前 T 个位置的编码 · return x + self.pe[:, : x.size(1)]
        return x + self.pe[:, : x.size(1)]  # (B, T, d_model)
        # --- end TODO
