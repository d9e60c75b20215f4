"""Multi-head attention: the projections W_Q, W_K, W_V, W_O around `scaled_dot_product_attention`.

    head_i = Attention(Q W_Q,i, K W_K,i, V W_V,i);  MultiHead(Q, K, V) = Concat(head_1..head_h) W_O
    # 多头注意力：每个头在自己的 d_k 维子空间里做一次注意力，拼接后经 W_O 投影
"""
from __future__ import annotations

import torch
from torch import nn

from .attention import fused_path_blocker, scaled_dot_product_attention
from .cache import KVCache
from .fast_linear import Linear, linear
from .masks import causal_mask, check_mask, window_mask_at
from .packing import PackedTokens
from .reasons import decided, last_reason
from .window import WINDOW_IMPLS, blocked_window_attention, window_path_blocker


class MultiHeadAttention(nn.Module):
    """Multi-head attention for self- and cross-attention.

    W_Q, W_K, W_V are row blocks of one fused `qkv_proj` weight (the layout of
    `nn.MultiheadAttention.in_proj_weight`; views, not copies): self-attention computes
    Q, K, V in one matmul; cross-attention applies `W_Q` to `x` and `W_KV` (W_K and W_V
    stacked) to `context`. With `n_kv_heads < n_heads` several query heads share one
    key/value head (GQA).

    `window` (self-attention only): each query sees the keys within `window` positions (and
    the first `window_sink` keys); `window_impl='blocked'` computes only those scores
    (`window.py`, O(T·w)), `'band'` masks the full T×T scores (the reference).
    Why a fast path was not taken is a value of each call, never state on the module (one model
    serves several threads): `with path_reasons() as why: model(x)` (`nn/reasons.py`).
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None,
                 dropout: float = 0.0, bias: bool = True, window: int | None = None,
                 window_sink: int = 0, window_impl: str = "blocked", scale: float | None = None):
        super().__init__()
        self.n_heads = n_heads
        self.n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        self.head_dim = d_model // n_heads  # d_k
        self.dropout = dropout
        self.scale = scale  # of the scores; None = 1/√d_k
        q_dim, kv_dim = n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        self.split_sizes = [q_dim, kv_dim, kv_dim]
        self.qkv_proj = Linear(d_model, q_dim + 2 * kv_dim, bias=bias)  # [W_Q; W_K; W_V]
        self.out_proj = Linear(q_dim, d_model, bias=bias)  # W_O
        self.impl = "auto"
        self.set_window(window, window_sink, window_impl)

    def set_window(self, window: int | None, sink: int = 0, impl: str = "blocked") -> None:
        """Local attention over `window` positions (+ `sink` first keys); None = full attention."""
        if impl not in WINDOW_IMPLS:
            raise ValueError(f"window_impl must be one of {WINDOW_IMPLS}, got {impl!r}")
        self.window, self.window_sink, self.window_impl = window, sink, impl

    @property
    def last_path_reason(self) -> str | None:
        """Deprecated: why the fused kernel was not used in this module's last call made by the
        reading thread. Read your own call's reason with `nn.path_reasons()`."""
        _deprecated("last_path_reason", "fused")
        return last_reason(self, "fused")

    @property
    def last_window_reason(self) -> str | None:
        """Deprecated: why the blocked window was not used in this module's last call made by
        the reading thread. Read your own call's reason with `nn.path_reasons()`."""
        _deprecated("last_window_reason", "window")
        return last_reason(self, "window")

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

    def _project(self, x: torch.Tensor, start: int, stop: int | None = None) -> torch.Tensor:
        """x W[start:stop]ᵀ + b[start:stop] (W_Q or W_KV of the fused weight); a projection
        with its own kernel (int8, `quant.Int8Linear`) serves its rows itself."""
        if hasattr(self.qkv_proj, "rows"):
            return self.qkv_proj.rows(start, stop)(x)
        return linear(x, *self._rows(start, stop))

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
            cache: a `KVCache` (or, with a window, a `RollingKVCache`); self-attention
                appends to it, cross-attention fills it once.
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
                k, v = cache.update(k, v)  # (B, Hkv, Tk, d_k): the keys these queries may need
        else:  # cross-attention: Q = x W_Q, [K V] = context [W_K; W_V]
            q = self._heads(self._project(x, 0, self.split_sizes[0]), self.n_heads)  # (B, H, Tq, d_k)
            if cache is not None and cache.filled:
                k, v = cache.get()  # memory projected once per source
            else:
                kv = self._project(context, self.split_sizes[0])  # (B, Tk, 2 Hkv d_k)
                k, v = (self._heads(t, self.n_kv_heads) for t in kv.split(self.split_sizes[1:], dim=-1))
                if cache is not None:
                    cache.set(k, v)
        dropout_p = self.dropout if self.training else 0.0
        Tk = k.shape[2]
        # Absolute positions: the cached keys may skip some (a rolling cache past its window).
        contiguous = context is not None or cache is None or cache.contiguous
        k_pos = cache.positions(x.device) if context is None and cache is not None else None
        if self.window is not None and context is None:
            window_reason = decided(self, "window", "window_impl='band' was requested" if self.window_impl == "band"
                                    else window_path_blocker(Tq, self.window, need_weights, attn_mask, alibi,
                                                             contiguous))
            if window_reason is None:
                keys_per_block = max(self.window, 1) + self.window * (1 if is_causal else 2) + self.window_sink
                decided(self, "fused", fused_path_blocker(False, self.impl, q, keys_per_block))
                out = blocked_window_attention(q, k, v, self.window, is_causal, padding_mask, self.window_sink,
                                               dropout_p, self.scale, self.impl)
                return self._merge_heads(out, packed), None
            band = self._band(Tq, Tk, k_pos, is_causal, x.device)  # (Tq, Tk)
            attn_mask = band if attn_mask is None else (
                attn_mask & band if attn_mask.dtype == torch.bool else torch.where(band, attn_mask, float("-inf")))
        if alibi is not None:  # ALiBi: a distance penalty added to the scores, as a float mask
            bias = alibi.bias(Tq, Tk, device=x.device, k_pos=None if contiguous else k_pos)
            bias = bias.to(q.dtype)  # (H, Tq, Tk)
            if is_causal:
                bias = bias.masked_fill(~causal_mask(Tq, Tk, device=x.device), float("-inf"))
                is_causal = False
            if attn_mask is None:
                attn_mask = bias
            else:
                attn_mask = torch.where(attn_mask, bias, float("-inf")) if attn_mask.dtype == torch.bool \
                    else bias + attn_mask
        decided(self, "fused", fused_path_blocker(need_weights, self.impl, q, Tk))
        out, weights = scaled_dot_product_attention(
            q, k, v, attn_mask, is_causal=is_causal, padding_mask=padding_mask, dropout_p=dropout_p,
            scale=self.scale, need_weights=need_weights, impl=self.impl,
        )
        return self._merge_heads(out, packed), weights

    def _band(self, Tq: int, Tk: int, k_pos: torch.Tensor | None, causal: bool, device) -> torch.Tensor:
        """`(Tq, Tk)` window mask at the keys' absolute positions (queries are the last Tq)."""
        if k_pos is None:
            k_pos = torch.arange(Tk, device=device)
        q_pos = k_pos[-Tq:]  # the new queries are the last keys (self-attention)
        return window_mask_at(q_pos, k_pos, self.window, causal, self.window_sink)

    def _merge_heads(self, out: torch.Tensor, packed: PackedTokens | None) -> torch.Tensor:
        B, H, Tq, d = out.shape
        out = out.transpose(1, 2).reshape(B, Tq, H * d)  # (B, Tq, H d_k): the heads side by side
        if packed is not None:
            out = packed.pack(out)  # (1, N, H d_k)
        return self.out_proj(out)


def _deprecated(name: str, kind: str) -> None:
    import warnings

    warnings.warn(f"MultiHeadAttention.{name} is deprecated (a reason stored on a module shared by threads): "
                  f"read your own call's reason with `with scratchformer.nn.path_reasons() as why: model(x)`, "
                  f"then why.{kind}", DeprecationWarning, stacklevel=3)
