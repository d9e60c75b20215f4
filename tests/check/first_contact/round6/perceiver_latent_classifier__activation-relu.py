"""
Perceiver (Jaegle et al., 2021) for byte-level text classification, re-implemented for my reading group.

    inputs  (B, N) bytes  --embed-->  (B, N, d_input)
    latents (L, d_latent), learned, shared across the batch
    [cross-attend latents -> inputs] then [latent self-attention x depth], repeated `num_blocks`
    times with shared weights after the first block (weight sharing as in the paper);
    classify from the mean of the final latents.

Pre-norm everywhere, separate LayerNorm for the byte array (context) in the cross-attention.
MLPs use GELU (config.activation = "gelu").
The byte mask is True for real bytes, False for padding.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class PerceiverConfig:
    vocab_size: int = 259  # 256 bytes + pad/cls/unk
    max_len: int = 256
    d_input: int = 64
    num_latents: int = 16
    d_latent: int = 128
    cross_heads: int = 1
    cross_head_dim: int = 64
    latent_heads: int = 4
    latent_head_dim: int = 32
    self_per_block: int = 2
    num_blocks: int = 2
    mlp_mult: int = 4
    activation: str = "gelu"
    dropout: float = 0.1
    num_classes: int = 4


class Attention(nn.Module):
    def __init__(self, q_dim, kv_dim, heads, head_dim, dropout=0.0):
        super().__init__()
        inner = heads * head_dim
        self.heads = heads
        self.head_dim = head_dim
        self.scale = head_dim ** -0.5
        self.to_q = nn.Linear(q_dim, inner)
        self.to_k = nn.Linear(kv_dim, inner)
        self.to_v = nn.Linear(kv_dim, inner)
        self.to_out = nn.Linear(inner, q_dim)
        self.attn_drop = nn.Dropout(dropout)

    def forward(self, x, context=None, mask=None):
        # x: (B, L, q_dim); context: (B, N, kv_dim) or None for self-attention
        context = x if context is None else context
        b, l, _ = x.shape
        n = context.shape[1]
        q = self.to_q(x).reshape(b, l, self.heads, self.head_dim).permute(0, 2, 1, 3)
        k = self.to_k(context).reshape(b, n, self.heads, self.head_dim).permute(0, 2, 1, 3)
        v = self.to_v(context).reshape(b, n, self.heads, self.head_dim).permute(0, 2, 1, 3)

        sim = (q @ k.transpose(-2, -1)) * self.scale  # (B, h, L, N)
        if mask is not None:
            # mask: (B, N), True = keep
            mask = mask[:, None, None, :]
            sim = sim.masked_fill(~mask, -torch.finfo(sim.dtype).max)
        attn = sim.softmax(dim=-1)  # each latent distributes its attention over the inputs
        attn = self.attn_drop(attn)

        out = attn @ v  # (B, h, L, head_dim)
        out = out.permute(0, 2, 1, 3).reshape(b, l, self.heads * self.head_dim)
        return self.to_out(out)


class MLP(nn.Module):
    def __init__(self, dim, mult, dropout):
        super().__init__()
        self.fc1 = nn.Linear(dim, dim * mult)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(dim * mult, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        return self.drop(self.fc2(self.act(self.fc1(x))))


class CrossAttentionBlock(nn.Module):
    def __init__(self, cfg: PerceiverConfig):
        super().__init__()
        self.norm_latents = nn.LayerNorm(cfg.d_latent)
        self.norm_context = nn.LayerNorm(cfg.d_input)
        self.attn = Attention(cfg.d_latent, cfg.d_input, cfg.cross_heads, cfg.cross_head_dim, cfg.dropout)
        self.norm_mlp = nn.LayerNorm(cfg.d_latent)
        self.mlp = MLP(cfg.d_latent, cfg.mlp_mult, cfg.dropout)

    def forward(self, latents, inputs, mask):
        latents = latents + self.attn(self.norm_latents(latents), context=self.norm_context(inputs), mask=mask)
        latents = latents + self.mlp(self.norm_mlp(latents))
        return latents


class LatentSelfBlock(nn.Module):
    def __init__(self, cfg: PerceiverConfig):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.d_latent)
        self.attn = Attention(cfg.d_latent, cfg.d_latent, cfg.latent_heads, cfg.latent_head_dim, cfg.dropout)
        self.norm2 = nn.LayerNorm(cfg.d_latent)
        self.mlp = MLP(cfg.d_latent, cfg.mlp_mult, cfg.dropout)

    def forward(self, latents):
        latents = latents + self.attn(self.norm1(latents))
        latents = latents + self.mlp(self.norm2(latents))
        return latents


class PerceiverClassifier(nn.Module):
    def __init__(self, cfg: PerceiverConfig):
        super().__init__()
        self.cfg = cfg
        self.byte_emb = nn.Embedding(cfg.vocab_size, cfg.d_input)
        self.pos_emb = nn.Embedding(cfg.max_len, cfg.d_input)
        self.latents = nn.Parameter(torch.randn(cfg.num_latents, cfg.d_latent) * 0.02)
        # block 0 has its own weights, blocks 1.. reuse the second set (paper, sec. 2)
        self.cross = nn.ModuleList([CrossAttentionBlock(cfg), CrossAttentionBlock(cfg)])
        self.latent_stacks = nn.ModuleList(
            [
                nn.ModuleList([LatentSelfBlock(cfg) for _ in range(cfg.self_per_block)]),
                nn.ModuleList([LatentSelfBlock(cfg) for _ in range(cfg.self_per_block)]),
            ]
        )
        self.final_norm = nn.LayerNorm(cfg.d_latent)
        self.head = nn.Linear(cfg.d_latent, cfg.num_classes)

    def forward(self, byte_ids, mask):
        b, n = byte_ids.shape
        pos = torch.arange(n, device=byte_ids.device)
        x = self.byte_emb(byte_ids) + self.pos_emb(pos)[None]
        latents = self.latents.unsqueeze(0).expand(b, -1, -1)
        for i in range(self.cfg.num_blocks):
            j = min(i, 1)
            latents = self.cross[j](latents, x, mask)
            for blk in self.latent_stacks[j]:
                latents = blk(latents)
        latents = self.final_norm(latents)
        return self.head(latents.mean(dim=1))


PAD_ID = 256


def encode_batch(texts, max_len):
    ids = [list(t.encode("utf-8"))[:max_len] for t in texts]
    n = max(len(s) for s in ids)
    out = torch.full((len(ids), n), PAD_ID, dtype=torch.long)
    for i, s in enumerate(ids):
        out[i, : len(s)] = torch.tensor(s)
    return out, out != PAD_ID


if __name__ == "__main__":
    torch.manual_seed(0)
    cfg = PerceiverConfig()
    model = PerceiverClassifier(cfg)
    texts = [
        "stocks rallied after the central bank held rates",
        "the striker scored twice in the derby",
        "new phone ships with a faster chip",
        "senate passes the budget bill",
        "goalkeeper injured before the final",
        "startup raises money for battery research",
    ]
    labels = torch.tensor([0, 1, 2, 3, 1, 2])
    ids, mask = encode_batch(texts, cfg.max_len)
    print("batch", tuple(ids.shape), "real bytes per row", mask.sum(1).tolist())

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    for step in range(8):
        model.train()
        logits = model(ids, mask)
        loss = F.cross_entropy(logits, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step:2d}  loss {loss.item():.4f}")

    model.eval()
    with torch.no_grad():
        print("pred", model(ids, mask).argmax(-1).tolist(), "gold", labels.tolist())
