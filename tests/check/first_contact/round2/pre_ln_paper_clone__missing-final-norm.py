"""
"Attention Is All You Need" -- my re-implementation, pre-LN flavour.

This started life as five files (attention.py, sublayers.py, layers.py,
embeddings.py, model.py). I merged them into one so it is easier to share.
The only deliberate change from the paper is the placement of LayerNorm:
I normalise *before* each sublayer (pre-LN) because it trains without warmup,
so each stack ends with one final LayerNorm.

Mask convention everywhere in this file: True = "do not attend here"
(padding or future position).
"""
import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

D_MODEL = 32
N_HEADS = 4
D_FF = 64
N_LAYERS = 2
SRC_VOCAB = 50
TGT_VOCAB = 60
MAX_LEN = 64
DROPOUT = 0.1
PAD_IDX = 0


# ============================================================ attention.py
class ScaledDotProductAttention(nn.Module):
    """softmax(q k^T * scale) v.

    scale=None means the raw dot product is used. The caller
    (MultiHeadAttention) is responsible for passing 1/sqrt(d_k).
    """

    def __init__(self, dropout=0.0):
        super().__init__()
        self.dropout = nn.Dropout(dropout)

    def forward(self, q, k, v, scale=None, attn_mask=None):
        # q: (B, h, Tq, d_k)   k, v: (B, h, Tk, d_k)
        scores = torch.matmul(q, k.transpose(-2, -1))
        if scale is not None:
            scores = scores * scale
        if attn_mask is not None:
            scores = scores.masked_fill(attn_mask, float("-inf"))
        attn = F.softmax(scores, dim=-1)
        attn = self.dropout(attn)
        return torch.matmul(attn, v), attn


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout=0.1):
        super().__init__()
        assert d_model % n_heads == 0
        self.d_k = d_model // n_heads
        self.h = n_heads
        self.w_q = nn.Linear(d_model, d_model)
        self.w_k = nn.Linear(d_model, d_model)
        self.w_v = nn.Linear(d_model, d_model)
        self.w_o = nn.Linear(d_model, d_model)
        self.attention = ScaledDotProductAttention(dropout)
        self.attn = None  # last attention map, for plotting

    def forward(self, query, key, value, mask=None):
        B = query.size(0)
        # (B, T, d_model) -> (B, h, T, d_k)
        q = self.w_q(query).view(B, -1, self.h, self.d_k).transpose(1, 2)
        k = self.w_k(key).view(B, -1, self.h, self.d_k).transpose(1, 2)
        v = self.w_v(value).view(B, -1, self.h, self.d_k).transpose(1, 2)
        if mask is not None:
            mask = mask.unsqueeze(1)  # same mask for every head
        out, self.attn = self.attention(q, k, v, scale=1.0 / math.sqrt(self.d_k), attn_mask=mask)
        out = out.transpose(1, 2).contiguous().view(B, -1, self.h * self.d_k)
        return self.w_o(out)


# ============================================================ sublayers.py
class PositionwiseFeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.1):
        super().__init__()
        self.w_1 = nn.Linear(d_model, d_ff)
        self.w_2 = nn.Linear(d_ff, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.w_2(self.dropout(F.relu(self.w_1(x))))


class SublayerConnection(nn.Module):
    """Pre-LN residual block: x + dropout(sublayer(norm(x)))."""

    def __init__(self, size, dropout):
        super().__init__()
        self.norm = nn.LayerNorm(size)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, sublayer):
        return x + self.dropout(sublayer(self.norm(x)))


def clones(module, n):
    return nn.ModuleList([copy.deepcopy(module) for _ in range(n)])


# ============================================================ layers.py
class EncoderLayer(nn.Module):
    def __init__(self, size, self_attn, feed_forward, dropout):
        super().__init__()
        self.self_attn = self_attn
        self.feed_forward = feed_forward
        self.sublayer = clones(SublayerConnection(size, dropout), 2)
        self.size = size

    def forward(self, x, mask):
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, mask))
        return self.sublayer[1](x, self.feed_forward)


class DecoderLayer(nn.Module):
    def __init__(self, size, self_attn, src_attn, feed_forward, dropout):
        super().__init__()
        self.size = size
        self.self_attn = self_attn
        self.src_attn = src_attn
        self.feed_forward = feed_forward
        self.sublayer = clones(SublayerConnection(size, dropout), 3)

    def forward(self, x, memory, src_mask, tgt_mask):
        m = memory
        x = self.sublayer[0](x, lambda x: self.self_attn(x, x, x, tgt_mask))
        x = self.sublayer[1](x, lambda x: self.src_attn(x, m, m, src_mask))
        return self.sublayer[2](x, self.feed_forward)


