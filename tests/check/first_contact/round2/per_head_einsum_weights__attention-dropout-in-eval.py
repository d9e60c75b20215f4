# Post-LN transformer encoder for sequence classification.
# Attention weights are stored per head (like in the interpretability write-ups):
#   W_Q, W_K, W_V : (n_heads, d_model, d_head)   -- (in, out) for each head
#   W_O           : (n_heads, d_head, d_model)
# so every projection is a single einsum and there is no reshape/transpose at all.
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

cfg = dict(
    vocab_size=64,
    n_classes=3,
    d_model=32,
    n_heads=4,
    d_mlp=64,
    n_layers=2,
    max_len=32,
    attn_dropout=0.1,
    resid_dropout=0.1,
    pad_id=0,
)


class PerHeadAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, h = cfg["d_model"], cfg["n_heads"]
        self.n_heads = h
        self.d_head = d // h
        self.W_Q = nn.Parameter(torch.randn(h, d, self.d_head) / math.sqrt(d))
        self.W_K = nn.Parameter(torch.randn(h, d, self.d_head) / math.sqrt(d))
        self.W_V = nn.Parameter(torch.randn(h, d, self.d_head) / math.sqrt(d))
        self.b_Q = nn.Parameter(torch.zeros(h, self.d_head))
        self.b_K = nn.Parameter(torch.zeros(h, self.d_head))
        self.b_V = nn.Parameter(torch.zeros(h, self.d_head))
        self.W_O = nn.Parameter(torch.randn(h, self.d_head, d) / math.sqrt(d))
        self.b_O = nn.Parameter(torch.zeros(d))
        self.attn_dropout = cfg["attn_dropout"]

    def forward(self, x, pad_mask=None):
        # x: (b, t, d);  pad_mask: (b, t) bool, True where the token is padding
        q = torch.einsum("btd,hdk->bhtk", x, self.W_Q) + self.b_Q[None, :, None, :]
        k = torch.einsum("btd,hdk->bhtk", x, self.W_K) + self.b_K[None, :, None, :]
        v = torch.einsum("btd,hdk->bhtk", x, self.W_V) + self.b_V[None, :, None, :]
        scores = torch.einsum("bhqk,bhsk->bhqs", q, k) / math.sqrt(self.d_head)
        if pad_mask is not None:
            scores = scores.masked_fill(pad_mask[:, None, None, :], float("-inf"))
        pattern = scores.softmax(dim=-1)
        pattern = F.dropout(pattern, p=self.attn_dropout)
        z = torch.einsum("bhqs,bhsk->bhqk", pattern, v)
        return torch.einsum("bhqk,hkd->bqd", z, self.W_O) + self.b_O


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.fc_in = nn.Linear(cfg["d_model"], cfg["d_mlp"])
        self.fc_out = nn.Linear(cfg["d_mlp"], cfg["d_model"])

    def forward(self, x):
        return self.fc_out(F.gelu(self.fc_in(x)))


class EncoderBlock(nn.Module):
    """Post-LN: x = LN(x + sublayer(x))."""

    def __init__(self, cfg):
        super().__init__()
        self.attn = PerHeadAttention(cfg)
        self.ln1 = nn.LayerNorm(cfg["d_model"])
        self.mlp = MLP(cfg)
        self.ln2 = nn.LayerNorm(cfg["d_model"])
        self.drop = nn.Dropout(cfg["resid_dropout"])

    def forward(self, x, pad_mask):
        x = self.ln1(x + self.drop(self.attn(x, pad_mask)))
        x = self.ln2(x + self.drop(self.mlp(x)))
        return x


def sinusoidal_positions(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)   # (L, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)        # 0, 2, 4, ...
    angle = pos / (10000 ** (two_i / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angle)
    pe[:, 1::2] = torch.cos(angle)
    return pe


class Classifier(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg["vocab_size"], cfg["d_model"], padding_idx=cfg["pad_id"])
        self.register_buffer("pos", sinusoidal_positions(cfg["max_len"], cfg["d_model"]))
        self.blocks = nn.ModuleList([EncoderBlock(cfg) for _ in range(cfg["n_layers"])])
        self.head = nn.Linear(cfg["d_model"], cfg["n_classes"])

    def encode(self, ids):
        pad_mask = ids == self.cfg["pad_id"]
        x = self.embed(ids) * math.sqrt(self.cfg["d_model"]) + self.pos[: ids.shape[1]]
        for blk in self.blocks:
            x = blk(x, pad_mask)
        return x, pad_mask

    def forward(self, ids):
        x, pad_mask = self.encode(ids)
        keep = (~pad_mask).unsqueeze(-1).float()
        pooled = (x * keep).sum(1) / keep.sum(1)
        return self.head(pooled)


if __name__ == "__main__":
    torch.manual_seed(0)
    model = Classifier(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)

    # toy task: class = (number of tokens > 31) mod 3, sequences padded to 12
    B, T = 32, 12
    ids = torch.randint(1, cfg["vocab_size"], (B, T))
    lens = torch.randint(3, T + 1, (B,))
    ids = ids.masked_fill(torch.arange(T)[None] >= lens[:, None], cfg["pad_id"])
    y = ((ids > 31).sum(1) % 3)

    for step in range(10):
        model.train()
        loss = F.cross_entropy(model(ids), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 5 == 0:
            print(step, round(loss.item(), 4))

    model.eval()
    with torch.no_grad():
        print("acc", (model(ids).argmax(-1) == y).float().mean().item())
