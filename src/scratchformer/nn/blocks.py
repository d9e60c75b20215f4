"""Encoder and decoder blocks (Pre-LN or Post-LN), the stacks, and the encoder-decoder.

Post-LN (the paper, `norm_first=False`):  x = norm(x + dropout(sublayer(x)))
Pre-LN  (GPT-2 and most modern models):   x = x + dropout(sublayer(norm(x)))
Dropout sits where the paper puts it: on each sublayer's output before the residual add,
inside the FFN after the activation, and (optionally) on the attention probabilities.

Ablations (`TransformerConfig.ablate_*`, off by default, for experiments only): without the
residual connection `add(x, y)` is `y` (Post-LN: x = norm(dropout(sublayer(x))); Pre-LN:
x = dropout(sublayer(norm(x)))); without norms every `norm` is the identity; without the
scaling the attention scores are Q Kᵀ instead of Q Kᵀ/√d_k.

Masks use the same two names at every level (see `masks.py`): `padding_mask` `(B, Tk)` (True =
real token) and `attn_mask` `(Tq, Tk)` / `(B, 1|H, Tq, Tk)` (True = may attend). Blocks take
them, and everything else, as keyword arguments. The stacks' older positional shorthand
(`Encoder(x, mask)`, `Decoder(..., self_mask=...)`: a 2-D mask is a padding mask, any other an
attention mask) is converted once, at the stack's entrance, by `masks.split_mask`.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from .cache import KVCache, RollingKVCache
from .config import TransformerConfig
from .ffn import FeedForward
from .masks import split_mask
from .multihead import MultiHeadAttention
from .norm import make_norm
from .packing import PackedTokens
from .position import ALiBi, RotaryEmbedding


def _attention(cfg: TransformerConfig, self_attention: bool = True) -> MultiHeadAttention:
    """`cfg.window` restricts self-attention only; cross-attention sees the whole memory."""
    window = cfg.window if self_attention else None
    return MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.attn_dropout, cfg.bias,
                              window=window, window_sink=cfg.window_sink, window_impl=cfg.window_impl,
                              scale=1.0 if cfg.ablate_scale else None)


def _norm(cfg: TransformerConfig) -> nn.Module:
    return nn.Identity() if cfg.ablate_norm else make_norm(cfg.norm, cfg.d_model, cfg.norm_eps, cfg.bias)


class _Block(nn.Module):
    """What both blocks share: the residual connection `add(x, y) = x + y` (y = the sublayer's
    output), which the `ablate_residual` ablation turns into `y` alone."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.norm_first = cfg.norm_first
        self.residual = not cfg.ablate_residual

    def add(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x + y if self.residual else y

    def drop(self, dropout: nn.Dropout, x: torch.Tensor) -> torch.Tensor:
        """Dropout in training only: in eval it is the identity, so not even called (a module
        call per sublayer was measurable at small inputs)."""
        return dropout(x) if self.training and dropout.p > 0 else x


class EncoderBlock(_Block):
    def __init__(self, cfg: TransformerConfig):
        super().__init__(cfg)
        self.self_attn = _attention(cfg)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation, cfg.dropout, cfg.bias)
        self.norm1 = _norm(cfg)
        self.norm2 = _norm(cfg)
        self.dropout1 = nn.Dropout(cfg.dropout)
        self.dropout2 = nn.Dropout(cfg.dropout)

    def forward(self, x, *, padding_mask=None, attn_mask=None, is_causal=False, rope=None,
                alibi=None, cache=None, need_weights=False, packed=None):
        """x: `(B, T, C)` -> `((B, T, C), weights (B, H, T, T) or None)`; with `packed`
        (a `PackedTokens`), x and the output are the real tokens only, `(1, N, C)`."""
        def attend(h):
            out, w = self.self_attn(h, padding_mask=padding_mask, attn_mask=attn_mask,
                                    is_causal=is_causal, rope=rope, alibi=alibi, cache=cache,
                                    need_weights=need_weights, packed=packed)
            return self.drop(self.dropout1, out), w

        if self.norm_first:
            a, weights = attend(self.norm1(x))
            x = self.add(x, a)
            x = self.add(x, self.drop(self.dropout2, self.ffn(self.norm2(x))))
        else:
            a, weights = attend(x)
            x = self.norm1(self.add(x, a))
            x = self.norm2(self.add(x, self.drop(self.dropout2, self.ffn(x))))
        return x, weights


