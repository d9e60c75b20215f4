"""Scaled dot-product attention (readable math path + fused path), multi-head attention with
grouped-query heads and a KV cache.

Shapes: q `(B, H, Tq, D)`, k/v `(B, Hkv, Tk, D)`; masks broadcast to `(B, H, Tq, Tk)`.
Boolean masks: True = may attend. Float masks are added to the scores (-inf = blocked).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .fast_linear import Linear, linear
from .masks import causal_mask, merge_masks

IMPLS = ("auto", "math", "fused")
# torch's CPU flash kernel in bfloat16 loses to the math path on short keys (forward+backward,
# 4 heads of 64, 4k tokens: ~20-30 vs ~4 ms at 16-64 keys; benchmarks/results/attention.md).
# Beyond a few hundred keys the winner depends on the masks and on the allocator (measured
# both ways at 512-1024), while the math path's (Tq, Tk) scores grow with T²: stop at 256.
CPU_BF16_MATH_MAX_KEYS = 256


def fused_path_blocker(need_weights: bool, impl: str, q: torch.Tensor | None = None,
                       k_len: int = 0) -> str | None:
    """Why the fused kernel is not used (None when it is). Like PyTorch's transformer.py we
    say why instead of silently running the slow path (or, here, the faster one)."""
    if impl == "math":
        return "impl='math' was requested"
    if need_weights:
        if impl == "fused":
            raise ValueError("impl='fused' cannot return attention weights; use impl='auto'")
        return "need_weights=True: the fused kernel does not return attention probabilities"
    if (impl == "auto" and q is not None and q.device.type == "cpu" and q.dtype == torch.bfloat16
            and k_len <= CPU_BF16_MATH_MAX_KEYS):
        return (f"bfloat16 on CPU with {k_len} <= {CPU_BF16_MATH_MAX_KEYS} keys: torch's CPU flash "
                "kernel is slower than the math path there (impl='fused' forces it)")
    return None


def _merge_causal(mask: torch.Tensor | None, q_len: int, k_len: int, device) -> torch.Tensor:
    causal = causal_mask(q_len, k_len, device=device)  # (Tq, Tk)
    if mask is None:
        return causal
    if mask.dtype == torch.bool:
        return mask & causal
    return mask.masked_fill(~causal, float("-inf"))


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    scale: float | None = None,
    need_weights: bool = False,
    impl: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """softmax(q k^T / sqrt(D) + mask) v.

    Args:
        q: `(B, H, Tq, D)`; k, v: `(B, Hkv, Tk, D)` with H a multiple of Hkv (grouped-query).
        mask: bool (True = attend) or float additive, broadcastable to `(B, H, Tq, Tk)`.
        is_causal: add a lower-right aligned causal mask (correct when Tq < Tk, e.g. with a
            KV cache; torch's own `is_causal` aligns top-left).
        dropout_p: dropout on the attention probabilities (pass 0.0 in eval).
        need_weights: also return the probabilities `(B, H, Tq, Tk)`; forces the math path.
        impl: 'auto' (fused unless weights are needed or, on CPU in bfloat16, the keys are
            short: see `fused_path_blocker`), 'math' or 'fused'.
    Returns:
        `(out (B, H, Tq, D), weights or None)`. A query whose keys are all masked gets an
        all-zero output and all-zero weights on both paths, never NaN.
    """
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    Tq, Tk = q.shape[-2], k.shape[-2]
    if k.shape[1] != q.shape[1]:  # grouped-query attention: share each k/v head
        rep = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(rep, dim=1)  # (B, H, Tk, D)
        v = v.repeat_interleave(rep, dim=1)
    use_fused = fused_path_blocker(need_weights, impl, q, Tk) is None
    # torch's is_causal is top-left aligned: only equal lengths without another mask may use it.
    native_causal = is_causal and use_fused and mask is None and Tq == Tk
    if is_causal and not native_causal:
        mask = _merge_causal(mask, Tq, Tk, q.device)

    # A fully masked query row would be softmax over all -inf = NaN. Unmask such rows for the
    # softmax and zero their output afterwards.
    row_ok = None
    if mask is not None:
        allowed = mask if mask.dtype == torch.bool else mask > float("-inf")
        row_ok = allowed.any(dim=-1, keepdim=True)  # (..., Tq, 1)
        if bool(row_ok.all()):
            row_ok = None
        elif mask.dtype == torch.bool:
            mask = mask | ~row_ok
        else:
            mask = mask.masked_fill(~row_ok, 0.0)

    if use_fused:
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=native_causal, scale=scale
        )
        weights = None
    else:
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, Tq, Tk)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
        # softmax in at least float32: bf16/fp16 exponentials lose too much precision
        weights = torch.softmax(scores, dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32))
        weights = weights.to(q.dtype)  # (B, H, Tq, Tk)
        if row_ok is not None:
            weights = weights * row_ok
        probs = F.dropout(weights, dropout_p) if dropout_p > 0 else weights
        out = probs @ v  # (B, H, Tq, D)
    if row_ok is not None:
        out = out * row_ok
    return out, weights


class KVCache:
    """Keys and values of the positions seen so far, for incremental decoding.

    Self-attention appends each step's keys/values (`update`); cross-attention stores the
    encoder memory's projections once (`set`). The buffer grows by doubling, so appending a
    token costs O(1) copies amortised instead of re-concatenating the whole history.
    """

    def __init__(self) -> None:
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None
        self.length = 0

    @property
    def filled(self) -> bool:
        return self._k is not None

    def update(self, k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append `(B, Hkv, T, D)` and return all keys/values `(B, Hkv, length, D)`."""
        T = k_new.shape[2]
        need = self.length + T
        if self._k is None or need > self._k.shape[2]:
            cap = max(need, 2 * (0 if self._k is None else self._k.shape[2]), 16)
            B, H, _, D = k_new.shape
            k_buf = k_new.new_empty(B, H, cap, D)
            v_buf = v_new.new_empty(B, H, cap, D)
            if self._k is not None:
                k_buf[:, :, : self.length] = self._k[:, :, : self.length]
                v_buf[:, :, : self.length] = self._v[:, :, : self.length]
            self._k, self._v = k_buf, v_buf
        self._k[:, :, self.length : need] = k_new
        self._v[:, :, self.length : need] = v_new
        self.length = need
        return self._k[:, :, :need], self._v[:, :, :need]

    def set(self, k: torch.Tensor, v: torch.Tensor) -> None:
        self._k, self._v, self.length = k, v, k.shape[2]

    def get(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._k[:, :, : self.length], self._v[:, :, : self.length]

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows `index` (beam search: follow the surviving hypotheses)."""
        if self._k is not None:
            self._k = self._k.index_select(0, index)
            self._v = self._v.index_select(0, index)


class PackedTokens:
    """The real tokens of a padded batch, gathered into one row `(1, N, C)`.

    Everything in an encoder block except attention works token by token, so with a
    key-padding mask it can skip the padding slots (what torch's nested-tensor fast path
    does). Attention scatters its q/k/v back to `(B, T, .)` (zeros at padding, which the
    mask hides) and gathers its output again.
    """

    def __init__(self, key_padding: torch.Tensor):
        self.batch, self.length = key_padding.shape  # (B, T), True = real token
        self.index = key_padding.reshape(-1).nonzero().squeeze(1)  # (N,) flat slots of real tokens

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """`(B, T, C)` -> `(1, N, C)`."""
        return x.reshape(self.batch * self.length, -1).index_select(0, self.index).unsqueeze(0)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """`(1, N, C)` -> `(B, T, C)` with zeros at padding."""
        out = x.new_zeros(self.batch * self.length, x.shape[-1])
        return out.index_copy_(0, self.index, x[0]).view(self.batch, self.length, -1)


class MultiHeadAttention(nn.Module):
    """Multi-head attention for self- and cross-attention.

    One `qkv_proj` holds the query, key and value projections stacked (the layout of
    `nn.MultiheadAttention.in_proj_weight`): self-attention runs it as one matmul; cross-
    attention applies the query rows to `x` and the key/value rows to `context`.
    With `n_kv_heads < n_heads` several query heads share one key/value head (GQA).
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None,
                 dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.n_heads = n_heads
        self.n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        self.head_dim = d_model // n_heads
        self.dropout = dropout
        q_dim, kv_dim = n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        self.split_sizes = [q_dim, kv_dim, kv_dim]
        self.qkv_proj = Linear(d_model, q_dim + 2 * kv_dim, bias=bias)
        self.out_proj = Linear(q_dim, d_model, bias=bias)
        self.impl = "auto"
        self.last_path_reason: str | None = None  # why the fused kernel was not used

    def _project_kv(self, context: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        q_dim = self.split_sizes[0]
        w, b = self.qkv_proj.weight[q_dim:], None
        if self.qkv_proj.bias is not None:
            b = self.qkv_proj.bias[q_dim:]
        k, v = linear(context, w, b).split(self.split_sizes[1:], dim=-1)
        return self._heads(k, self.n_kv_heads), self._heads(v, self.n_kv_heads)

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, n, self.head_dim).transpose(1, 2)  # (B, n, T, hd)

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
        key_padding_mask: torch.Tensor | None = None,
        attn_mask: torch.Tensor | None = None,
        is_causal: bool = False,
        rope=None,
        alibi=None,
        cache: KVCache | None = None,
        need_weights: bool = False,
        packed: PackedTokens | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """
        Args:
            x: `(B, Tq, C)` queries (and keys/values for self-attention).
            context: `(B, Tk, C)` keys/values source for cross-attention, else None.
            key_padding_mask: `(B, Tk)` bool, True = real key (Tk includes cached keys).
            attn_mask: bool `(Tq, Tk)` or `(B, 1|H, Tq, Tk)`, True = may attend.
            is_causal: lower-right causal masking (self-attention).
            rope: a `RotaryEmbedding` applied to q and k at positions `cache.length + t`.
            alibi: an `ALiBi` module whose bias is added to the scores.
            cache: a `KVCache`; self-attention appends to it, cross-attention fills it once.
            need_weights: return per-head probabilities `(B, H, Tq, Tk)`.
            packed: self-attention only: `x` holds just the real tokens `(1, N, C)` of a
                padded `(B, T)` batch; the output is packed the same way.
        Returns:
            `(B, Tq, C)` and the weights or None.
        """
        B, Tq, _ = x.shape
        if packed is not None and context is not None:
            raise ValueError("packed tokens are for self-attention only")
        if context is None:
            qkv = self.qkv_proj(x)  # (B, Tq, (H + 2 Hkv) hd)
            if packed is not None:
                qkv = packed.unpack(qkv)  # (B, T, (H + 2 Hkv) hd), zeros at padding
                B, Tq = qkv.shape[:2]
            q, k, v = qkv.split(self.split_sizes, dim=-1)
            q = self._heads(q, self.n_heads)  # (B, H, Tq, hd)
            k, v = self._heads(k, self.n_kv_heads), self._heads(v, self.n_kv_heads)
            offset = cache.length if cache is not None else 0
            if rope is not None:
                q, k = rope.rotate(q, offset), rope.rotate(k, offset)
            if cache is not None:
                k, v = cache.update(k, v)  # (B, Hkv, offset + Tq, hd)
        else:
            q_dim = self.split_sizes[0]
            b = None if self.qkv_proj.bias is None else self.qkv_proj.bias[:q_dim]
            q = self._heads(linear(x, self.qkv_proj.weight[:q_dim], b), self.n_heads)
            if cache is not None and cache.filled:
                k, v = cache.get()  # memory projected once per source
            else:
                k, v = self._project_kv(context)
                if cache is not None:
                    cache.set(k, v)
        Tk = k.shape[2]
        mask = merge_masks(key_padding_mask, attn_mask)
        if alibi is not None:
            bias = alibi.bias(Tq, Tk, device=x.device).to(q.dtype)  # (H, Tq, Tk)
            if is_causal:
                bias = bias.masked_fill(~causal_mask(Tq, Tk, device=x.device), float("-inf"))
                is_causal = False
            mask = bias if mask is None else torch.where(mask, bias, float("-inf"))
        self.last_path_reason = fused_path_blocker(need_weights, self.impl, q, Tk)
        out, weights = scaled_dot_product_attention(
            q, k, v, mask=mask, is_causal=is_causal,
            dropout_p=self.dropout if self.training else 0.0,
            need_weights=need_weights, impl=self.impl,
        )
        out = out.transpose(1, 2).reshape(B, Tq, -1)  # (B, Tq, H hd)
        if packed is not None:
            out = packed.pack(out)  # (1, N, H hd)
        return self.out_proj(out), weights
