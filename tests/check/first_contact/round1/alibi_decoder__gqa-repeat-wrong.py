#!/usr/bin/env python
"""Tiny decoder-only LM: ALiBi (no position embeddings), RMSNorm, SwiGLU,
grouped-query attention and a KV cache for generation.

    python alibi_decoder.py --steps 10
"""
import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def get_alibi_slopes(n_heads: int) -> torch.Tensor:
    # geometric sequence starting at 2^(-8/n), ratio 2^(-8/n)  (n a power of two)
    start = 2 ** (-8.0 / n_heads)
    return torch.tensor([start ** (i + 1) for i in range(n_heads)])


def alibi_causal_bias(slopes: torch.Tensor, q_len: int, k_len: int, offset: int = 0) -> torch.Tensor:
    """(n_heads, q_len, k_len) float bias: -slope * distance for past keys, -inf for future keys.
    `offset` = number of cached positions before the first query."""
    q_pos = torch.arange(offset, offset + q_len)[:, None]
    k_pos = torch.arange(k_len)[None, :]
    rel = (k_pos - q_pos).float()  # <= 0 for keys we may attend to
    bias = slopes[:, None, None] * rel[None]
    causal = torch.zeros(q_len, k_len).masked_fill(k_pos > q_pos, float("-inf"))
    return bias + causal[None]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class SwiGLU(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)  # gate
        self.w3 = nn.Linear(dim, hidden, bias=False)  # up
        self.w2 = nn.Linear(hidden, dim, bias=False)  # down

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class GQAttention(nn.Module):
    def __init__(self, dim: int, n_heads: int, n_kv_heads: int):
        super().__init__()
        assert n_heads % n_kv_heads == 0
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.n_rep = n_heads // n_kv_heads
        self.head_dim = dim // n_heads
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)
        self.register_buffer("slopes", get_alibi_slopes(n_heads), persistent=False)

    def forward(self, x, cache=None):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(B, T, self.n_kv_heads, self.head_dim).transpose(1, 2)

        past = 0
        if cache is not None:
            if "k" in cache:
                past = cache["k"].size(2)
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v

        # each kv head serves n_rep consecutive query heads
        k = k.repeat(1, self.n_rep, 1, 1)
        v = v.repeat(1, self.n_rep, 1, 1)

        bias_plus_causal = alibi_causal_bias(self.slopes, T, k.size(2), offset=past).to(q.dtype)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias_plus_causal)
        out = out.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)
        return self.wo(out)


class Block(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads, ffn_hidden):
        super().__init__()
        self.attn_norm = RMSNorm(dim)
        self.attn = GQAttention(dim, n_heads, n_kv_heads)
        self.ffn_norm = RMSNorm(dim)
        self.ffn = SwiGLU(dim, ffn_hidden)

    def forward(self, x, cache=None):
        x = x + self.attn(self.attn_norm(x), cache)
        x = x + self.ffn(self.ffn_norm(x))
        return x


class AlibiLM(nn.Module):
    def __init__(self, vocab_size, dim, n_layers, n_heads, n_kv_heads, ffn_hidden):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, dim)
        nn.init.normal_(self.tok_emb.weight, std=0.02)
        self.layers = nn.ModuleList([Block(dim, n_heads, n_kv_heads, ffn_hidden) for _ in range(n_layers)])
        self.norm = RMSNorm(dim)
        self.out = nn.Linear(dim, vocab_size, bias=False)

    def forward(self, tokens, caches=None):
        h = self.tok_emb(tokens)
        for i, layer in enumerate(self.layers):
            h = layer(h, None if caches is None else caches[i])
        return self.out(self.norm(h))

    @torch.no_grad()
    def generate(self, prompt, max_new_tokens):
        caches = [dict() for _ in self.layers]
        logits = self(prompt, caches)
        out = prompt
        for _ in range(max_new_tokens):
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            out = torch.cat([out, nxt], dim=1)
            logits = self(nxt, caches)
        return out


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument("--vocab_size", type=int, default=64)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--n_layers", type=int, default=2)
    p.add_argument("--n_heads", type=int, default=4)
    p.add_argument("--n_kv_heads", type=int, default=2)
    p.add_argument("--ffn_hidden", type=int, default=64)
    p.add_argument("--seq_len", type=int, default=16)
    p.add_argument("--batch_size", type=int, default=4)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--lr", type=float, default=1e-3)
    args = p.parse_args(argv)

    torch.manual_seed(0)
    model = AlibiLM(args.vocab_size, args.dim, args.n_layers, args.n_heads, args.n_kv_heads, args.ffn_hidden)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    for step in range(args.steps):
        x = torch.randint(0, args.vocab_size, (args.batch_size, args.seq_len + 1))
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, args.vocab_size), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step}: loss {loss.item():.3f}")

    model.eval()
    prompt = torch.randint(0, args.vocab_size, (1, 5))
    print(model.generate(prompt, 6).tolist())


if __name__ == "__main__":
    main()
