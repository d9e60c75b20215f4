"""The lean decoding step: one new position per sequence through a whole stack, with every
decision that cannot change during a decode made once, before its first step.

The readable path (`Decoder.forward` / `Encoder.forward` with caches -> blocks ->
`MultiHeadAttention` -> `scaled_dot_product_attention`) is general: at every layer of every
step it checks and merges masks, looks for fully masked rows (a host sync), builds the causal
mask, asks `onednn_blocker` which kernel to use, and calls dropout (a no-op in eval). For one
new token per sequence none of that can change between steps:

  - the causal mask of a single query over its cached keys is all True: no mask at all;
  - the source padding mask of the cross-attention is the same at every step: built once,
    `(N, 1, 1, S)`, and dropped when there is no padding; no source is empty, so no row of it
    is fully masked and nothing needs zeroing;
  - the cross-attention keys/values of the memory: projected once per source into the
    `DecoderCache`; the self-attention keys/values are written in place into a preallocated
    `KVCache` (`capacity` = the longest output);
  - beam search: the `beams` hypotheses of a sentence share its memory, so its cross-attention
    keys/values are stored once per sentence (not per hypothesis) and the K hypotheses attend
    as K queries of one `(H, K, S)` attention; reordering beams inside a sentence leaves the
    cross caches alone (only sentences that leave are dropped from them);
  - the projection kernel (oneDNN, `F.linear`, or an int8 projection): chosen once per decode
    (`fast_linear.projection`);
  - eval mode: no dropout calls.

A step keeps its activations 2-D, `(N, C)` (one position per row), so that every projection is
one `addmm` with no reshape around it. So a step is the block formulas and nothing else:

    Post-LN: x = norm1(x + W_O·attn(x W_Q, K, V)); x = norm2(x + cross(x)); x = norm3(x + ffn(x))
    Pre-LN:  x = x + W_O·attn(norm1(x) W_Q, K, V);  x = x + cross(norm2(x)); x = x + ffn(norm3(x))

`lean_blocker(stack)` says why the lean step cannot serve a stack (then the readable path
runs, as PyTorch's transformer.py says why its fast path was not taken). Tested equal to the
readable path: decoded tokens identical, logits within 1e-5 (tests/nn/test_lean.py).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .cache import KVCache
from .fast_linear import projection, row_projection
from .norm import LayerNorm, RMSNorm

__all__ = ["DecoderStep", "CausalStackStep", "lean_blocker"]


def lean_blocker(stack) -> str | None:
    """Why `DecoderStep` / `CausalStackStep` cannot run `stack` (None when they can)."""
    if stack.training:
        return "the stack is in training mode (dropout is on): the lean step is for inference"
    cfg = stack.cfg
    if cfg.ablate_residual or cfg.ablate_norm:
        return "an ablation (ablate_residual / ablate_norm) is on"
    if stack.alibi is not None:
        return "ALiBi adds a per-step distance bias: the readable path builds it"
    for layer in stack.layers:
        attns = [layer.self_attn] + ([layer.cross_attn] if hasattr(layer, "cross_attn") else [])
        for attn in attns:
            if attn.window is not None:
                return "windowed attention keeps a rolling cache: the readable path serves it"
            if attn.impl != "auto":
                return f"attention impl={attn.impl!r} was forced"
    return None


def _norm_fn(norm):
    """The norm as one functional call (no module call per step); the module itself otherwise."""
    if isinstance(norm, LayerNorm) and norm.fused:
        shape, w, b, eps = norm.weight.shape, norm.weight, norm.bias, norm.eps
        return lambda x: F.layer_norm(x, shape, w, b, eps)
    if isinstance(norm, RMSNorm) and norm.fused:
        shape, w, eps = norm.weight.shape, norm.weight, norm.eps
        return lambda x: F.rms_norm(x, shape, w, eps)
    return norm


def _activation(name: str):
    if name == "relu":
        return F.relu
    if name == "gelu":
        return F.gelu
    if name == "gelu_tanh":
        return lambda h: F.gelu(h, approximate="tanh")

    def swiglu(h):
        gate, value = h.chunk(2, dim=-1)  # (N, d_ff) each
        return F.silu(gate) * value
    return swiglu


class _Layer:
    """One block's weights and functions, looked up once (no `Module.__getattr__` per step)."""

    def __init__(self, block, sample: torch.Tensor, rows: int):
        a = block.self_attn
        self.H, self.Hkv, self.D = a.n_heads, a.n_kv_heads, a.head_dim
        self.split = a.split_sizes
        self.scale = a.scale
        self.gqa = self.Hkv != self.H
        self.qkv = projection(a.qkv_proj, sample, rows)  # [W_Q; W_K; W_V]; `rows` per step
        self.out = projection(a.out_proj, sample, rows)  # W_O
        self.norm1, self.norm2 = _norm_fn(block.norm1), _norm_fn(block.norm2)
        if hasattr(block, "cross_attn"):
            c = block.cross_attn
            self.cross_q = row_projection(c.qkv_proj, 0, c.split_sizes[0], sample, rows)  # W_Q
            # [W_K; W_V] of the memory: once per source, on all its B x S rows
            self.cross_kv = row_projection(c.qkv_proj, c.split_sizes[0], None, sample, sample.shape[:-1].numel())
            self.cross_out = projection(c.out_proj, sample, rows)
            self.cross_split = c.split_sizes[1:]
            self.cross_scale = c.scale
            self.norm3 = _norm_fn(block.norm3)
        f = block.ffn
        self.ffn_in, self.ffn_out = projection(f.linear_in, sample, rows), projection(f.linear_out, sample, rows)
        self.act = _activation(f.activation)
        self.norm_first, self.residual = block.norm_first, block.residual

    def self_attention(self, h: torch.Tensor, cache: KVCache, rope) -> torch.Tensor:
        """h `(N, C)` -> `(N, C)`: the new position attends to every cached one and itself."""
        N = h.shape[0]
        q, k, v = self.qkv(h).split(self.split, dim=-1)  # (N, H d_k), (N, Hkv d_k) x 2
        q = q.view(N, self.H, 1, self.D)  # (N, H, 1, d_k): with one position a view, no transpose
        k, v = k.view(N, self.Hkv, 1, self.D), v.view(N, self.Hkv, 1, self.D)
        if rope is not None:
            offset = cache.length
            q, k = rope.rotate(q, offset), rope.rotate(k, offset)
        k, v = cache.update(k, v)  # (N, Hkv, t, d_k), written in place
        out = F.scaled_dot_product_attention(q, k, v, scale=self.scale, enable_gqa=self.gqa)  # (N, H, 1, d_k)
        return self.out(out.view(N, self.H * self.D))  # (N, C): heads side by side

    def cross_attention(self, h: torch.Tensor, cache: KVCache, mask: torch.Tensor | None,
                        beams: int = 1) -> torch.Tensor:
        """h `(n K, C)`, the K = `beams` hypotheses of each of n sentences side by side,
        over the sentences' memory K/V `(n, Hkv, S, d_k)` -> `(n K, C)`."""
        N = h.shape[0]
        n = N // beams
        q = self.cross_q(h)  # (n K, H d_k)
        if beams == 1:
            q = q.view(N, self.H, 1, self.D)  # (N, H, 1, d_k): one position, a view
        else:  # the K hypotheses of a sentence as K queries of its one memory
            q = q.view(n, beams, self.H, self.D).transpose(1, 2)  # (n, H, K, d_k)
        k, v = cache.get()  # (n, Hkv, S, d_k): projected once per source
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.cross_scale,
                                             enable_gqa=self.gqa)  # (n, H, K, d_k)
        if beams > 1:
            out = out.transpose(1, 2)  # (n, K, H, d_k)
        return self.cross_out(out.reshape(N, self.H * self.D))  # (N, C): heads side by side

    def ffn(self, h: torch.Tensor) -> torch.Tensor:
        return self.ffn_out(self.act(self.ffn_in(h)))

    def set_memory(self, memory: torch.Tensor, cache: KVCache) -> None:
        """Cross-attention K/V of the memory `(N, S, C)`, once per source."""
        N, S, _ = memory.shape
        k, v = self.cross_kv(memory).split(self.cross_split, dim=-1)  # (N, S, Hkv d_k) each
        cache.set(k.view(N, S, self.Hkv, self.D).transpose(1, 2),
                  v.view(N, S, self.Hkv, self.D).transpose(1, 2))  # (N, Hkv, S, d_k)


