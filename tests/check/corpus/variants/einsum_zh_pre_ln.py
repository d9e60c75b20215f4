# 同一个编码器，改成 Pre-LN，最后加一层归一化
# Transformer 编码器（作业）：用 einsum 写注意力，类名用中文
# 约定：掩码 mask 为 1 的位置可以被关注，0 的位置是 padding
import math

import torch
import torch.nn as nn

模型维度 = 32
头数 = 4
前馈维度 = 64
层数 = 2


class 层归一化(nn.Module):
    def __init__(self, 维度, eps=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(维度))
        self.beta = nn.Parameter(torch.zeros(维度))
        self.eps = eps

    def forward(self, x):
        均值 = x.mean(dim=-1, keepdim=True)
        方差 = ((x - 均值) ** 2).mean(dim=-1, keepdim=True)  # 有偏方差，和 nn.LayerNorm 一样
        return self.gamma * (x - 均值) / torch.sqrt(方差 + self.eps) + self.beta


class 位置编码(nn.Module):
    def __init__(self, 维度, 最大长度=512):
        super().__init__()
        位置 = torch.arange(最大长度).float().unsqueeze(1)  # (L, 1)
        频率 = torch.exp(torch.arange(0, 维度, 2).float() * (-math.log(10000.0) / 维度))  # (d/2,)
        表 = torch.zeros(最大长度, 维度)
        表[:, 0::2] = torch.sin(位置 * 频率)
        表[:, 1::2] = torch.cos(位置 * 频率)
        self.register_buffer("表", 表)  # 不是参数，但要随模型保存、随 .to(device) 移动

    def forward(self, x):
        return x + self.表[: x.shape[1]]


class 多头注意力(nn.Module):
    def __init__(self, 维度=模型维度, 头数=头数):
        super().__init__()
        self.头数 = 头数
        self.头维度 = 维度 // 头数
        self.查询 = nn.Linear(维度, 维度)
        self.键 = nn.Linear(维度, 维度)
        self.值 = nn.Linear(维度, 维度)
        self.输出 = nn.Linear(维度, 维度)

    def forward(self, x, mask=None):
        B, T, C = x.shape
        q = self.查询(x).view(B, T, self.头数, self.头维度)  # (B, T, h, d)
        k = self.键(x).view(B, T, self.头数, self.头维度)
        v = self.值(x).view(B, T, self.头数, self.头维度)
        分数 = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(self.头维度)  # (B, h, T, T)
        if mask is not None:
            分数 = 分数.masked_fill(mask[:, None, None, :] == 0, float("-inf"))
        权重 = torch.softmax(分数, dim=-1)
        输出 = torch.einsum("bhqk,bkhd->bqhd", 权重, v)  # (B, T, h, d)
        return self.输出(输出.reshape(B, T, C))


class 前馈网络(nn.Module):
    def __init__(self, 维度=模型维度, 隐藏维度=前馈维度):
        super().__init__()
        self.线性1 = nn.Linear(维度, 隐藏维度)
        self.线性2 = nn.Linear(隐藏维度, 维度)

    def forward(self, x):
        return self.线性2(torch.relu(self.线性1(x)))


class 编码器层(nn.Module):
    """Pre-LN：x = x + 子层(LN(x))"""

    def __init__(self, 维度=模型维度, 头数=头数, 隐藏维度=前馈维度, dropout=0.1):
        super().__init__()
        self.注意力 = 多头注意力(维度, 头数)
        self.前馈 = 前馈网络(维度, 隐藏维度)
        self.归一化1 = 层归一化(维度)
        self.归一化2 = 层归一化(维度)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, mask=None):
        x = x + self.dropout(self.注意力(self.归一化1(x), mask))
        x = x + self.dropout(self.前馈(self.归一化2(x)))
        return x


class 编码器(nn.Module):
    def __init__(self, 词表大小=100, 维度=模型维度, 头数=头数, 隐藏维度=前馈维度, 层数=层数, dropout=0.1):
        super().__init__()
        self.维度 = 维度
        self.嵌入 = nn.Embedding(词表大小, 维度)
        self.位置 = 位置编码(维度)
        self.层 = nn.ModuleList([编码器层(维度, 头数, 隐藏维度, dropout) for _ in range(层数)])
        self.最终归一化 = 层归一化(维度)  # Pre-LN 的最后一层输出还没归一化

    def forward(self, 词, mask=None):
        x = self.位置(self.嵌入(词) * math.sqrt(self.维度))
        for 层 in self.层:
            x = 层(x, mask)
        return self.最终归一化(x)
