"""
Decoder-only Transformer LM
 - pre-LN blocks (LayerNorm before attention / MLP, residual around)
 - learned absolute position embeddings -> sequences longer than max_len are rejected
 - output projection tied to the token embedding (head.weight IS tok_emb.weight)

The config is a plain dict so it can be dumped to json next to the checkpoint.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

config = {
    "vocab_size": 2000,
    "d_model": 96,
    "n_heads": 4,
    "n_layers": 3,
    "d_ff": 384,
    "max_len": 64,
    "dropout": 0.1,
}


class MultiHeadSelfAttention(nn.Module):
    def __init__(self, d_model, n_heads, max_len, dropout):
        super().__init__()
        assert d_model % n_heads == 0
        self.n_heads = n_heads
        self.d_k = d_model // n_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        # additive mask: 0 on and below the diagonal, -inf above (= the future)
        mask = torch.full((max_len, max_len), float("-inf")).triu(1)
        self.register_buffer("causal_mask", mask)

    def forward(self, x):
        B, T, D = x.shape
        q = self.W_q(x).reshape(B, T, self.n_heads, self.d_k).permute(0, 2, 1, 3)
        k = self.W_k(x).reshape(B, T, self.n_heads, self.d_k).permute(0, 2, 1, 3)
        v = self.W_v(x).reshape(B, T, self.n_heads, self.d_k).permute(0, 2, 1, 3)

        scores = q @ k.transpose(-1, -2) / math.sqrt(self.d_k)  # (B, h, T, T)
        scores = scores + self.causal_mask[:T, :T]
        weights = self.dropout(scores.softmax(dim=-1))
        out = (weights @ v).permute(0, 2, 1, 3).reshape(B, T, D)
        return self.W_o(out)


class PreLNBlock(nn.Module):
    def __init__(self, d_model, n_heads, d_ff, max_len, dropout):
        super().__init__()
        self.ln1 = nn.LayerNorm(d_model)
        self.attn = MultiHeadSelfAttention(d_model, n_heads, max_len, dropout)
        self.ln2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(
            nn.Linear(d_model, d_ff),
            nn.GELU(),
            nn.Linear(d_ff, d_model),
        )
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.drop(self.attn(self.ln1(x)))
        x = x + self.drop(self.ff(self.ln2(x)))
        return x


class TransformerLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.max_len = cfg["max_len"]
        self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["d_model"])
        self.pos_emb = nn.Embedding(cfg["max_len"], cfg["d_model"])
        self.drop = nn.Dropout(cfg["dropout"])
        self.blocks = nn.ModuleList([
            PreLNBlock(cfg["d_model"], cfg["n_heads"], cfg["d_ff"], cfg["max_len"], cfg["dropout"])
            for _ in range(cfg["n_layers"])
        ])
        self.ln_f = nn.LayerNorm(cfg["d_model"])
        self.head = nn.Linear(cfg["d_model"], cfg["vocab_size"], bias=False)
        self.head.weight = self.tok_emb.weight  # weight tying

        nn.init.normal_(self.tok_emb.weight, std=0.02)
        nn.init.normal_(self.pos_emb.weight, std=0.02)

    def forward(self, x):
        # x: (B, T) token ids -> (B, T, vocab_size) logits
        B, T = x.shape
        if T > self.max_len:
            raise ValueError(f"sequence length {T} > max_len {self.max_len}")
        pos = torch.arange(T, device=x.device)
        h = self.drop(self.tok_emb(x) + self.pos_emb(pos))
        for blk in self.blocks:
            h = blk(h)
        return self.head(self.ln_f(h))


if __name__ == "__main__":
    model = TransformerLM(config)
    model.eval()
    n_params = sum(p.numel() for p in model.parameters())  # tied weight counted once
    print(f"{n_params:,} params, tied: {model.head.weight is model.tok_emb.weight}")

    x = torch.randint(0, config["vocab_size"], (2, config["max_len"]))
    with torch.no_grad():
        logits = model(x)
    print(logits.shape)  # torch.Size([2, 64, 2000])

    loss = F.cross_entropy(logits[:, :-1].reshape(-1, config["vocab_size"]), x[:, 1:].reshape(-1))
    print(f"loss at init: {loss.item():.3f} (ln V = {math.log(config['vocab_size']):.3f})")