class DecoderStep:
    """The lean step of a `Decoder` (encoder-decoder): `step(x (N, C)) -> (N, C)`, one new
    position per row.

    Built once per decode from the decoder, its `DecoderCache` (self-attention caches with
    `capacity`) and the memory `(n, S, C)` of n sentences with its padding mask; with
    `beams` = K the step runs n K rows, rows `i K .. i K + K - 1` hypotheses of sentence i.
    `select(index, sentences)` keeps rows `index` (beams reordered, finished sentences gone;
    a row's new place stays among its sentence's K) and, in the cross caches, the
    `sentences` (None: the same sentences as before)."""

    def __init__(self, decoder, cache, memory: torch.Tensor, memory_padding_mask: torch.Tensor | None,
                 beams: int = 1):
        self.beams = beams
        self.layers = [_Layer(b, memory, memory.shape[0] * beams) for b in decoder.layers]
        self.final_norm = None if decoder.norm is None else _norm_fn(decoder.norm)
        self.rope = decoder.rope
        self.cache = cache
        for layer, c in zip(self.layers, cache.cross_attn):
            layer.set_memory(memory, c)
        pad = memory_padding_mask
        self.mask = None if pad is None or bool(pad.all()) else pad[:, None, None, :]  # (n, 1, 1, S), once

    def select(self, index: torch.Tensor, sentences: torch.Tensor | None = None) -> None:
        for c in self.cache.self_attn:
            c.reorder(index)
        if self.beams == 1:
            sentences = index  # one row per sentence
        if sentences is not None:
            for c in self.cache.cross_attn:
                c.reorder(sentences)
            if self.mask is not None:
                self.mask = self.mask.index_select(0, sentences)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        for layer, sc, cc in zip(self.layers, self.cache.self_attn, self.cache.cross_attn):
            if layer.norm_first:
                x = x + layer.self_attention(layer.norm1(x), sc, self.rope)
                x = x + layer.cross_attention(layer.norm2(x), cc, self.mask, self.beams)
                x = x + layer.ffn(layer.norm3(x))
            else:
                x = layer.norm1(x + layer.self_attention(x, sc, self.rope))
                x = layer.norm2(x + layer.cross_attention(x, cc, self.mask, self.beams))
                x = layer.norm3(x + layer.ffn(x))
        return x if self.final_norm is None else self.final_norm(x)


class CausalStackStep:
    """The lean step of a causal `Encoder` (a GPT stack): `step(x (N, C)) -> (N, C)`
    over one `KVCache` per layer (filled by a prefill through the readable path)."""

    def __init__(self, encoder, caches: list[KVCache], sample: torch.Tensor, rows: int):
        self.layers = [_Layer(b, sample, rows) for b in encoder.layers]
        self.final_norm = None if encoder.norm is None else _norm_fn(encoder.norm)
        self.rope = encoder.rope
        self.caches = caches

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        for layer, c in zip(self.layers, self.caches):
            if layer.norm_first:
                x = x + layer.self_attention(layer.norm1(x), c, self.rope)
                x = x + layer.ffn(layer.norm2(x))
            else:
                x = layer.norm1(x + layer.self_attention(x, c, self.rope))
                x = layer.norm2(x + layer.ffn(x))
        return x if self.final_norm is None else self.final_norm(x)