class DecoderBlock(_Block):
    """Masked self-attention, cross-attention over the encoder memory, feed-forward."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__(cfg)
        self.self_attn = _attention(cfg)
        self.cross_attn = _attention(cfg, self_attention=False)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation, cfg.dropout, cfg.bias)
        self.norm1 = _norm(cfg)
        self.norm2 = _norm(cfg)
        self.norm3 = _norm(cfg)
        self.dropout1 = nn.Dropout(cfg.dropout)
        self.dropout2 = nn.Dropout(cfg.dropout)
        self.dropout3 = nn.Dropout(cfg.dropout)

    def forward(self, x, memory, *, padding_mask=None, attn_mask=None, is_causal=True,
                memory_padding_mask=None, rope=None, alibi=None, self_cache=None,
                cross_cache=None, need_weights=False):
        """x: `(B, T, C)`, memory: `(B, S, C)` -> `((B, T, C), (self_w, cross_w))`.
        `padding_mask`/`attn_mask` are the self-attention's masks, `memory_padding_mask`
        `(B, S)` the cross-attention's."""
        def self_block(h):
            out, w = self.self_attn(h, padding_mask=padding_mask, attn_mask=attn_mask,
                                    is_causal=is_causal, rope=rope, alibi=alibi, cache=self_cache,
                                    need_weights=need_weights)
            return self.drop(self.dropout1, out), w

        def cross_block(h):
            out, w = self.cross_attn(h, context=memory, padding_mask=memory_padding_mask,
                                     cache=cross_cache, need_weights=need_weights)
            return self.drop(self.dropout2, out), w

        if self.norm_first:
            a, self_w = self_block(self.norm1(x))
            x = self.add(x, a)
            c, cross_w = cross_block(self.norm2(x))
            x = self.add(x, c)
            x = self.add(x, self.drop(self.dropout3, self.ffn(self.norm3(x))))
        else:
            a, self_w = self_block(x)
            x = self.norm1(self.add(x, a))
            c, cross_w = cross_block(x)
            x = self.norm2(self.add(x, c))
            x = self.norm3(self.add(x, self.drop(self.dropout3, self.ffn(x))))
        return x, (self_w, cross_w)


class _Stack(nn.Module):
    """What encoder and decoder stacks share: relative positions, final norm, checkpointing."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        self.rope = RotaryEmbedding(cfg.head_dim, cfg.rope_base) if cfg.position == "rope" else None
        self.alibi = ALiBi(cfg.n_heads) if cfg.position == "alibi" else None
        self.norm = _norm(cfg) if cfg.use_final_norm else None
        self.gradient_checkpointing = False

    def set_gradient_checkpointing(self, enabled: bool = True) -> None:
        """Recompute each block's activations in backward: less memory, ~30% more time."""
        self.gradient_checkpointing = enabled

    def set_window(self, window: int | None, sink: int = 0, impl: str | None = None) -> None:
        """Change the self-attention window of every layer (None = full attention), e.g. to
        decode a model trained with full attention StreamingLLM-style (window + sinks). The
        config keeps what the model was built with; caches made afterwards follow the new one."""
        for layer in self.layers:
            attn = layer.self_attn
            attn.set_window(window, sink, attn.window_impl if impl is None else impl)

    def _new_self_cache(self, capacity: int | None = None):
        """A `RollingKVCache` under a window (constant memory), else a `KVCache` (preallocated
        to `capacity` positions when the longest decode is known, else growing)."""
        attn = self.layers[0].self_attn if len(self.layers) else None
        if attn is None or attn.window is None:
            return KVCache(capacity)
        return RollingKVCache(attn.window, attn.window_sink)

    def _run(self, layer, *inputs, **kwargs):
        """`layer(*inputs, **kwargs)`, recomputed in backward under gradient checkpointing."""
        if self.gradient_checkpointing and self.training and torch.is_grad_enabled():
            return checkpoint(layer, *inputs, use_reentrant=False, **kwargs)
        return layer(*inputs, **kwargs)


class Encoder(_Stack):
    """A stack of `EncoderBlock`s over already-embedded inputs.

    Masks: `padding_mask` `(B, T)` (True = real token) and/or `attn_mask` `(T, T)` /
    `(B, 1|H, T, T)`; the positional `mask` is the shorthand of `split_mask` (2-D = padding).
    `is_causal=True` makes it a decoder-only (GPT) stack; pass a `KVCache` per layer in
    `caches` for incremental decoding.
    """

    def __init__(self, cfg: TransformerConfig):
        super().__init__(cfg)
        self.layers = nn.ModuleList(EncoderBlock(cfg) for _ in range(cfg.n_layers))
        self.pack_padding = True

    def set_padding_packing(self, enabled: bool = True) -> None:
        """Padding packing (on by default): with a `(B, T)` padding mask that has padding,
        norms, FFN and projections run on the real tokens only (attention still sees
        `(B, T)`), faster by about the padding fraction, in training and inference. The
        output's padded rows are then zeros (as in torch's nested-tensor fast path) instead
        of the values the layers would compute there; real rows are the same. Turn it off
        to get those padded-row values (e.g. to compare every position with another model)."""
        self.pack_padding = enabled

    def new_caches(self, capacity: int | None = None) -> list:
        """One cache per layer for incremental decoding with `is_causal=True`: a
        `RollingKVCache` (the last `window` positions + sinks) when the attention is windowed,
        else a `KVCache` (preallocated to `capacity` positions when given)."""
        return [self._new_self_cache(capacity) for _ in self.layers]

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, is_causal: bool = False,
                caches: list[KVCache] | None = None, need_weights: bool = False, *,
                padding_mask: torch.Tensor | None = None, attn_mask: torch.Tensor | None = None):
        """x: `(B, T, C)` -> `(B, T, C)`, or `((B, T, C), [weights per layer])` with
        `need_weights=True`."""
        padding_mask, attn_mask = split_mask(mask, padding_mask, attn_mask)
        packed = None
        if self.pack_padding and padding_mask is not None and not caches and not bool(padding_mask.all()):
            packed = PackedTokens(padding_mask)
            x = packed.pack(x)  # (1, N, C)
        all_weights = []
        for i, layer in enumerate(self.layers):
            x, w = self._run(layer, x, padding_mask=padding_mask, attn_mask=attn_mask, is_causal=is_causal,
                             rope=self.rope, alibi=self.alibi, cache=caches[i] if caches else None,
                             need_weights=need_weights, packed=packed)
            all_weights.append(w)
        if self.norm is not None:
            x = self.norm(x)
        if packed is not None:
            x = packed.unpack(x)  # (B, T, C)
        return (x, all_weights) if need_weights else x


