"""Tiny LLaMA-style decoder-only model.

Notes to self:
- `LayerNorm` here is the LLaMA flavour: RMS normalisation, no mean subtraction,
  only a learnable scale (no bias). I kept the name LayerNorm because that is what
  the rest of my code base imports.
- Rotary embeddings on interleaved pairs (x0,x1), (x2,x3), ... as in the original
  RoFormer / Meta reference code, done with real cos/sin instead of complex numbers.
- Grouped-query attention: n_kv_heads <= n_heads, K/V heads are shared by groups
  of consecutive query heads.
- KV cache: every Attention.forward takes an optional (k, v) cache and returns
  the updated one.
"""
from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ModelArgs:
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    vocab_size: int = 96
    hidden_dim: int = 172
    norm_eps: float = 1e-6
    max_seq_len: int = 64
    rope_theta: float = 10000.0


class LayerNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        ms = x.pow(2).mean(-1, keepdim=True)
        return x * torch.rsqrt(ms + self.eps) * self.weight


def precompute_rope(head_dim: int, max_len: int, theta: float = 10000.0):
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
    t = torch.arange(max_len).float()
    freqs = torch.outer(t, inv_freq)          # (max_len, head_dim/2)
    return freqs.cos(), freqs.sin()


def apply_rope(x, cos, sin):
    # x: (B, T, H, head_dim), cos/sin: (T, head_dim/2)
    x_even = x[..., ::2]
    x_odd = x[..., 1::2]
    cos = cos[None, :, None, :]
    sin = sin[None, :, None, :]
    rot_even = x_even * cos - x_odd * sin
    rot_odd = x_even * sin + x_odd * cos
    return torch.stack([rot_even, rot_odd], dim=-1).flatten(-2).type_as(x)


KV = Tuple[torch.Tensor, torch.Tensor]


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_heads = args.n_heads
        self.n_kv_heads = args.n_kv_heads
        self.head_dim = args.dim // args.n_heads
        self.n_rep = self.n_heads // self.n_kv_heads
        self.wq = nn.Linear(args.dim, self.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, self.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(self.n_heads * self.head_dim, args.dim, bias=False)

    def forward(self, x, cos, sin, cache: Optional[KV] = None):
        B, T, _ = x.shape
        past = 0 if cache is None else cache[0].shape[1]

        q = self.wq(x).view(B, T, self.n_heads, self.head_dim)
        k = self.wk(x).view(B, T, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(B, T, self.n_kv_heads, self.head_dim)

        # new tokens sit at positions past, past+1, ..., past+T-1
        q = apply_rope(q, cos[past:past + T], sin[past:past + T])
        k = apply_rope(k, cos[past:past + T], sin[past:past + T])

        if cache is not None:
            k = torch.cat([cache[0], k], dim=1)
            v = torch.cat([cache[1], v], dim=1)
        new_cache = (k, v)
        S = k.shape[1]

        # share each kv head with n_rep consecutive query heads
        k = k.repeat(1, 1, self.n_rep, 1)
        v = v.repeat(1, 1, self.n_rep, 1)

        q, k, v = (t.transpose(1, 2) for t in (q, k, v))    # (B, H, len, hd)
        scores = (q @ k.transpose(-2, -1)) / (self.head_dim ** 0.5)
        # query i (absolute position past+i) may see keys 0..past+i
        mask = torch.full((T, S), float("-inf"), device=x.device).triu(past + 1)
        scores = scores + mask
        probs = F.softmax(scores.float(), dim=-1).type_as(q)
        out = (probs @ v).transpose(1, 2).reshape(B, T, -1)
        return self.wo(out), new_cache


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)   # gate
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)   # down
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)   # up

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args.dim, args.hidden_dim)
        self.attention_norm = LayerNorm(args.dim, eps=args.norm_eps)
        self.ffn_norm = LayerNorm(args.dim, eps=args.norm_eps)

    def forward(self, x, cos, sin, cache: Optional[KV] = None):
        a, new_cache = self.attention(self.attention_norm(x), cos, sin, cache)
        h = x + a
        out = h + self.feed_forward(self.ffn_norm(h))
        return out, new_cache


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList([TransformerBlock(args) for _ in range(args.n_layers)])
        self.norm = LayerNorm(args.dim, eps=args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        cos, sin = precompute_rope(args.dim // args.n_heads, args.max_seq_len, args.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)

    def forward(self, x, cache: Optional[List[KV]] = None):
        """x: (B, T) token ids. Returns logits (B, T, vocab) and the new cache."""
        h = self.tok_embeddings(x)
        new_cache = []
        for i, layer in enumerate(self.layers):
            h, c = layer(h, self.rope_cos, self.rope_sin, None if cache is None else cache[i])
            new_cache.append(c)
        h = self.norm(h)
        return self.output(h).float(), new_cache

    @torch.no_grad()
    def generate(self, prompt, max_new_tokens: int, temperature: float = 1.0):
        logits, cache = self(prompt)
        out = [prompt]
        for _ in range(max_new_tokens):
            probs = F.softmax(logits[:, -1] / temperature, dim=-1)
            nxt = torch.multinomial(probs, 1)
            out.append(nxt)
            logits, cache = self(nxt, cache)
        return torch.cat(out, dim=1)
