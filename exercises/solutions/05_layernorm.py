"""第 5 步 · 层归一化 | Step 5 · LayerNorm

中文：对每个位置的 d_model 个数做归一化，再用可学习的 γ、β 缩放和平移：

    LN(x) = γ · (x - μ) / √(σ² + ε) + β,   μ = mean(x),  σ² = mean((x - μ)²)   （在最后一维上）

注意两点，它们正是很多教程写错的地方（`unbiased-std`）：方差是**有偏**的（除以 d_model，不是 d_model - 1），
ε 在**根号里面**。`(x - mean) / (x.std() + eps)` 用的是无偏标准差、ε 在根号外，和 `nn.LayerNorm`
以及论文里的 Transformer 都不一样。用 `x.var(-1, unbiased=False, keepdim=True)` 或自己算平方的均值。

English: normalise the d_model numbers of each position, then scale and shift them with the learned
γ and β (formula above, over the last dimension). Two details that many tutorials get wrong
(`unbiased-std`): the variance is the **biased** one (divide by d_model, not d_model - 1), and ε
sits **inside** the square root. `(x - mean) / (x.std() + eps)` uses the unbiased std with ε outside,
which is neither `nn.LayerNorm` nor what the Transformer papers compute. Use
`x.var(-1, unbiased=False, keepdim=True)` or the mean of the squares.

Members: `gamma` (ones) and `beta` (zeros), both `nn.Parameter` of shape `(d_model,)`; `eps`.
Shapes: x `(..., d_model)` -> the same.

评分 · Graded by: `scratchformer check exercises/05_layernorm.py`.
参考答案 · Solution: `exercises/solutions/05_layernorm.py`.
"""
import torch
from torch import nn


class LayerNorm(nn.Module):
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        # --- TODO 05: 有偏方差、ε 在根号里：gamma * (x - mean) / sqrt(var + eps) + beta · mean = x.mean(-1, keepdim=True); var = x.var(-1, unbiased=False, keepdim=True); return gamma * (x - mean) / torch.sqrt(var + eps) + beta
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, unbiased=False, keepdim=True)  # biased: divide by d_model
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta
        # --- end TODO