class Encoder(nn.Module):
    def __init__(self, layer, n):
        super().__init__()
        self.layers = clones(layer, n)
        self.norm = nn.LayerNorm(layer.size)  # needed with pre-LN

    def forward(self, x, mask):
        for layer in self.layers:
            x = layer(x, mask)
        return x


class Decoder(nn.Module):
    def __init__(self, layer, n):
        super().__init__()
        self.layers = clones(layer, n)
        self.norm = nn.LayerNorm(layer.size)

    def forward(self, x, memory, src_mask, tgt_mask):
        for layer in self.layers:
            x = layer(x, memory, src_mask, tgt_mask)
        return self.norm(x)


# ============================================================ embeddings.py
class Embeddings(nn.Module):
    def __init__(self, d_model, vocab):
        super().__init__()
        self.lut = nn.Embedding(vocab, d_model)
        self.d_model = d_model

    def forward(self, x):
        return self.lut(x) * math.sqrt(self.d_model)


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout, max_len=5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len).unsqueeze(1).float()
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * -(math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))

    def forward(self, x):
        x = x + self.pe[:, : x.size(1)]
        return self.dropout(x)


# ============================================================ model.py
class Generator(nn.Module):
    def __init__(self, d_model, vocab):
        super().__init__()
        self.proj = nn.Linear(d_model, vocab)

    def forward(self, x):
        return F.log_softmax(self.proj(x), dim=-1)


class Transformer(nn.Module):
    def __init__(self, encoder, decoder, src_embed, tgt_embed, generator):
        super().__init__()
        self.encoder = encoder
        self.decoder = decoder
        self.src_embed = src_embed
        self.tgt_embed = tgt_embed
        self.generator = generator

    def encode(self, src, src_mask):
        return self.encoder(self.src_embed(src), src_mask)

    def decode(self, memory, src_mask, tgt, tgt_mask):
        return self.decoder(self.tgt_embed(tgt), memory, src_mask, tgt_mask)

    def forward(self, src, tgt, src_mask, tgt_mask):
        memory = self.encode(src, src_mask)
        return self.generator(self.decode(memory, src_mask, tgt, tgt_mask))


def subsequent_mask(size):
    """True above the diagonal = future positions that must be hidden."""
    return torch.triu(torch.ones(1, size, size, dtype=torch.bool), diagonal=1)


def make_masks(src, tgt, pad=PAD_IDX):
    src_mask = (src == pad).unsqueeze(-2)                               # (B, 1, S)
    tgt_mask = (tgt == pad).unsqueeze(-2) | subsequent_mask(tgt.size(-1))  # (B, T, T)
    return src_mask, tgt_mask


# ------------------------------------------------------------ build it
enc = Encoder(
    EncoderLayer(D_MODEL, MultiHeadAttention(D_MODEL, N_HEADS, DROPOUT),
                 PositionwiseFeedForward(D_MODEL, D_FF, DROPOUT), DROPOUT),
    N_LAYERS,
)
dec = Decoder(
    DecoderLayer(D_MODEL, MultiHeadAttention(D_MODEL, N_HEADS, DROPOUT),
                 MultiHeadAttention(D_MODEL, N_HEADS, DROPOUT),
                 PositionwiseFeedForward(D_MODEL, D_FF, DROPOUT), DROPOUT),
    N_LAYERS,
)
src_embed = nn.Sequential(Embeddings(D_MODEL, SRC_VOCAB), PositionalEncoding(D_MODEL, DROPOUT, MAX_LEN))
tgt_embed = nn.Sequential(Embeddings(D_MODEL, TGT_VOCAB), PositionalEncoding(D_MODEL, DROPOUT, MAX_LEN))
generator = Generator(D_MODEL, TGT_VOCAB)

model = Transformer(enc, dec, src_embed, tgt_embed, generator)
for p in model.parameters():
    if p.dim() > 1:
        nn.init.xavier_uniform_(p)

# quick smoke test on a padded batch
model.eval()
src = torch.tensor([[5, 7, 9, 11, 13, 2, 0, 0, 0, 0],
                    [4, 6, 8, 10, 12, 14, 16, 18, 20, 2]])
tgt = torch.tensor([[1, 21, 22, 23, 24, 25, 0, 0, 0, 0],
                    [1, 31, 32, 33, 34, 35, 36, 37, 38, 39]])
src_mask, tgt_mask = make_masks(src, tgt)
with torch.no_grad():
    out = model(src, tgt, src_mask, tgt_mask)
print("log-probs:", tuple(out.shape), "params:", sum(p.numel() for p in model.parameters()))
