# seq2seq transformer, one attention class for everything.
#
# The `Attention` module below is reused three times:
#   * encoder self-attention      -> Attention(..., causal=False)
#   * decoder self-attention      -> Attention(..., causal=True)
#   * decoder cross-attention     -> Attention(..., causal=False), called with context=memory
#
# Masks: `key_mask` is a bool tensor (batch, key_len) that is True for real
# tokens and False for padding.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD = 0


class LayerNorm(nn.Module):
    # wrote my own to make sure I understand it; should match nn.LayerNorm
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.gamma = nn.Parameter(torch.ones(dim))
        self.beta = nn.Parameter(torch.zeros(dim))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


class Attention(nn.Module):
    def __init__(self, d_model, n_heads, causal: bool, dropout=0.0):
        super().__init__()
        assert d_model % n_heads == 0, "d_model must divide by n_heads"
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.causal = causal
        self.to_q = nn.Linear(d_model, d_model)
        self.to_k = nn.Linear(d_model, d_model)
        self.to_v = nn.Linear(d_model, d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.drop = nn.Dropout(dropout)

    def _split(self, t):
        # (batch, len, d_model) -> (batch, heads, len, d_head)
        b, n, _ = t.shape
        return t.view(b, n, self.n_heads, self.d_head).transpose(1, 2)

    def forward(self, x, context=None, key_mask=None):
        if context is None:          # self-attention
            context = x
        b, tq, _ = x.shape
        tk = context.shape[1]

        q = self._split(self.to_q(x))
        k = self._split(self.to_k(context))
        v = self._split(self.to_v(context))

        scores = q @ k.transpose(-1, -2) / math.sqrt(self.d_head)   # (b, h, tq, tk)
        if key_mask is not None:
            scores = scores.masked_fill(~key_mask[:, None, None, :], 0.0)
        if self.causal:
            future = torch.ones(tq, tk, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(future, -1e9)

        weights = scores.softmax(dim=-1)
        weights = self.drop(weights)
        out = (weights @ v).transpose(1, 2).reshape(b, tq, -1)
        return self.proj(out)


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, d_ff),
            nn.ReLU(),
            nn.Dropout(dropout),
            nn.Linear(d_ff, d_model),
        )

    def forward(self, x):
        return self.net(x)


class EncoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.attn = Attention(d_model, n_heads, causal=False, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, src_mask):
        # post-norm like the original paper
        x = self.norm1(x + self.drop(self.attn(x, key_mask=src_mask)))
        x = self.norm2(x + self.drop(self.ff(x)))
        return x


class DecoderBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.self_attn = Attention(d_model, n_heads, causal=True, dropout=dropout)
        self.cross_attn = Attention(d_model, n_heads, causal=False, dropout=dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.norm3 = LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, y, memory, src_mask, tgt_mask):
        y = self.norm1(y + self.drop(self.self_attn(y, key_mask=tgt_mask)))
        y = self.norm2(y + self.drop(self.cross_attn(y, context=memory, key_mask=src_mask)))
        y = self.norm3(y + self.drop(self.ff(y)))
        return y


def sinusoid_table(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float32)[:, None]
    i = torch.arange(0, d_model, 2, dtype=torch.float32)[None, :]
    angle = pos / torch.pow(10000.0, i / d_model)
    # interleave: even dims sin, odd dims cos
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)


class Seq2SeqTransformer(nn.Module):
    def __init__(self, src_vocab, tgt_vocab, d_model=32, n_heads=4, n_layers=2,
                 d_ff=64, dropout=0.1, max_len=128):
        super().__init__()
        self.d_model = d_model
        self.src_emb = nn.Embedding(src_vocab, d_model, padding_idx=PAD)
        self.tgt_emb = nn.Embedding(tgt_vocab, d_model, padding_idx=PAD)
        self.register_buffer("pos", sinusoid_table(max_len, d_model), persistent=False)
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.ModuleList([EncoderBlock(d_model, n_heads, d_ff, dropout) for _ in range(n_layers)])
        self.decoder = nn.ModuleList([DecoderBlock(d_model, n_heads, d_ff, dropout) for _ in range(n_layers)])
        self.out = nn.Linear(d_model, tgt_vocab)

    def embed(self, emb, ids):
        x = emb(ids) * math.sqrt(self.d_model)
        return self.drop(x + self.pos[: ids.shape[1]])

    def encode(self, src):
        src_mask = src != PAD
        x = self.embed(self.src_emb, src)
        for blk in self.encoder:
            x = blk(x, src_mask)
        return x, src_mask

    def decode(self, tgt, memory, src_mask):
        tgt_mask = tgt != PAD
        y = self.embed(self.tgt_emb, tgt)
        for blk in self.decoder:
            y = blk(y, memory, src_mask, tgt_mask)
        return y

    def forward(self, src, tgt):
        memory, src_mask = self.encode(src)
        return self.out(self.decode(tgt, memory, src_mask))


def demo():
    torch.manual_seed(0)
    model = Seq2SeqTransformer(src_vocab=40, tgt_vocab=45, d_model=32, n_heads=4,
                               n_layers=2, d_ff=64)
    model.eval()
    # padded batch: 0 is <pad>
    src = torch.tensor([
        [3, 14, 15, 9, 2, 6, 5],
        [7, 8, 2, 0, 0, 0, 0],
        [11, 12, 13, 21, 4, 0, 0],
    ])
    tgt = torch.tensor([
        [1, 22, 23, 24, 25, 26],
        [1, 30, 31, 0, 0, 0],
        [1, 40, 41, 42, 0, 0],
    ])
    with torch.no_grad():
        logits = model(src, tgt)
    print("logits:", tuple(logits.shape))
    print("greedy:", logits.argmax(-1)[0].tolist())
    return logits


if __name__ == "__main__":
    demo()
