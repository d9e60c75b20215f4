"""
Tiny seq2seq Transformer for a toy translation task, written without nn.Transformer.

- one embedding table shared by source and target (joint vocabulary),
  and the output projection is tied to it as well (logits = h @ E^T)
- causal mask: float -inf above the diagonal, ADDED to the scores
- key padding masks: bool, True = pad, applied with masked_fill
- label-smoothed cross entropy that ignores PAD
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

PAD, BOS, EOS = 0, 1, 2
VOCAB = 48
D_MODEL = 32
N_HEADS = 4
D_FF = 64
N_LAYERS = 2
DROPOUT = 0.1


def causal_mask(T, device=None):
    return torch.triu(torch.full((T, T), float('-inf'), device=device), diagonal=1)


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout):
        super().__init__()
        self.h = n_heads
        self.dk = d_model // n_heads
        self.wq = nn.Linear(d_model, d_model)
        self.wk = nn.Linear(d_model, d_model)
        self.wv = nn.Linear(d_model, d_model)
        self.wo = nn.Linear(d_model, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, query, key, value, attn_mask=None, key_padding_mask=None):
        B, Tq, D = query.shape
        Tk = key.size(1)
        q = self.wq(query).view(B, Tq, self.h, self.dk).transpose(1, 2)
        k = self.wk(key).view(B, Tk, self.h, self.dk).transpose(1, 2)
        v = self.wv(value).view(B, Tk, self.h, self.dk).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.dk)          # B h Tq Tk
        if attn_mask is not None:
            scores = scores + attn_mask                                  # (Tq, Tk) float, -inf = blocked
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, None, :], float('-inf'))
        attn = self.drop(F.softmax(scores, dim=-1))
        out = (attn @ v).transpose(1, 2).contiguous().view(B, Tq, D)
        return self.wo(out)


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout):
        super().__init__()
        self.lin1 = nn.Linear(d_model, d_ff)
        self.lin2 = nn.Linear(d_ff, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.lin2(self.drop(F.relu(self.lin1(x))))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, src_pad):
        x = self.norm1(x + self.drop(self.self_attn(x, x, x, key_padding_mask=src_pad)))
        x = self.norm2(x + self.drop(self.ff(x)))
        return x


class DecoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, dropout):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, y, memory, tgt_mask, tgt_pad, src_pad):
        y = self.norm1(y + self.drop(self.self_attn(y, y, y, attn_mask=tgt_mask, key_padding_mask=tgt_pad)))
        y = self.norm2(y + self.drop(self.cross_attn(y, memory, memory, key_padding_mask=src_pad)))
        y = self.norm3(y + self.drop(self.ff(y)))
        return y


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, max_len=64):
        super().__init__()
        pe = torch.zeros(max_len, d_model)
        pos = torch.arange(max_len).unsqueeze(1).float()
        div = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)
        self.register_buffer('pe', pe)

    def forward(self, x):
        return x + self.pe[: x.size(1)]


class TiedSeq2Seq(nn.Module):
    def __init__(self, vocab=VOCAB, d_model=D_MODEL, n_heads=N_HEADS, d_ff=D_FF,
                 n_layers=N_LAYERS, dropout=DROPOUT):
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(vocab, d_model, padding_idx=PAD)   # shared src/tgt
        nn.init.normal_(self.embed.weight, std=d_model ** -0.5)
        self.pos = PositionalEncoding(d_model)
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.ModuleList([EncoderLayer(d_model, n_heads, d_ff, dropout) for _ in range(n_layers)])
        self.decoder = nn.ModuleList([DecoderLayer(d_model, n_heads, d_ff, dropout) for _ in range(n_layers)])

    def embed_tokens(self, tokens):
        return self.drop(self.pos(self.embed(tokens) * math.sqrt(self.d_model)))

    def encode(self, src):
        src_pad = src == PAD
        x = self.embed_tokens(src)
        for layer in self.encoder:
            x = layer(x, src_pad)
        return x, src_pad

    def decode(self, tgt_in, memory, src_pad):
        tgt_pad = tgt_in == PAD
        tgt_mask = causal_mask(tgt_in.size(1), tgt_in.device)
        y = self.embed_tokens(tgt_in)
        for layer in self.decoder:
            y = layer(y, memory, tgt_mask, tgt_pad, src_pad)
        return F.linear(y, self.embed.weight)          # output projection tied to the embedding

    def forward(self, src, tgt_in):
        memory, src_pad = self.encode(src)
        return self.decode(tgt_in, memory, src_pad)

    def loss(self, src, tgt):
        # tgt = BOS w1 ... wn EOS PAD...; feed tgt[:-1], predict tgt[1:]
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
        logits = self(src, tgt_in)
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), tgt_out.reshape(-1),
                               label_smoothing=0.1)


def make_batch(n=4, max_len=8, generator=None):
    """toy 'translation': target is the reversed source (+3 on every id)."""
    src = torch.full((n, max_len), PAD, dtype=torch.long)
    tgt = torch.full((n, max_len + 2), PAD, dtype=torch.long)
    for i in range(n):
        L = int(torch.randint(3, max_len + 1, (1,), generator=generator))
        words = torch.randint(3, VOCAB - 3, (L,), generator=generator)
        src[i, :L] = words
        tgt[i, 0] = BOS
        tgt[i, 1:L + 1] = words.flip(0) + 3
        tgt[i, L + 1] = EOS
    return src, tgt


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TiedSeq2Seq()
    opt = torch.optim.Adam(model.parameters(), lr=3e-4, betas=(0.9, 0.98), eps=1e-9)
    for step in range(3):
        src, tgt = make_batch()
        model.train()
        loss = model.loss(src, tgt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step}  loss {loss.item():.4f}")
