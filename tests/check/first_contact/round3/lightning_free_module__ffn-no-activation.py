"""Tiny Transformer encoder classifier, organised the Lightning way
(forward / training_step / configure_optimizers) but without installing lightning.

Task: classify short token sequences into 3 classes (random data for now).
"""
import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F

hparams = SimpleNamespace(
    vocab_size=60,
    num_classes=3,
    d_model=32,
    n_heads=4,
    d_ff=64,
    n_layers=2,
    max_len=16,
    dropout=0.1,
    lr=3e-4,
    pad_idx=0,
)


class LayerNorm(nn.Module):
    # my own layernorm so I understand what it does
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(torch.ones(d_model))
        self.beta = nn.Parameter(torch.zeros(d_model))
        self.eps = eps

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = x.var(dim=-1, keepdim=True, unbiased=False)
        return self.gamma * (x - mean) / torch.sqrt(var + self.eps) + self.beta


class SinusoidalPositions(nn.Module):
    def __init__(self, d_model, max_len):
        super().__init__()
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len).unsqueeze(1).float()
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0))  # (1, max_len, d_model)

    def forward(self, x):
        return x + self.pe[:, : x.size(1)]


class SelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, dropout):
        super().__init__()
        assert d_model % n_heads == 0
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.q_lin = nn.Linear(d_model, d_model)
        self.k_lin = nn.Linear(d_model, d_model)
        self.v_lin = nn.Linear(d_model, d_model)
        self.out_lin = nn.Linear(d_model, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask):
        # x: (B, T, D), mask: (B, 1, 1, T) with 1 = real token, 0 = padding
        B, T, D = x.shape
        q = self.q_lin(x).view(B, T, self.n_heads, self.d_head).transpose(1, 2)
        k = self.k_lin(x).view(B, T, self.n_heads, self.d_head).transpose(1, 2)
        v = self.v_lin(x).view(B, T, self.n_heads, self.d_head).transpose(1, 2)

        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)
        scores = scores.masked_fill(mask == 0, float("-inf"))
        attn = self.drop(torch.softmax(scores, dim=-1))
        out = (attn @ v).transpose(1, 2).contiguous().view(B, T, D)
        return self.out_lin(out)


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff, dropout):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_model, d_ff),
            nn.Dropout(dropout),
            nn.Linear(d_ff, d_model),
        )

    def forward(self, x):
        return self.net(x)


class EncoderBlock(nn.Module):
    """post-LN block like in the original paper"""

    def __init__(self, d_model, n_heads, d_ff, dropout):
        super().__init__()
        self.attn = SelfAttention(d_model, n_heads, dropout)
        self.ff = FeedForward(d_model, d_ff, dropout)
        self.norm1 = LayerNorm(d_model)
        self.norm2 = LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, mask):
        x = self.norm1(x + self.drop(self.attn(x, mask)))
        x = self.norm2(x + self.drop(self.ff(x)))
        return x


class TransformerClassifier(nn.Module):
    def __init__(self, hparams):
        super().__init__()
        self.hparams = hparams
        hp = hparams
        self.embed = nn.Embedding(hp.vocab_size, hp.d_model, padding_idx=hp.pad_idx)
        self.pos = SinusoidalPositions(hp.d_model, hp.max_len)
        self.drop = nn.Dropout(hp.dropout)
        self.layers = nn.ModuleDict(
            {f"block_{i}": EncoderBlock(hp.d_model, hp.n_heads, hp.d_ff, hp.dropout) for i in range(hp.n_layers)}
        )
        self.classifier = nn.Linear(hp.d_model, hp.num_classes)

    def forward(self, ids):
        keep = ids != self.hparams.pad_idx  # (B, T)
        mask = keep[:, None, None, :]
        x = self.embed(ids) * math.sqrt(self.hparams.d_model)
        x = self.drop(self.pos(x))
        for name in self.layers:
            x = self.layers[name](x, mask)
        # mean over the real tokens only
        keep_f = keep.unsqueeze(-1).float()
        pooled = (x * keep_f).sum(1) / keep_f.sum(1).clamp(min=1.0)
        return self.classifier(pooled)

    # ---- "lightning" hooks ----
    def training_step(self, batch, batch_idx=0):
        ids, labels = batch
        logits = self(ids)
        loss = F.cross_entropy(logits, labels)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)


def random_batch(bs=8):
    lengths = torch.randint(4, hparams.max_len + 1, (bs,))
    ids = torch.randint(1, hparams.vocab_size, (bs, hparams.max_len))
    for i, L in enumerate(lengths):
        ids[i, L:] = hparams.pad_idx
    labels = torch.randint(0, hparams.num_classes, (bs,))
    return ids, labels


if __name__ == "__main__":
    torch.manual_seed(0)
    model = TransformerClassifier(hparams)
    optimizer = model.configure_optimizers()
    model.train()
    for step in range(6):
        batch = random_batch()
        loss = model.training_step(batch, step)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 3 == 0:
            print(f"step {step}: loss={loss.item():.4f}")
    model.eval()
    with torch.no_grad():
        ids, _ = random_batch(4)
        print(model(ids).argmax(-1))
