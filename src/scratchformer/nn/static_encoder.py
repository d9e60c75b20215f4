"""The static encoder: a whole `Encoder` stack at fixed shapes, as one graph for `torch.compile`
(Inductor, C++ wrapper) to turn into one C++ function, for small inputs (a served sentence).

At 1 x 32 tokens the eager encoder's time is its products, each of which repacks its weight at
every call, plus ~15 PyTorch ops a layer dispatched from Python (2-7 us each). Here the large
weights are packed once (`StaticEncoder`) and the rest is one compiled graph, which, as for the
decoding step (`static.py`), needs shapes that never change: the input is padded up to a bucket
(`static.bucket`: rows to a power of two, length to a power of two, at least 8) and the padding
masked:

    softmax(Q Kᵀ/√d_k + bias) V,  bias[n, 0, 0, j] = 0 where position j of row n is real, else -inf
    # 注意力只看真实位置：填充位置的偏置为 -inf

A row with no real position (a bucket's filler row) attends to all its positions instead, so
nothing is ever NaN (its output is dropped). Padding never changes a real position's output:
a real query's softmax gives the padded keys weight 0, and norms, projections and the FFN are
per position. The padded positions' own outputs are whatever the layers compute there (the
eager encoder's are zeros); callers read the real ones (the cross-attention masks the rest).

Each block is the eager block's formula (`blocks.py`): Post-LN `x = norm(x + sublayer(x))`,
Pre-LN `x = x + sublayer(norm(x))`, as functional calls on the block's own parameters. Tested
equal to `Encoder` (tests/nn/test_static_encoder.py). `static_encoder_blocker(encoder)` says
why an encoder cannot run here; `static_encoder_reason(encoder, rows, length)` why an input
does not (then `static_encode` runs the eager encoder).
"""
from __future__ import annotations

import time
import types
import warnings
import weakref

import torch
import torch.nn.functional as F
from torch import nn

from . import static
from .lean import lean_blocker
from .norm import LayerNorm, RMSNorm
from .static import _act, _norm, bucket, weights_digest

__all__ = ["StaticEncoder", "CompiledEncoder", "static_encoder_blocker", "static_encoder_reason",
           "static_encode", "compiled_encoder", "MAX_TOKENS"]

# Up to this many padded tokens (rows bucket x length bucket) the compiled encoder runs; above it
# the eager one. Measured (benchmarks/static_encoder.py, d256 x 4 layers, one thread, three runs on
# the shared 2-core machine at load 2.5-3.9), compiled / eager speed at the bucket's own size:
# 1 x 32 1.23-1.39x, 1 x 64 1.16-1.20x, 4 x 32 1.09-1.10x, 8 x 64 1.00-1.04x, 32 x 128 1.00-1.05x.
# From 512 tokens the products run at the library's speed either way: no gain to set against the
# padding up to a power of two (a quarter of the work, on average, for an input between buckets),
# a compile per new bucket (5-10 s here) and a packed copy of the large weights per bucket.
MAX_TOKENS = 256

_PACKED = torch.backends.mkldnn.is_available()
# A oneDNN product on a packed weight costs ~20 us a call before any arithmetic: it pays from
# weights of 256 x 1024 (1.3-1.7x faster than `F.linear` at 8-128 rows), breaks even at 256 x 256
# and loses below (0.2-0.6x at 32 x 32 .. 128 x 128); measured one product at a time, one thread.
PACK_MIN = 1 << 17  # elements


def static_encoder_blocker(encoder) -> str | None:
    """Why `StaticEncoder` cannot run `encoder` (None when it can)."""
    reason = lean_blocker(encoder)  # training mode, ablations, ALiBi, windows, a forced impl
    if reason is not None:
        return reason
    if encoder.rope is not None:
        return "rotary positions: the eager encoder serves them"
    if len(encoder.layers) == 0:
        return "the encoder has no layers"
    for layer in encoder.layers:
        a = layer.self_attn
        if a.n_kv_heads != a.n_heads:
            return "grouped-query attention: the eager encoder serves it"
        norms = (layer.norm1, layer.norm2) + ((encoder.norm,) if encoder.norm is not None else ())
        for norm in norms:
            if not (isinstance(norm, (LayerNorm, RMSNorm)) and norm.fused):
                return "an unfused norm: the eager encoder serves it"
        for _, lin in _projections(layer):
            if not isinstance(lin, nn.Linear):  # quant.Int8Linear keeps a float `weight` it does not use
                return "int8 projections: the eager encoder serves them"
    return None


def static_encoder_reason(encoder, rows: int, length: int) -> str | None:
    """Why `static_encode` runs the eager encoder for a `(rows, length)` input (None: it runs
    the compiled one)."""
    reason = static_encoder_blocker(encoder)
    if reason is not None:
        return reason
    tokens = bucket(rows) * bucket(length, 8)
    if tokens > MAX_TOKENS:
        return f"{rows} x {length} pads to {tokens} tokens, above static_encoder.MAX_TOKENS ({MAX_TOKENS})"
    if static.compiler_on() and static.compile_disabled() is not None:
        return f"the compiler failed in this process ({static.compile_disabled()})"
    return None


