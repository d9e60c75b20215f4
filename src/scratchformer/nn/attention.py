"""Attention as in the paper, then the variants around it, then multi-head attention.

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k + mask) · V
    # 注意力：softmax(QKᵀ/√d_k + 掩码)·V —— 查询与键的相似度经缩放、掩码、归一化，再对值加权求和

`plain_attention` is that line written out (the "math path"). `scaled_dot_product_attention`
adds what real inputs need around it: grouped-query heads, a lower-right causal mask, rows
whose keys are all masked (zeros, not NaN), and torch's fused kernel when no weights are asked
for. `MultiHeadAttention` projects Q = X·W_Q, K = X·W_K, V = X·W_V, attends per head and
projects back with W_O (`out_proj`).

Shapes: q `(B, H, Tq, D)`, k/v `(B, Hkv, Tk, D)`; masks broadcast to `(B, H, Tq, Tk)`.
Masks (see `masks.py`): `padding_mask` `(B, Tk)` bool, True = real token; `attn_mask` bool,
True = may attend, or float, added to the scores (0 = attend, -inf = blocked).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .cache import KVCache
from .fast_linear import Linear, linear
from .masks import causal_mask, check_mask, merge_masks
from .packing import PackedTokens

__all__ = ["KVCache", "MultiHeadAttention", "PackedTokens", "fused_path_blocker", "plain_attention",
           "scaled_dot_product_attention"]

IMPLS = ("auto", "math", "fused")
# torch's CPU flash kernel in bfloat16 loses to the math path on short keys (forward+backward,
# 4 heads of 64, 4k tokens: ~20-30 vs ~4 ms at 16-64 keys; benchmarks/results/attention.md).
# Beyond a few hundred keys the winner depends on the masks and on the allocator (measured
# both ways at 512-1024), while the math path's (Tq, Tk) scores grow with T²: stop at 256.
CPU_BF16_MATH_MAX_KEYS = 256


def plain_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                    scale: float | None = None, dropout_p: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """The paper's equation: `softmax(q kᵀ / √d_k + mask) v`, with q, k, v of the same heads.
    Returns `(out (B, H, Tq, D), weights (B, H, Tq, Tk))`."""
    # 注意力：softmax(QKᵀ/√d_k)V
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale  # 1/√d_k
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, Tq, Tk): Q Kᵀ / √d_k
    if mask is not None:  # bool: True = may attend; float: added (-inf = blocked)
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    # softmax in at least float32: bf16/fp16 exponentials lose too much precision
    weights = torch.softmax(scores, dim=-1, dtype=torch.promote_types(scores.dtype, torch.float32))
    weights = weights.to(q.dtype)  # (B, H, Tq, Tk), each row sums to 1
    probs = F.dropout(weights, dropout_p) if dropout_p > 0 else weights
    return probs @ v, weights  # (B, H, Tq, D): the weighted sum of the values


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
    scale: float | None = None,
    need_weights: bool = False,
    impl: str = "auto",
    *,
    padding_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`plain_attention` (or torch's fused kernel) with the variants real inputs need.

    Args:
        q: `(B, H, Tq, D)`; k, v: `(B, Hkv, Tk, D)` with H a multiple of Hkv (grouped-query).
        attn_mask: bool (True = attend) or float additive (0 = attend, -inf = blocked),
            broadcastable to `(B, H, Tq, Tk)`. Other dtypes raise `MaskError`.
        is_causal: add a lower-right aligned causal mask (correct when Tq < Tk, e.g. with a
            KV cache; torch's own `is_causal` aligns top-left).
        dropout_p: dropout on the attention probabilities (pass 0.0 in eval).
        scale: multiplies the scores; default 1/√D.
        need_weights: also return the probabilities `(B, H, Tq, Tk)`; forces the math path.
        impl: 'auto' (fused unless weights are needed or, on CPU in bfloat16, the keys are
            short: see `fused_path_blocker`), 'math' or 'fused'.
        padding_mask: `(B, Tk)` bool, True = real key.
    Returns:
        `(out (B, H, Tq, D), weights or None)`. A query whose keys are all masked gets an
        all-zero output and all-zero weights on both paths, never NaN.
    """
    if impl not in IMPLS:
        raise ValueError(f"impl must be one of {IMPLS}, got {impl!r}")
    mask = merge_masks(padding_mask, attn_mask)  # one mask; refuses int/uint8 masks on both paths
    Tq, Tk = q.shape[-2], k.shape[-2]
    k, v = _share_kv_heads(k, v, q.shape[1])
    use_fused = fused_path_blocker(need_weights, impl, q, Tk) is None
    # torch's is_causal is top-left aligned: only equal lengths without another mask may use it.
    native_causal = is_causal and use_fused and mask is None and Tq == Tk
    if is_causal and not native_causal:
        mask = _merge_causal(mask, Tq, Tk, q.device)
    mask, row_ok = _open_empty_rows(mask)

    if use_fused:
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=native_causal, scale=scale
        )
        weights = None
    else:
        out, weights = plain_attention(q, k, v, mask, scale, dropout_p)
    if row_ok is not None:
        out = out * row_ok
        weights = None if weights is None else weights * row_ok
    return out, weights


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


