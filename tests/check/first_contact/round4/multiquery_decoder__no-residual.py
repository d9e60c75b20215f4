"""
Decoder-only LM with multi-query attention (Shazeer 2019): every query head has
its own projection, but there is a single K head and a single V head shared by all
of them. Pre-LN blocks, fixed sinusoidal positions, and an explicit KV cache
(a plain dict) so that generate() only feeds the newest token after the prompt.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


def sinusoid_table(max_len, d_model):
    pos = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(max_len, d_model)
    table[:, 0::2] = torch.sin(pos * div)
    table[:, 1::2] = torch.cos(pos * div)
    return table


def causal_mask(t_new, past_len, device):
    # query i sits at absolute position past_len + i and may see keys 0 .. past_len + i
    return torch.ones(t_new, past_len + t_new, dtype=torch.bool, device=device).tril(diagonal=past_len)


class MultiQueryAttention(nn.Module):
    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.q = nn.Linear(d_model, d_model, bias=False)
        self.kv = nn.Linear(d_model, 2 * self.d_head, bias=False)   # one shared K and V head
        self.o = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x, cache=None, layer_key=None):
        B, T, _ = x.shape
        q = self.q(x).view(B, T, self.n_heads, self.d_head).transpose(1, 2)   # B H T dh
        k, v = self.kv(x).split(self.d_head, dim=-1)                           # B T dh each

        past = 0
        if cache is not None:
            if layer_key in cache:
                pk, pv = cache[layer_key]
                past = pk.size(1)
                k = torch.cat([pk, k], dim=1)
                v = torch.cat([pv, v], dim=1)
            cache[layer_key] = (k, v)

        S = k.size(1)
        k = k.unsqueeze(1).expand(B, self.n_heads, S, self.d_head)   # broadcast, no copy
        v = v.unsqueeze(1).expand(B, self.n_heads, S, self.d_head)

        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.d_head)       # B H T S
        att = att.masked_fill(~causal_mask(T, past, x.device), float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, -1)
        return self.o(y)


class Block(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = MultiQueryAttention(d_model, n_heads)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.GELU(), nn.Linear(d_ff, d_model))

    def forward(self, x, cache=None, layer_key=None):
        x = x + self.attn(self.norm1(x), cache, layer_key)
        x = self.ff(self.norm2(x))
        return x


class MQADecoder(nn.Module):
    def __init__(self, vocab_size=64, d_model=32, n_heads=4, d_ff=128, n_layers=2, max_len=32):
        super().__init__()
        self.max_len = max_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.register_buffer("pos_table", sinusoid_table(max_len, d_model))
        self.blocks = nn.ModuleList([Block(d_model, n_heads, d_ff) for _ in range(n_layers)])
        self.norm_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, idx, cache=None):
        B, T = idx.shape
        start = 0
        if cache is not None:
            start = cache.get("pos", 0)
            cache["pos"] = start + T
        x = self.embed(idx) + self.pos_table[start:start + T]
        for i, blk in enumerate(self.blocks):
            x = blk(x, cache, f"layer{i}")
        return self.head(self.norm_f(x))

    @torch.no_grad()
    def generate(self, idx, max_new_tokens):
        cache = {}
        logits = self(idx, cache)              # prefill with the whole prompt
        for _ in range(max_new_tokens):
            nxt = logits[:, -1].argmax(dim=-1, keepdim=True)
            idx = torch.cat([idx, nxt], dim=1)
            logits = self(nxt, cache)          # only the new token, K/V come from the cache
        return idx


torch.manual_seed(0)
model = MQADecoder().eval()
prompt = torch.randint(0, 64, (2, 6))
out = model.generate(prompt, 5)
print("prompt   :", prompt.tolist())
print("generated:", out[:, 6:].tolist())

# sanity check: cached decoding must agree with a full forward pass
with torch.no_grad():
    full = model(out[:, :-1])
    print("greedy picks match full pass:", torch.equal(full[:, 5:].argmax(-1), out[:, 6:]))
