"""Boolean attention masks. Convention everywhere inside scratchformer: True = may attend.

Shapes: a *key padding* mask is `(B, Tk)` (True = real token); a full mask broadcasts to
`(B, H, Tq, Tk)`. PyTorch's `nn.MultiheadAttention` uses the opposite polarity
(True = ignore); convert with `~mask` at that boundary (see `scratchformer.interop`).
"""
from __future__ import annotations

import torch


def padding_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """`(B,)` lengths -> `(B, T)` bool, True at real positions `t < length`."""
    max_len = int(lengths.max()) if max_len is None else max_len
    positions = torch.arange(max_len, device=lengths.device)
    return positions[None, :] < lengths[:, None]  # (B, T)


def padding_mask_from_ids(ids: torch.Tensor, pad_id: int = 0) -> torch.Tensor:
    """`(B, T)` token ids -> `(B, T)` bool, True where the token is not padding."""
    return ids != pad_id


def causal_mask(q_len: int, k_len: int | None = None, device=None) -> torch.Tensor:
    """`(Tq, Tk)` lower-right aligned causal mask.

    Query i is the (Tk - Tq + i)-th position of the whole sequence, so it may attend keys
    j <= i + (Tk - Tq). With a KV cache (Tq < Tk) the last query sees every key; PyTorch's
    `is_causal=True` aligns top-left instead, which is wrong for cached decoding.
    """
    k_len = q_len if k_len is None else k_len
    q_pos = torch.arange(q_len, device=device)[:, None] + (k_len - q_len)
    k_pos = torch.arange(k_len, device=device)[None, :]
    return k_pos <= q_pos  # (Tq, Tk)


def local_window_mask(q_len: int, k_len: int | None = None, window: int = 0,
                      causal: bool = False, device=None) -> torch.Tensor:
    """`(Tq, Tk)` band mask: each query sees keys within `window` positions (lower-right
    aligned like `causal_mask`); with `causal=True` only the `window` keys before it."""
    k_len = q_len if k_len is None else k_len
    q_pos = torch.arange(q_len, device=device)[:, None] + (k_len - q_len)
    k_pos = torch.arange(k_len, device=device)[None, :]
    dist = q_pos - k_pos  # (Tq, Tk), >0 means the key is in the past
    band = dist.abs() <= window
    return band & (dist >= 0) if causal else band


def merge_masks(key_padding: torch.Tensor | None, attn_mask: torch.Tensor | None) -> torch.Tensor | None:
    """Combine a `(B, Tk)` key padding mask and a `(Tq, Tk)` / `(B, H, Tq, Tk)` mask into one
    boolean mask that broadcasts to `(B, H, Tq, Tk)`; None when both are None."""
    mask = None
    if key_padding is not None:
        mask = key_padding[:, None, None, :]  # (B, 1, 1, Tk)
    if attn_mask is not None:
        if attn_mask.dtype != torch.bool:
            raise TypeError("merge_masks combines boolean masks; add float biases separately")
        mask = attn_mask if mask is None else mask & attn_mask
    return mask