def _share_kv_heads(k: torch.Tensor, v: torch.Tensor, n_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Grouped-query attention: each of the Hkv key/value heads serves H / Hkv query heads."""
    if k.shape[1] == n_heads:
        return k, v
    rep = n_heads // k.shape[1]
    return k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)  # (B, H, Tk, D)


def _merge_causal(mask: torch.Tensor | None, q_len: int, k_len: int, device) -> torch.Tensor:
    causal = causal_mask(q_len, k_len, device=device)  # (Tq, Tk), lower-right aligned
    if mask is None:
        return causal
    if mask.dtype == torch.bool:
        return mask & causal
    return mask.masked_fill(~causal, float("-inf"))


def _open_empty_rows(mask: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """A query whose keys are all masked would get softmax over all -inf = NaN. Unmask such
    rows for the softmax; the caller zeroes their output with `row_ok` (None: no such row)."""
    if mask is None:
        return None, None
    allowed = mask if mask.dtype == torch.bool else mask > float("-inf")
    row_ok = allowed.any(dim=-1, keepdim=True)  # (..., Tq, 1)
    if bool(row_ok.all()):
        return mask, None
    if mask.dtype == torch.bool:
        return mask | ~row_ok, row_ok
    return mask.masked_fill(~row_ok, 0.0), row_ok


class MultiHeadAttention(nn.Module):
    """Multi-head attention for self- and cross-attention.

        head_i = Attention(Q W_Q,i, K W_K,i, V W_V,i);  MultiHead = Concat(head_1..head_h) W_O
        # 多头注意力：每个头在自己的 d_k 维子空间里做一次注意力，拼接后经 W_O 投影

    W_Q, W_K, W_V are row blocks of one fused `qkv_proj` weight (the layout of
    `nn.MultiheadAttention.in_proj_weight`; views, not copies): self-attention computes
    Q, K, V in one matmul; cross-attention applies `W_Q` to `x` and `W_KV` (W_K and W_V
    stacked) to `context`. With `n_kv_heads < n_heads` several query heads share one
    key/value head (GQA).
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None,
                 dropout: float = 0.0, bias: bool = True):
        super().__init__()
        self.n_heads = n_heads
        self.n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        self.head_dim = d_model // n_heads  # d_k
        self.dropout = dropout
        q_dim, kv_dim = n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        self.split_sizes = [q_dim, kv_dim, kv_dim]
        self.qkv_proj = Linear(d_model, q_dim + 2 * kv_dim, bias=bias)  # [W_Q; W_K; W_V]
        self.out_proj = Linear(q_dim, d_model, bias=bias)  # W_O
        self.impl = "auto"
        self.last_path_reason: str | None = None  # why the fused kernel was not used

    # The paper's projections by name: `linear(x, W, b)` computes x Wᵀ + b (W is (out, C)).
    def _rows(self, start: int, stop: int | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        b = self.qkv_proj.bias
        return self.qkv_proj.weight[start:stop], None if b is None else b[start:stop]

    @property
    def W_Q(self) -> torch.Tensor:
        return self._rows(0, self.split_sizes[0])[0]  # (H·d_k, C)

    @property
    def W_K(self) -> torch.Tensor:
        q, kv = self.split_sizes[:2]
        return self._rows(q, q + kv)[0]  # (Hkv·d_k, C)

    @property
    def W_V(self) -> torch.Tensor:
        return self._rows(sum(self.split_sizes[:2]))[0]  # (Hkv·d_k, C)

    @property
    def W_KV(self) -> torch.Tensor:
        return self._rows(self.split_sizes[0])[0]  # (2·Hkv·d_k, C): W_K above W_V

    @property
    def b_Q(self) -> torch.Tensor | None:
        return self._rows(0, self.split_sizes[0])[1]

    @property
    def b_KV(self) -> torch.Tensor | None:
        return self._rows(self.split_sizes[0])[1]

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, n, self.head_dim).transpose(1, 2)  # (B, n, T, d_k)

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
        padding_mask: torch.Tensor | None = None,
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
            padding_mask: `(B, Tk)` bool, True = real key (Tk includes cached keys).
            attn_mask: `(Tq, Tk)` or `(B, 1|H, Tq, Tk)`, bool (True = may attend) or float additive.
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
        check_mask(attn_mask, "attn_mask")
        if context is None:  # self-attention: [Q K V] = x [W_Q; W_K; W_V]ᵀ in one matmul
            qkv = self.qkv_proj(x)  # (B, Tq, (H + 2 Hkv) d_k)
            if packed is not None:
                qkv = packed.unpack(qkv)  # (B, T, (H + 2 Hkv) d_k), zeros at padding
                B, Tq = qkv.shape[:2]
            q, k, v = qkv.split(self.split_sizes, dim=-1)
            q = self._heads(q, self.n_heads)  # (B, H, Tq, d_k)
            k, v = self._heads(k, self.n_kv_heads), self._heads(v, self.n_kv_heads)
            offset = cache.length if cache is not None else 0
            if rope is not None:
                q, k = rope.rotate(q, offset), rope.rotate(k, offset)
            if cache is not None:
                k, v = cache.update(k, v)  # (B, Hkv, offset + Tq, d_k)
        else:  # cross-attention: Q = x W_Q, [K V] = context [W_K; W_V]
            q = self._heads(linear(x, self.W_Q, self.b_Q), self.n_heads)  # (B, H, Tq, d_k)
            if cache is not None and cache.filled:
                k, v = cache.get()  # memory projected once per source
            else:
                kv = linear(context, self.W_KV, self.b_KV)  # (B, Tk, 2 Hkv d_k)
                k, v = (self._heads(t, self.n_kv_heads) for t in kv.split(self.split_sizes[1:], dim=-1))
                if cache is not None:
                    cache.set(k, v)
        Tk = k.shape[2]
        if alibi is not None:  # ALiBi: a distance penalty added to the scores, as a float mask
            bias = alibi.bias(Tq, Tk, device=x.device).to(q.dtype)  # (H, Tq, Tk)
            if is_causal:
                bias = bias.masked_fill(~causal_mask(Tq, Tk, device=x.device), float("-inf"))
                is_causal = False
            if attn_mask is None:
                attn_mask = bias
            else:
                attn_mask = torch.where(attn_mask, bias, float("-inf")) if attn_mask.dtype == torch.bool \
                    else bias + attn_mask
        self.last_path_reason = fused_path_blocker(need_weights, self.impl, q, Tk)
        out, weights = scaled_dot_product_attention(
            q, k, v, attn_mask, is_causal=is_causal, padding_mask=padding_mask,
            dropout_p=self.dropout if self.training else 0.0,
            need_weights=need_weights, impl=self.impl,
        )
        out = out.transpose(1, 2).reshape(B, Tq, -1)  # (B, Tq, H d_k): the heads side by side
        if packed is not None:
            out = packed.pack(out)  # (1, N, H d_k)
        return self.out_proj(out), weights
