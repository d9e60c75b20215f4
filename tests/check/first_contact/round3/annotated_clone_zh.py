# -*- coding: utf-8 -*-
"""
照着《The Annotated Transformer》一行一行重新敲了一遍，名字都换成了中文，方便自己理解。
结构：编码器-解码器，N 层，子层连接（先归一化再残差，Pre-LN），最后各自再接一个层归一化。
"""
import copy
import math

import torch
import torch.nn as nn


def 克隆(模块, N):
    "把一个模块复制 N 份"
    return nn.ModuleList([copy.deepcopy(模块) for _ in range(N)])


class 编码解码器(nn.Module):
    """标准的编码器-解码器结构"""

    def __init__(self, 编码器, 解码器, 源嵌入, 目标嵌入, 生成器):
        super().__init__()
        self.编码器 = 编码器
        self.解码器 = 解码器
        self.源嵌入 = 源嵌入
        self.目标嵌入 = 目标嵌入
        self.生成器 = 生成器

    def forward(self, src, tgt, src_mask, tgt_mask):
        "先编码，再解码"
        return self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask)

    def encode(self, src, src_mask):
        return self.编码器(self.源嵌入(src), src_mask)

    def decode(self, memory, src_mask, tgt, tgt_mask):
        return self.解码器(self.目标嵌入(tgt), memory, src_mask, tgt_mask)


class 生成器(nn.Module):
    "线性层 + log_softmax，输出词表上的分布"

    def __init__(self, d_model, vocab):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab)

    def forward(self, x):
        return torch.log_softmax(self.proj(x), dim=-1)


class 层归一化(nn.Module):
    "自己写的 LayerNorm（方差用有偏估计，eps 放在根号里面，和 nn.LayerNorm 一致）"

    def __init__(self, 特征数, eps=1e-6):
        super().__init__()
        self.a_2 = nn.Parameter(torch.ones(特征数))
        self.b_2 = nn.Parameter(torch.zeros(特征数))
        self.eps = eps

    def forward(self, x):
        均值 = x.mean(-1, keepdim=True)
        方差 = ((x - 均值) ** 2).mean(-1, keepdim=True)
        return self.a_2 * (x - 均值) / torch.sqrt(方差 + self.eps) + self.b_2


class 编码器(nn.Module):
    "N 个编码器层叠起来"

    def __init__(self, 层, N):
        super().__init__()
        self.层们 = 克隆(层, N)
        self.归一化 = 层归一化(层.大小)

    def forward(self, x, mask):
        for 层 in self.层们:
            x = 层(x, mask)
        return self.归一化(x)


class 子层连接(nn.Module):
    """
    残差连接 + 层归一化。
    为了代码简单，归一化放在前面（Pre-LN）。
    """

    def __init__(self, 大小, dropout):
        super().__init__()
        self.归一化 = 层归一化(大小)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, 子层):
        return x + self.dropout(子层(self.归一化(x)))


class 编码器层(nn.Module):
    "自注意力 + 前馈"

    def __init__(self, 大小, 自注意力, 前馈, dropout):
        super().__init__()
        self.自注意力 = 自注意力
        self.前馈 = 前馈
        self.子层 = 克隆(子层连接(大小, dropout), 2)
        self.大小 = 大小

    def forward(self, x, mask):
        x = self.子层[0](x, lambda x: self.自注意力(x, x, x, mask))
        return self.子层[1](x, self.前馈)


class 解码器(nn.Module):
    "N 个解码器层，带 mask"

    def __init__(self, 层, N):
        super().__init__()
        self.层们 = 克隆(层, N)
        self.归一化 = 层归一化(层.大小)

    def forward(self, x, memory, src_mask, tgt_mask):
        for 层 in self.层们:
            x = 层(x, memory, src_mask, tgt_mask)
        return self.归一化(x)


class 解码器层(nn.Module):
    "自注意力 + 源注意力（交叉注意力）+ 前馈"

    def __init__(self, 大小, 自注意力, 源注意力, 前馈, dropout):
        super().__init__()
        self.大小 = 大小
        self.自注意力 = 自注意力
        self.源注意力 = 源注意力
        self.前馈 = 前馈
        self.子层 = 克隆(子层连接(大小, dropout), 3)

    def forward(self, x, memory, src_mask, tgt_mask):
        m = memory
        x = self.子层[0](x, lambda x: self.自注意力(x, x, x, tgt_mask))
        x = self.子层[1](x, lambda x: self.源注意力(x, m, m, src_mask))
        return self.子层[2](x, self.前馈)


