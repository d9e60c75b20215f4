"""A Transformer encoder written the way the seed tutorials write it (the baseline).

This is deliberately *not* how scratchformer does it; it is the code most people start from
(The Annotated Transformer, d2l): separate Q/K/V linears, scores filled with -1e9 where the
mask is False, an explicit softmax, and a LayerNorm built from `x.std()` (unbiased, with eps
added to the std instead of inside the square root, so it differs from `nn.LayerNorm` by up
to ~1e-2). Dropout sits where those tutorials put it, including on the attention
probabilities. It can load an `nn.TransformerEncoder`'s weights so that every contender of a
benchmark holds the same numbers.
"""
from __future__ import annotations

import copy
import math

import torch
from torch import nn


class TextbookLayerNorm(nn.Module):
    def __init__(self, features: int, eps: float = 1e-6):
        super().__init__()
        self.a_2 = nn.Parameter(torch.ones(features))
        self.b_2 = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        std = x.std(-1, keepdim=True)
        return self.a_2 * (x - mean) / (std + self.eps) + self.b_2


def attention(query, key, value, mask=None, dropout=None):
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = scores.softmax(dim=-1)
    if dropout is not None:
        p_attn = dropout(p_attn)
    return torch.matmul(p_attn, value), p_attn


class TextbookMultiHeadedAttention(nn.Module):
    def __init__(self, h: int, d_model: int, dropout: float = 0.1):
        super().__init__()
        assert d_model % h == 0
        self.d_k = d_model // h
        self.h = h
        self.linears = nn.ModuleList([copy.deepcopy(nn.Linear(d_model, d_model)) for _ in range(4)])
        self.attn = None
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, query, key, value, mask=None):
        if mask is not None:
            mask = mask.unsqueeze(1)  # same mask for every head
        nbatches = query.size(0)
        query, key, value = [
            lin(x).view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
            for lin, x in zip(self.linears, (query, key, value))
        ]
        x, self.attn = attention(query, key, value, mask=mask, dropout=self.dropout)
        x = x.transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        del query, key, value
        return self.linears[-1](x)


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.1):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.w_2(self.dropout(self.w_1(x).relu()))


class SublayerConnection(nn.Module):
    """Residual + norm. `norm_first=True` is the tutorial's code (Pre-LN); False is the
    paper's Post-LN, which is what it says in the prose."""

    def __init__(self, size: int, dropout: float, norm_first: bool):
        super().__init__()
        self.norm = TextbookLayerNorm(size)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x, sublayer):
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class TextbookEncoderLayer(nn.Module):
    def __init__(self, size, self_attn, feed_forward, dropout, norm_first):
        super().__init__()
        self.self_attn = self_attn
        self.feed_forward = feed_forward
        self.sublayer = nn.ModuleList([SublayerConnection(size, dropout, norm_first) for _ in range(2)])

    def forward(self, x, mask):
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, mask))
        return self.sublayer[1](x, self.feed_forward)


class TextbookEncoder(nn.Module):
    """`forward(x (B, T, C), mask (B, T) with True/1 = real token) -> (B, T, C)`."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, n_layers: int, dropout: float = 0.1,
                 attn_dropout: float | None = None, norm_first: bool = False):
        super().__init__()
        attn_dropout = dropout if attn_dropout is None else attn_dropout
        self.layers = nn.ModuleList(
            TextbookEncoderLayer(d_model, TextbookMultiHeadedAttention(n_heads, d_model, attn_dropout),
                                 PositionwiseFeedForward(d_model, d_ff, dropout), dropout, norm_first)
            for _ in range(n_layers)
        )
        self.norm = TextbookLayerNorm(d_model) if norm_first else None

    def forward(self, x, mask):
        mask = mask.unsqueeze(-2)  # (B, 1, T)
        for layer in self.layers:
            x = layer(x, mask)
        return x if self.norm is None else self.norm(x)

    @classmethod
    def from_torch(cls, enc: nn.TransformerEncoder) -> "TextbookEncoder":
        """Same weights as an `nn.TransformerEncoder` (batch_first, ReLU, no final norm for Post-LN)."""
        first = enc.layers[0]
        d = first.linear1.in_features
        ours = cls(d, first.self_attn.num_heads, first.linear1.out_features, len(enc.layers),
                   dropout=first.dropout.p, attn_dropout=first.self_attn.dropout,
                   norm_first=first.norm_first)
        with torch.no_grad():
            for tl, l in zip(ours.layers, enc.layers):
                w, b = l.self_attn.in_proj_weight, l.self_attn.in_proj_bias
                for i in range(3):
                    tl.self_attn.linears[i].weight.copy_(w[i * d:(i + 1) * d])
                    tl.self_attn.linears[i].bias.copy_(b[i * d:(i + 1) * d])
                tl.self_attn.linears[3].load_state_dict(l.self_attn.out_proj.state_dict())
                tl.feed_forward.w_1.load_state_dict(l.linear1.state_dict())
                tl.feed_forward.w_2.load_state_dict(l.linear2.state_dict())
                for sub, norm in zip(tl.sublayer, (l.norm1, l.norm2)):
                    sub.norm.a_2.copy_(norm.weight)
                    sub.norm.b_2.copy_(norm.bias)
            if ours.norm is not None and enc.norm is not None:
                ours.norm.a_2.copy_(enc.norm.weight)
                ours.norm.b_2.copy_(enc.norm.bias)
        return ours.train(enc.training)
