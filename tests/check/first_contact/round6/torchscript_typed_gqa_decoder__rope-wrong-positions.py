"""A small Llama-style decoder written so that `torch.jit.script` accepts it.

Conventions (kept TorchScript-friendly on purpose):
  * every forward is fully type-annotated; masks are `Optional[Tensor]`
  * the KV cache is passed in and returned as `List[Tuple[Tensor, Tensor]]` (no dict state on self)
  * additive float masks: 0 = attend, -inf (or a big negative) = blocked
  * RMSNorm (eps inside the rsqrt), SwiGLU MLP, grouped-query attention (n_kv_heads < n_heads),
    rotary embeddings with Meta's pairing: dims (0, 1), (2, 3), ... rotate together
"""
import math
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class ModelArgs:
    def __init__(
        self,
        vocab_size: int = 128,
        dim: int = 96,
        n_layers: int = 3,
        n_heads: int = 6,
        n_kv_heads: int = 2,
        hidden_dim: int = 256,
        max_seq_len: int = 64,
        norm_eps: float = 1e-5,
        rope_theta: float = 10000.0,
    ):
        self.vocab_size = vocab_size
        self.dim = dim
        self.n_layers = n_layers
        self.n_heads = n_heads
        self.n_kv_heads = n_kv_heads
        self.hidden_dim = hidden_dim
        self.max_seq_len = max_seq_len
        self.norm_eps = norm_eps
        self.rope_theta = rope_theta


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        norm = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return norm * self.weight


def rope_tables(head_dim: int, max_len: int, theta: float) -> Tuple[Tensor, Tensor]:
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))  # (head_dim/2,)
    t = torch.arange(max_len).float()
    angles = torch.outer(t, freqs)  # (max_len, head_dim/2)
    return angles.cos(), angles.sin()


def apply_rotary(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    # x: (B, H, T, head_dim); cos/sin: (T, head_dim/2)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    out1 = x1 * cos - x2 * sin
    out2 = x1 * sin + x2 * cos
    return torch.stack([out1, out2], dim=-1).flatten(-2)


def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    # (B, n_kv_heads, S, hd) -> (B, n_kv_heads * n_rep, S, hd); query heads 0..n_rep-1 share kv head 0, ...
    if n_rep == 1:
        return x
    return torch.repeat_interleave(x, n_rep, dim=1)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_heads = args.n_heads
        self.n_kv_heads = args.n_kv_heads
        self.n_rep = args.n_heads // args.n_kv_heads
        self.head_dim = args.dim // args.n_heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, args.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, args.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)

    def forward(
        self,
        x: Tensor,
        cos: Tensor,
        sin: Tensor,
        mask: Optional[Tensor],
        cache: Optional[Tuple[Tensor, Tensor]],
    ) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
        bsz, seqlen, _ = x.shape
        q = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(bsz, seqlen, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q = apply_rotary(q, cos, sin)
        k = apply_rotary(k, cos, sin)

        if cache is not None:
            k = torch.cat([cache[0], k], dim=2)
            v = torch.cat([cache[1], v], dim=2)
        new_cache = (k, v)

        keys = repeat_kv(k, self.n_rep)
        values = repeat_kv(v, self.n_rep)
        scores = torch.matmul(q, keys.transpose(2, 3)) * self.scale  # (B, H, T, S)
        if mask is not None:
            scores = scores + mask
        probs = F.softmax(scores.float(), dim=-1).type_as(q)
        out = torch.matmul(probs, values)
        out = out.transpose(1, 2).contiguous().view(bsz, seqlen, -1)
        return self.wo(out), new_cache


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)  # gate
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)  # up
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)  # down

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args.dim, args.hidden_dim)
        self.attention_norm = RMSNorm(args.dim, args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)

    def forward(
        self,
        x: Tensor,
        cos: Tensor,
        sin: Tensor,
        mask: Optional[Tensor],
        cache: Optional[Tuple[Tensor, Tensor]],
    ) -> Tuple[Tensor, Tuple[Tensor, Tensor]]:
        a, new_cache = self.attention(self.attention_norm(x), cos, sin, mask, cache)
        h = x + a
        out = h + self.feed_forward(self.ffn_norm(h))
        return out, new_cache


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.n_layers = args.n_layers
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList([Block(args) for _ in range(args.n_layers)])
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        cos, sin = rope_tables(args.dim // args.n_heads, args.max_seq_len * 2, args.rope_theta)
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.apply(self._init_weights)

    def _init_weights(self, module: nn.Module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(
        self,
        tokens: Tensor,
        attention_mask: Optional[Tensor] = None,
        caches: Optional[List[Tuple[Tensor, Tensor]]] = None,
        start_pos: int = 0,
    ) -> Tuple[Tensor, List[Tuple[Tensor, Tensor]]]:
        # tokens: (B, T); attention_mask: (B, start_pos + T) with 1 = real token, 0 = pad
        bsz, seqlen = tokens.shape
        h = self.tok_embeddings(tokens)
        positions = torch.arange(0, seqlen, device=tokens.device)
        cos = self.rope_cos[positions]
        sin = self.rope_sin[positions]

        mask: Optional[Tensor] = None
        if seqlen > 1:
            causal = torch.full((seqlen, seqlen), float("-inf"), device=tokens.device).triu(1)
            if start_pos > 0:
                causal = torch.cat([torch.zeros(seqlen, start_pos, device=tokens.device), causal], dim=1)
            mask = causal[None, None, :, :]
        if attention_mask is not None:
            pad = (1.0 - attention_mask.to(h.dtype)) * -1e9  # (B, S)
            pad = pad[:, None, None, :]
            mask = pad if mask is None else mask + pad

        new_caches: List[Tuple[Tensor, Tensor]] = []
        for i, layer in enumerate(self.layers):
            layer_cache: Optional[Tuple[Tensor, Tensor]] = None
            if caches is not None:
                layer_cache = caches[i]
            h, c = layer(h, cos, sin, mask, layer_cache)
            new_caches.append(c)
        h = self.norm(h)
        return self.output(h).float(), new_caches


def lm_loss(logits: Tensor, tokens: Tensor, attention_mask: Tensor) -> Tensor:
    targets = tokens[:, 1:].masked_fill(attention_mask[:, 1:] == 0, -100)
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-100)


@torch.no_grad()
def greedy(model: nn.Module, prompt: Tensor, steps: int) -> Tensor:
    logits, caches = model(prompt)
    out = [prompt]
    pos = prompt.size(1)
    nxt = logits[:, -1].argmax(-1, keepdim=True)
    for _ in range(steps):
        out.append(nxt)
        logits, caches = model(nxt, None, caches, pos)
        pos += 1
        nxt = logits[:, -1].argmax(-1, keepdim=True)
    return torch.cat(out, dim=1)


if __name__ == "__main__":
    torch.manual_seed(0)
    args = ModelArgs()
    model = Transformer(args)
    scripted = torch.jit.script(model)

    # right-padded batch: lengths 12, 9, 5
    lengths = [12, 9, 5]
    tokens = torch.zeros(3, 12, dtype=torch.long)
    attn = torch.zeros(3, 12, dtype=torch.long)
    for b, n in enumerate(lengths):
        tokens[b, :n] = torch.randint(1, args.vocab_size, (n,))
        attn[b, :n] = 1

    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(4):
        logits, _ = scripted(tokens, attn)
        loss = lm_loss(logits, tokens, attn)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")

    model.eval()
    print("generated:", greedy(scripted, tokens[:2, :5], steps=6).tolist())