def _projections(layer) -> tuple:
    a, f = layer.self_attn, layer.ffn
    return (("qkv", a.qkv_proj), ("out", a.out_proj), ("ffn_in", f.linear_in), ("ffn_out", f.linear_out))


class StaticEncoder(nn.Module):
    """`forward(x (N, T, C), keep (N, T) bool, True = real)` -> `(N, T, C)`: the blocks of
    `encoder` (eval mode) at the shapes it is called with, on the encoder's own parameters (a
    submodule; nothing copied), except that large projection weights (at least `PACK_MIN`
    elements) of a float32 or bfloat16 model are also held reordered into oneDNN's blocked
    layout for `rows` = N * T rows (`mkldnn._reorder_linear_weight`, once: as many bytes again
    as those weights) and multiplied by `mkldnn._linear_pointwise`. Why: a product that reads a
    weight in its `(out, in)` layout packs it at every call (MKL's `F.linear`, and MKL's own
    packed GEMM, which Inductor's freezing picks for float32, gains less); measured at 32 rows,
    the 16 products of a d256 4-layer encoder cycled: 2.4 ms packed, 3.8 ms `F.linear`, 3.5 ms
    MKL packed. Inductor folds the packed buffers into the graph as constants (freezing) and
    fuses the FFN's ReLU into the product."""

    def __init__(self, encoder, rows: int):
        super().__init__()
        self.encoder = encoder
        a = encoder.layers[0].self_attn
        self.H, self.D = a.n_heads, a.head_dim
        self.packed: set = set()  # the (layer, projection) pairs multiplied by oneDNN
        if _PACKED and a.qkv_proj.weight.device.type == "cpu" and \
                a.qkv_proj.weight.dtype in (torch.float32, torch.bfloat16):
            for i, layer in enumerate(encoder.layers):
                for name, lin in _projections(layer):
                    if lin.weight.numel() >= PACK_MIN:
                        packed = torch.ops.mkldnn._reorder_linear_weight(lin.weight.detach(), rows)
                        self.register_buffer(f"packed_{i}_{name}", packed, persistent=False)
                        self.packed.add((i, name))

    def _linear(self, x: torch.Tensor, i: int, name: str, lin) -> torch.Tensor:
        if (i, name) not in self.packed:
            return F.linear(x, lin.weight, lin.bias)
        return torch.ops.mkldnn._linear_pointwise(x, getattr(self, f"packed_{i}_{name}"), lin.bias, "none", [], "")

    def _attention(self, i: int, layer, x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        a = layer.self_attn
        N, T, _ = x.shape
        qkv = self._linear(x, i, "qkv", a.qkv_proj)  # (N, T, 3 H d_k): [Q; K; V]
        qkv = qkv.view(N, T, 3, self.H, self.D).permute(2, 0, 3, 1, 4)  # (3, N, H, T, d_k)
        q, k, v = qkv.unbind(0)  # (N, H, T, d_k) each
        scale = a.scale if a.scale is not None else self.D ** -0.5
        # written out (two batched products and a softmax Inductor fuses with the bias): as fast
        # as scaled_dot_product_attention here at 1 x 32, and the equation as it reads
        scores = (q @ k.transpose(-2, -1)) * scale + bias  # (N, H, T, T)
        out = torch.softmax(scores, dim=-1) @ v  # (N, H, T, d_k)
        out = out.transpose(1, 2).reshape(N, T, self.H * self.D)  # (N, T, C): heads side by side
        return self._linear(out, i, "out", a.out_proj)

    def _ffn(self, i: int, layer, x: torch.Tensor) -> torch.Tensor:
        f = layer.ffn
        h = _act(f.activation, self._linear(x, i, "ffn_in", f.linear_in))  # (N, T, d_ff)
        return self._linear(h, i, "ffn_out", f.linear_out)

    def forward(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        # a row without a real position attends to all of them: finite, and dropped by the caller
        keep = keep | ~keep.any(-1, keepdim=True)  # (N, T)
        zero = torch.zeros((), dtype=x.dtype, device=x.device)
        bias = torch.where(keep, zero, float("-inf"))[:, None, None, :]  # (N, 1, 1, T)
        for i, layer in enumerate(self.encoder.layers):
            if layer.norm_first:
                x = x + self._attention(i, layer, _norm(layer.norm1, x), bias)
                x = x + self._ffn(i, layer, _norm(layer.norm2, x))
            else:
                x = _norm(layer.norm1, x + self._attention(i, layer, x, bias))
                x = _norm(layer.norm2, x + self._ffn(i, layer, x))
        if self.encoder.norm is not None:
            x = _norm(self.encoder.norm, x)
        return x


class CompiledEncoder:
    """A `StaticEncoder` under `torch.compile` (Inductor, static shapes, the C++ wrapper,
    freezing: the module's parameters and packed weights are folded into the graph as
    constants), for one shape bucket. `compile_seconds`: the wall time of its first call (the
    compile), None before it.

    Freezing is switched on around each call (`torch._inductor.config.freezing`): passed in
    `torch.compile(options=...)` it did not take here (torch 2.13: the weights stayed graph
    inputs, and MKL repacked them at every product), and a recompile (a guard that fails on a
    later call) must see it too. `config.patch` costs ~40 us a call: the flag is set directly."""

    def __init__(self, module: StaticEncoder):
        import torch._inductor.config as inductor_config

        self.module = module
        self.compiled = static.compiler_on()
        if self.compiled:
            # Dynamo keeps compiled graphs per code object, and the guards of one made for another
            # StaticEncoder of the same encoder (the weights updated in place since) would pass:
            # its frozen, stale weights would run. A copy of `forward`'s code for each entry
            # keeps each graph to its own module (and a call checks one entry's guards).
            fwd = StaticEncoder.forward
            own = types.FunctionType(fwd.__code__.replace(), fwd.__globals__, fwd.__name__, fwd.__defaults__)
            module.forward = types.MethodType(own, module)
        self.fn = module if not self.compiled else torch.compile(
            module, dynamic=False, fullgraph=True, options={"cpp_wrapper": True})
        self.compile_seconds: float | None = None
        self.owner = lambda: None  # the encoder it was built from (a weakref, set by `compiled_encoder`)
        self._config = inductor_config

    def __call__(self, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor | None:
        """The output, or None when the compiler failed here, now or in an earlier call (one
        warning line; the caller runs the eager encoder, and every later static encoder or
        decoding step in this process does too)."""
        if not self.compiled:
            return self.fn(x, keep)
        if static.compile_disabled() is not None:
            return None
        t0 = time.perf_counter()
        cfg = self._config
        before = cfg.freezing
        cfg.freezing = True
        try:
            out = self.fn(x, keep)
        except Exception as e:  # noqa: BLE001  any compiler failure: fall back, say why once
            first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
            static._disabled.append(f"{type(e).__name__}: {first}")
            warnings.warn(f"the compiled encoder is off (torch.compile failed: {static._disabled[0]}); "
                          "the eager encoder runs (and a translation's decoding the lean step)",
                          RuntimeWarning, stacklevel=3)
            return None
        finally:
            cfg.freezing = before
        if self.compile_seconds is None:
            self.compile_seconds = time.perf_counter() - t0
        return out


# One entry per (weights digest, compute type, (rows, length) bucket, threads, compiler on): a
# single graph each, so a call checks one set of guards; Inductor's own loops are generated for
# the thread count at compile time, hence the threads in the key.
_COMPILED: dict = {}
_MAX_ENTRIES = 16  # the oldest is dropped


def compiled_encoder(key: tuple, encoder, rows: int) -> CompiledEncoder:
    """The `CompiledEncoder` of `key` = (weights digest of `encoder`, compute type, bucket) for
    inputs of `rows` = N * T positions, made the first time. An entry remembers its encoder
    weakly: a new encoder that reuses a freed one's `id` (and weight versions) gets its own."""
    key = (*key, torch.get_num_threads(), static.compiler_on())
    entry = _COMPILED.get(key)
    if entry is None or entry.owner() is not encoder:
        if entry is None and len(_COMPILED) >= _MAX_ENTRIES:
            _COMPILED.pop(next(iter(_COMPILED)))
        entry = _COMPILED[key] = CompiledEncoder(StaticEncoder(encoder, rows))
        entry.owner = weakref.ref(encoder)
    return entry


@torch.no_grad()
def static_encode(encoder, x: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
    """`encoder(x, padding_mask)` through the compiled static encoder where
    `static_encoder_reason` finds nothing against it, else the eager encoder.

    x: `(B, T, C)` embedded inputs; padding_mask: `(B, T)`, True = real (None: all real).
    Returns `(B, T, C)`: the real positions equal the eager encoder's; the padded ones are not
    zeros (the eager encoder's are)."""
    B, T, C = x.shape
    if static_encoder_reason(encoder, B, T) is not None:
        return encoder(x, padding_mask=padding_mask)
    N, Tb = bucket(B), bucket(T, 8)
    entry = compiled_encoder((weights_digest(encoder), str(x.dtype), (N, Tb)), encoder, N * Tb)
    if (N, Tb) == (B, T):
        xb = x.contiguous()
        keep = torch.ones(B, T, dtype=torch.bool, device=x.device) if padding_mask is None else padding_mask
    else:
        xb = x.new_zeros(N, Tb, C)
        xb[:B, :T] = x
        keep = torch.zeros(N, Tb, dtype=torch.bool, device=x.device)  # (N, Tb)
        keep[:B, :T] = True if padding_mask is None else padding_mask
    out = entry(xb, keep)
    if out is None:
        return encoder(x, padding_mask=padding_mask)
    return out[:B, :T]  # (B, T, C)
