"""Sliding-window attention that is actually local: O(T·w) time and memory, not O(T²).

A band mask (`local_window_mask`) gives the right answer but still computes all T×T scores.
Here the queries are cut into blocks of `w` (the window); block n's queries can only see keys
within `w` of some query in the block, i.e. the keys of their own block and of the neighbouring
block on each side (only the one before when causal):

    keys   ... | block n-1 | block n | block n+1 | ...
    queries          [ block n ]      sees  n-1, n, n+1   (causal: n-1, n)

So each block attends over `w + 2w` keys (causal `w + w`), gathered with `unfold` (a strided
view over the keys, copied once by the batched matmul), and the same band mask inside every
block — it depends only on the offset within the block — removes what lies beyond `w`:

    # 局部注意力：每个查询只看距离 ≤ w 的键；按块计算，代价 O(T·w)

Positions are lower-right aligned like `causal_mask` (queries are the last Tq of Tk positions,
as with a KV cache). `sink` keeps the first keys visible to every query (StreamingLLM's
attention sinks, Xiao et al. 2023); they are appended to each block's keys, masked where the
band already holds them. `tests/nn/test_window.py` checks all of this equals the band mask.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .attention import scaled_dot_product_attention

WINDOW_IMPLS = ("blocked", "band")


def window_path_blocker(q_len: int, window: int, need_weights: bool, attn_mask, alibi,
                        contiguous: bool) -> str | None:
    """Why the blocked window is not used (None when it is): the band mask runs instead."""
    if need_weights:
        return "need_weights=True: weights are (Tq, Tk) anyway, the band mask computes them"
    if attn_mask is not None:
        return "an attn_mask was given: it is combined with the band mask"
    if alibi is not None:
        return "ALiBi's distance bias is added over the band mask"
    if not contiguous:
        return "the cached keys are not contiguous positions (a rolling cache past its window)"
    if q_len <= max(window, 1):
        return f"{q_len} queries fit one block of {max(window, 1)}: the band mask is as small"
    return None


def blocked_window_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int,
                             causal: bool = False, padding_mask: torch.Tensor | None = None,
                             sink: int = 0, dropout_p: float = 0.0, scale: float | None = None,
                             impl: str = "auto") -> torch.Tensor:
    """Attention of q `(B, H, Tq, D)` over k, v `(B, Hkv, Tk, D)` (Tq <= Tk, lower-right
    aligned) where query p sees key j iff |p - j| <= window (causal: 0 <= p - j <= window),
    or j < sink; `padding_mask` `(B, Tk)` True = real key. Returns `(B, H, Tq, D)`, equal to
    `scaled_dot_product_attention(q, k, v, local_window_mask(Tq, Tk, window, causal, sink=sink))`."""
    B, H, Tq, D = q.shape
    Hkv, Tk = k.shape[1], k.shape[2]
    b = max(window, 1)  # queries per block
    L = b + window + (0 if causal else window)  # keys a block can see
    nb = math.ceil(Tq / b)
    real = torch.ones(B, Tk, dtype=torch.bool, device=q.device) if padding_mask is None else padding_mask
    # Keys before (first query) - window are seen by no block (sinks are added separately).
    first = max(0, Tk - Tq - window)
    left = window - (Tk - first - Tq)  # pad so that block n's keys start at n·b
    right = (nb - 1) * b + L - left - (Tk - first)

    def blocks_of_keys(t: torch.Tensor) -> torch.Tensor:  # (B, Hkv, Tk, D) -> (B·nb, Hkv, L, D)
        t = F.pad(t[:, :, first:], (0, 0, left, right))  # (B, Hkv, (nb-1)·b + L, D)
        t = t.unfold(2, L, b)  # (B, Hkv, nb, D, L): block n = padded keys n·b ... n·b + L - 1
        return t.permute(0, 2, 1, 4, 3).reshape(B * nb, Hkv, L, D)

    kb, vb = blocks_of_keys(k), blocks_of_keys(v)
    qb = F.pad(q, (0, 0, 0, nb * b - Tq)).view(B, H, nb, b, D)  # (B, H, nb, b, D)
    qb = qb.transpose(1, 2).reshape(B * nb, H, b, D)
    valid = F.pad(real[:, first:], (left, right)).unfold(1, L, b)  # (B, nb, L): a real key there
    # query r of a block and key c of its window are window + r - c positions apart
    dist = window + torch.arange(b, device=q.device)[:, None] - torch.arange(L, device=q.device)[None, :]
    band = (dist >= 0) & (dist <= window) if causal else dist.abs() <= window  # (b, L)
    mask = band & valid[:, :, None, :]  # (B, nb, b, L)

    s = min(sink, Tk)
    if s:  # sinks: the first s keys, for the queries whose band does not already hold them
        q_pos = torch.arange(nb * b, device=q.device).view(nb, b) + (Tk - Tq)  # (nb, b)
        far = q_pos[..., None] - torch.arange(s, device=q.device) > window  # (nb, b, s)
        if not causal:
            far = far | (torch.arange(s, device=q.device) - q_pos[..., None] > window)
        sink_mask = far & real[:, None, None, :s]  # (B, nb, b, s)
        kb = torch.cat([kb, k[:, None, :, :s].expand(B, nb, Hkv, s, D).reshape(B * nb, Hkv, s, D)], 2)
        vb = torch.cat([vb, v[:, None, :, :s].expand(B, nb, Hkv, s, D).reshape(B * nb, Hkv, s, D)], 2)
        mask = torch.cat([mask, sink_mask], -1)  # (B, nb, b, L + s)

    out, _ = scaled_dot_product_attention(qb, kb, vb, mask.reshape(B * nb, 1, b, -1),
                                          dropout_p=dropout_p, scale=scale, impl=impl)
    out = out.view(B, nb, H, b, D).transpose(1, 2).reshape(B, H, nb * b, D)  # (B, H, nb·b, D)
    return out[:, :, :Tq]
