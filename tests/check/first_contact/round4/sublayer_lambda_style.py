"""
A small decoder-only text generator, written the "Annotated Transformer" way:
every sublayer is wrapped in a ResidualNorm and called through a lambda.
Pre-norm residuals (x + drop(f(norm(x)))), final norm after the stack.
"""
import copy
import math
from functools import partial

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 40
D_MODEL = 32
N_HEADS = 4
D_FF = 64
N_LAYERS = 2
MAX_LEN = 16
DROPOUT = 0.1


def clones(module, N):
    "Produce N identical layers."
    return nn.ModuleList([copy.deepcopy(module) for _ in range(N)])


def subsequent_mask(size):
    "Mask out subsequent positions. 1 = may attend, 0 = hidden."
    return torch.tril(torch.ones(1, size, size, dtype=torch.uint8))


class LayerNorm(nn.Module):
    "LayerNorm over the feature dimension (biased variance, eps inside the sqrt)."

    def __init__(self, features, eps=1e-5):
        super().__init__()
        self.a_2 = nn.Parameter(torch.ones(features))
        self.b_2 = nn.Parameter(torch.zeros(features))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(-1, keepdim=True)
        var = x.var(-1, keepdim=True, unbiased=False)
        return self.a_2 * (x - mean) / torch.sqrt(var + self.eps) + self.b_2


class ResidualNorm(nn.Module):
    "x + dropout(sublayer(norm(x)))"

    def __init__(self, size, dropout):
        super().__init__()
        self.norm = LayerNorm(size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        return x + self.dropout(sublayer(self.norm(x)))


def attention(query, key, value, mask=None, dropout=None):
    "Compute 'Scaled Dot Product Attention'"
    d_k = query.size(-1)
    scores = torch.matmul(query, key.transpose(-2, -1)) / math.sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(mask == 0, -1e9)
    p_attn = scores.softmax(dim=-1)
    if dropout is not None:
        p_attn = dropout(p_attn)
    return torch.matmul(p_attn, value), p_attn


class MultiHeadedAttention(nn.Module):
    def __init__(self, h, d_model, dropout=0.1):
        super().__init__()
        assert d_model % h == 0
        self.d_k = d_model // h
        self.h = h
        self.linears = clones(nn.Linear(d_model, d_model), 4)
        self.attn = None
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, query, key, value, mask=None):
        if mask is not None:
            mask = mask.unsqueeze(1)  # same mask for every head
        nbatches = query.size(0)
        split = lambda t: t.view(nbatches, -1, self.h, self.d_k).transpose(1, 2)
        query, key, value = [split(lin(x)) for lin, x in zip(self.linears, (query, key, value))]
        x, self.attn = attention(query, key, value, mask=mask, dropout=self.dropout)
        x = x.transpose(1, 2).contiguous().view(nbatches, -1, self.h * self.d_k)
        return self.linears[-1](x)


class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.w_2(self.dropout(self.w_1(x).relu()))


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x):
        x = x + self.pe[:, : x.size(1)].requires_grad_(False)
        return self.dropout(x)


class DecoderOnlyLayer(nn.Module):
    def __init__(self, size, self_attn, feed_forward, dropout):
        super().__init__()
        self.size = size
        self.self_attn = self_attn
        self.feed_forward = feed_forward
        self.sublayers = nn.ModuleList([ResidualNorm(size, dropout) for _ in range(2)])

    def forward(self, x, mask):
        x = self.sublayers[0](x, lambda y: self.self_attn(y, y, y, mask))
        return self.sublayers[1](x, self.feed_forward)


class Generator(nn.Module):
    "Embeddings -> N decoder-only layers -> final norm -> vocab logits."

    def __init__(self, vocab, d_model, n_heads, d_ff, n_layers, dropout):
        super().__init__()
        c = copy.deepcopy
        attn = MultiHeadedAttention(n_heads, d_model, dropout)
        ff = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = PositionalEncoding(d_model, dropout)
        self.layers = clones(DecoderOnlyLayer(d_model, c(attn), c(ff), dropout), n_layers)
        self.norm = LayerNorm(d_model)
        self.proj = nn.Linear(d_model, vocab)
        self.d_model = d_model

    def forward(self, tokens):
        mask = subsequent_mask(tokens.size(1)).to(tokens.device)
        x = self.pos(self.embed(tokens) * math.sqrt(self.d_model))
        for layer in self.layers:
            x = layer(x, mask)
        return self.proj(self.norm(x))


make_model = partial(Generator, VOCAB, D_MODEL, N_HEADS, D_FF, N_LAYERS, DROPOUT)


def greedy_generate(model, prompt, n_new):
    out = prompt
    for _ in range(n_new):
        logits = model(out[:, -MAX_LEN:])
        next_tok = logits[:, -1].argmax(dim=-1, keepdim=True)
        out = torch.cat([out, next_tok], dim=1)
    return out


if __name__ == "__main__":
    torch.manual_seed(0)
    model = make_model()
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    model.eval()
    prompt = torch.tensor([[1, 5, 7, 3], [2, 9, 9, 4]])
    with torch.no_grad():
        out = greedy_generate(model, prompt, 8)
    print(out.tolist())
