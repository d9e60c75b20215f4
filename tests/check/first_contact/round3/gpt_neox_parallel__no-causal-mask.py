"""
Mini GPT-NeoX: parallel attention + MLP residual, partial rotary embeddings
(only the first `rotary_pct` of each head's dims are rotated), fused qkv,
final LayerNorm, untied LM head.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class NeoXConfig:
    vocab_size: int = 96
    hidden_size: int = 64
    num_heads: int = 4
    num_layers: int = 2
    max_positions: int = 16
    rotary_pct: float = 0.5
    rotary_base: float = 10000.0
    layer_norm_eps: float = 1e-5


class RotaryEmbedding(nn.Module):
    def __init__(self, dim, max_positions, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.max_positions = max_positions

    def forward(self, seq_len):
        t = torch.arange(seq_len, dtype=self.inv_freq.dtype)
        freqs = torch.outer(t, self.inv_freq)          # (T, dim/2)
        emb = torch.cat((freqs, freqs), dim=-1)        # (T, dim)  halves layout
        return emb.cos()[None, None], emb.sin()[None, None]


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(q, k, cos, sin, rot_dim):
    q_rot, q_pass = q[..., :rot_dim], q[..., rot_dim:]
    k_rot, k_pass = k[..., :rot_dim], k[..., rot_dim:]
    q_rot = q_rot * cos + rotate_half(q_rot) * sin
    k_rot = k_rot * cos + rotate_half(k_rot) * sin
    return torch.cat((q_rot, q_pass), dim=-1), torch.cat((k_rot, k_pass), dim=-1)


class NeoXAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.n_head = cfg.num_heads
        self.head_dim = cfg.hidden_size // cfg.num_heads
        self.rot_dim = int(self.head_dim * cfg.rotary_pct)
        self.qkv = nn.Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.rotary = RotaryEmbedding(self.rot_dim, cfg.max_positions, cfg.rotary_base)
        causal = torch.tril(torch.ones(cfg.max_positions, cfg.max_positions, dtype=torch.bool), diagonal=1)
        self.register_buffer("causal", causal.view(1, 1, cfg.max_positions, cfg.max_positions), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=-1)
        q = q.view(B, T, self.n_head, self.head_dim).transpose(1, 2)  # (B, H, T, hd)
        k = k.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        v = v.view(B, T, self.n_head, self.head_dim).transpose(1, 2)

        cos, sin = self.rotary(T)
        q, k = apply_rotary(q, k, cos, sin, self.rot_dim)

        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))
        att = att.masked_fill(~self.causal[:, :, :T, :T], float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.dense(y)


class NeoXMLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.dense_h_to_4h = nn.Linear(cfg.hidden_size, 4 * cfg.hidden_size)
        self.dense_4h_to_h = nn.Linear(4 * cfg.hidden_size, cfg.hidden_size)

    def forward(self, x):
        return self.dense_4h_to_h(F.gelu(self.dense_h_to_4h(x)))


class NeoXLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.post_attention_layernorm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.attention = NeoXAttention(cfg)
        self.mlp = NeoXMLP(cfg)

    def forward(self, x):
        # parallel residual: both branches read the same x
        attn_out = self.attention(self.input_layernorm(x))
        mlp_out = self.mlp(self.post_attention_layernorm(x))
        return x + attn_out + mlp_out


class MiniNeoX(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed_in = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([NeoXLayer(cfg) for _ in range(cfg.num_layers)])
        self.final_layer_norm = nn.LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.embed_out = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    def forward(self, idx):
        x = self.embed_in(idx)
        for layer in self.layers:
            x = layer(x)
        x = self.final_layer_norm(x)
        return self.embed_out(x)


def lm_loss(logits, idx):
    # predict token t+1 from positions <= t
    shift_logits = logits[:, :-1, :].contiguous()
    shift_labels = idx[:, 1:].contiguous()
    return F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1))


if __name__ == "__main__":
    torch.manual_seed(1234)
    cfg = NeoXConfig()
    model = MiniNeoX(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    data = torch.randint(0, cfg.vocab_size, (8, cfg.max_positions))
    for step in range(3):
        logits = model(data)
        loss = lm_loss(logits, data)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        print(f"step {step} | loss {loss.item():.4f}")