class DecoderCache:
    """Per-layer caches of a decoder: self-attention keys/values grow one step at a time,
    cross-attention keys/values are computed once from the encoder memory."""

    def __init__(self, n_layers: int, new_self_cache=KVCache):
        self.self_attn = [new_self_cache() for _ in range(n_layers)]
        self.cross_attn = [KVCache() for _ in range(n_layers)]

    @property
    def length(self) -> int:
        return self.self_attn[0].length if self.self_attn else 0

    def reorder(self, index: torch.Tensor) -> None:
        for c in self.self_attn + self.cross_attn:
            c.reorder(index)


class Decoder(_Stack):
    """A stack of `DecoderBlock`s (causal self-attention + cross-attention)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__(cfg)
        self.layers = nn.ModuleList(DecoderBlock(cfg) for _ in range(cfg.decoder_layers))

    def new_cache(self, capacity: int | None = None) -> DecoderCache:
        """Caches for incremental decoding; `capacity`: the most target positions a decode
        can reach (the self-attention buffers are then allocated once)."""
        return DecoderCache(len(self.layers), lambda: self._new_self_cache(capacity))

    def forward(self, x, memory, self_mask=None, memory_mask=None, is_causal=True,
                cache: DecoderCache | None = None, need_weights=False, *,
                padding_mask=None, attn_mask=None):
        """
        x: `(B, T, C)` embedded targets; memory: `(B, S, C)` encoder output.
        padding_mask: `(B, T_total)` target padding (True = real); attn_mask: the
            self-attention's `(T, T_total)` / `(B, 1|H, T, T_total)` mask; `self_mask` is
            their shorthand (`split_mask`: 2-D = padding).
        memory_mask: `(B, S)` source padding mask (True = real).
        cache: a `DecoderCache` for incremental decoding (T new positions per call).
        Returns `(B, T, C)`, or with `need_weights` also `[(self_w, cross_w) per layer]`.
        """
        padding_mask, attn_mask = split_mask(self_mask, padding_mask, attn_mask)
        all_weights = []
        for i, layer in enumerate(self.layers):
            x, w = self._run(layer, x, memory, padding_mask=padding_mask, attn_mask=attn_mask,
                             is_causal=is_causal, memory_padding_mask=memory_mask, rope=self.rope,
                             alibi=self.alibi, self_cache=cache.self_attn[i] if cache is not None else None,
                             cross_cache=cache.cross_attn[i] if cache is not None else None,
                             need_weights=need_weights)
            all_weights.append(w)
        if self.norm is not None:
            x = self.norm(x)
        return (x, all_weights) if need_weights else x


class Transformer(nn.Module):
    """The encoder-decoder of "Attention Is All You Need", over embedded inputs
    (embeddings and output projection belong to the model in `scratchformer.models`)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)

    def forward(self, src: torch.Tensor, tgt: torch.Tensor, src_mask: torch.Tensor | None = None,
                tgt_mask: torch.Tensor | None = None, need_weights: bool = False):
        """src: `(B, S, C)`, tgt: `(B, T, C)`; `src_mask`/`tgt_mask` are the `(B, S)` / `(B, T)`
        padding masks (True = real) of the encoder and of the decoder's self-attention
        (`src_mask` is also the cross-attention's). The decoder's self-attention is causal.
        Returns `(B, T, C)`."""
        memory = self.encoder(src, src_mask)
        return self.decoder(tgt, memory, self_mask=tgt_mask, memory_mask=src_mask,
                            need_weights=need_weights)

    def set_gradient_checkpointing(self, enabled: bool = True) -> None:
        self.encoder.set_gradient_checkpointing(enabled)
        self.decoder.set_gradient_checkpointing(enabled)
