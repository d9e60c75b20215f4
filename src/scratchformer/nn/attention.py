"""Attention as in the paper, then the variants around it.

    Attention(Q, K, V) = softmax(Q Kᵀ / √d_k + mask) · V
    # 注意力：softmax(QKᵀ/√d_k + 掩码)·V —— 查询与键的相似度经缩放、掩码、归一化，再对值加权求和

`plain_attention` is that line written out (the "math path"). `scaled_dot_product_attention`
adds what real inputs need around it: grouped-query heads, a lower-right causal mask, rows
whose keys are all masked (zeros, not NaN), and torch's fused kernel when no weights are asked
for. `MultiHeadAttention` (multihead.py) projects Q = X·W_Q, K = X·W_K, V = X·W_V, attends
per head and projects back with W_O; `window.py` is the same attention restricted to a local
window in O(T·w).

Shapes: q `(B, H, Tq, D)`, k/v `(B, Hkv, Tk, D)`; masks broadcast to `(B, H, Tq, Tk)`.
Masks (see `masks.py`): `padding_mask` `(B, Tk)` bool, True = real token; `attn_mask` bool,
True = may attend, or float, added to the scores (0 = attend, -inf = blocked).
"""
from __future__ import annotations

import functools
import math
import warnings

import torch
import torch.nn.functional as F

from .cache import KVCache
from .masks import causal_mask, merge_masks
from .packing import PackedTokens

__all__ = ["KVCache", "PackedTokens", "fused_path_blocker", "plain_attention",
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


def _renamed_keyword(old: str, new: str):
    """A public keyword renamed `old` -> `new`: the old spelling keeps working, with a warning."""
    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            if old in kwargs:
                if new in kwargs:
                    raise TypeError(f"{fn.__name__}() got both {old}= and {new}=; pass {new}= only")
                warnings.warn(f"{fn.__name__}({old}=...) is deprecated: the keyword is now {new}= "
                              f"(same meaning; {old}= will be removed in a later release)",
                              DeprecationWarning, stacklevel=2)
                kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)
        return call
    return wrap


@_renamed_keyword("mask", "attn_mask")
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
        mask: the old name of `attn_mask`, deprecated (a `DeprecationWarning`; same meaning).
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
    # (traced for export, Tq == Tk is symbolic: the explicit mask, right for every length, is what the graph holds)
    native_causal = is_causal and use_fused and mask is None and not _tracing() and Tq == Tk
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


def _tracing() -> bool:
    return torch.compiler.is_compiling() or torch.compiler.is_exporting()


def _open_empty_rows(mask: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """A query whose keys are all masked would get softmax over all -inf = NaN. Unmask such
    rows for the softmax; the caller zeroes their output with `row_ok` (None: no such row)."""
    if mask is None:
        return None, None
    allowed = mask if mask.dtype == torch.bool else mask > float("-inf")
    row_ok = allowed.any(dim=-1, keepdim=True)  # (..., Tq, 1)
    if not _tracing() and bool(row_ok.all()):  # a traced graph (ONNX export) takes the branch valid for every mask
        return mask, None
    if mask.dtype == torch.bool:
        return mask | ~row_ok, row_ok
    return mask.masked_fill(~row_ok, 0.0), row_ok


# Names that moved out of this file keep their old address for a while, with a warning. The package
# (nn/__init__.py, above every file here) fills this table, so this file imports nothing above it.
MOVED: dict[str, tuple[object, str]] = {}


def __getattr__(name: str):
    if name in MOVED:
        obj, home = MOVED[name]
        warnings.warn(f"scratchformer.nn.attention.{name} is deprecated: import it from {home}",
                      DeprecationWarning, stacklevel=2)
        return obj
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