def subsequent_mask(size):
    "遮住后面的位置：True 表示可以看"
    attn_shape = (1, size, size)
    mask = torch.triu(torch.ones(attn_shape), diagonal=1).type(torch.uint8)
    return mask == 0


def attention(query, key, value, mask=None, dropout=None):
    "缩放点积注意力"
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = scores.softmax(dim=-1)
    if dropout is not None:
        p_attn = dropout(p_attn)
    return torch.matmul(p_attn, value), p_attn


class 多头注意力(nn.Module):
    def __init__(self, h, d_model, dropout=0.1):
        super().__init__()
        assert d_model % h == 0
        self.d_k = d_model // h
        self.h = h
        self.linears = 克隆(nn.Linear(d_model, d_model), 4)
        self.attn = None
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, query, key, value, mask=None):
        if mask is not None:
            # 同一个 mask 用在所有头上
            mask = mask.unsqueeze(1)
        nbatches = query.size(0)

        # 1) 线性变换，再切成 h 个头：d_model => h x d_k
        query, key, value = [
            lin(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
            for lin, x in zip(self.linears, (query, key, value))
        ]

        # 2) 在所有头上同时算注意力
        x, self.attn = attention(query, key, value, mask=mask, dropout=self.dropout)

        # 3) 拼回去，再过最后一个线性层
        x = x.transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        del query, key, value
        return self.linears[-1](x)


class 前馈网络(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.w_2(self.dropout(self.w_1(x).relu()))


class 词嵌入(nn.Module):
    def __init__(self, d_model, vocab):
        super().__init__()
        self.lut = nn.Embedding(vocab, d_model)
        self.d_model = d_model

    def forward(self, x):
        return self.lut(x) * math.sqrt(self.d_model)


class 位置编码(nn.Module):
    "正弦位置编码"

    def __init__(self, d_model, dropout, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)

        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0)
        self.register_buffer("pe", pe)

    def forward(self, x):
        x = x + self.pe[:, : x.size(1)].requires_grad_(False)
        return self.dropout(x)


def make_model(src_vocab, tgt_vocab, N=2, d_model=32, d_ff=64, h=4, dropout=0.1):
    "根据超参数搭一个完整的模型"
    c = copy.deepcopy
    attn = 多头注意力(h, d_model)
    ff = 前馈网络(d_model, d_ff, dropout)
    position = 位置编码(d_model, dropout)
    model = 编码解码器(
        编码器(编码器层(d_model, c(attn), c(ff), dropout), N),
        解码器(解码器层(d_model, c(attn), c(attn), c(ff), dropout), N),
        nn.Sequential(词嵌入(d_model, src_vocab), c(position)),
        nn.Sequential(词嵌入(d_model, tgt_vocab), c(position)),
        生成器(d_model, tgt_vocab),
    )
    # 论文代码里很重要的一步：Glorot / fan_avg 初始化
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    return model


if __name__ == "__main__":
    torch.manual_seed(0)
    PAD, BOS = 0, 1
    模型 = make_model(20, 20)
    模型.eval()

    # 两个句子，第二个后面补了 0
    src = torch.tensor([[1, 5, 7, 9, 3, 2, 8, 4],
                        [1, 6, 6, 2, 0, 0, 0, 0]])
    src_mask = (src != PAD).unsqueeze(-2)  # (B, 1, S)

    with torch.no_grad():
        memory = 模型.encode(src, src_mask)
        ys = torch.full((src.size(0), 1), BOS, dtype=torch.long)
        # 贪心解码一步
        out = 模型.decode(memory, src_mask, ys, subsequent_mask(ys.size(1)).type_as(src.data))
        prob = 模型.生成器(out[:, -1])
        _, next_word = torch.max(prob, dim=1)
        ys = torch.cat([ys, next_word.unsqueeze(1)], dim=1)
    print("预测的下一个词:", next_word.tolist())
    print("当前序列:", ys.tolist())
