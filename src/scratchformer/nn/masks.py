"""Attention masks. Convention everywhere inside scratchformer: True = may attend.

The two masks, with the same names at every level (`Transformer` -> `Encoder`/`Decoder` ->
blocks -> `MultiHeadAttention` -> `scaled_dot_product_attention`):
  - `padding_mask` `(B, Tk)` bool: True = real token (a key that may be attended).
  - `attn_mask` `(Tq, Tk)` or `(B, 1|H, Tq, Tk)`: bool, True = may attend; or float, added to
    the scores (0 = attend, -inf = blocked, anything else a bias).
Any other dtype (int 0/1, uint8, ...) is refused with a `MaskError`: added to the scores as
numbers it would let padding through silently. PyTorch's `nn.MultiheadAttention` uses the
opposite polarity (True = ignore); convert with `~mask` at that boundary (see
`scratchformer.interop`).
"""
from __future__ import annotations

import torch

from ..errors import UserError


class MaskError(UserError, TypeError):
    """A mask of a dtype attention does not read. A `UserError` (the CLI prints one line) and a
    `TypeError` (what torch raises for a wrong dtype); `scratchformer.errors` imports nothing,
    so `nn` still depends on torch only."""


def check_mask(mask: torch.Tensor | None, name: str, allow_float: bool = True) -> torch.Tensor | None:
    """`mask` itself when its dtype is one attention reads, else a one-line `MaskError`."""
    if mask is None or mask.dtype == torch.bool or (allow_float and mask.is_floating_point()):
        return mask
    kinds = "bool (True = may attend) or float additive (0 = attend, -inf = blocked)" if allow_float \
        else "bool (True = real token)"
    raise MaskError(f"{name} has dtype {mask.dtype}, but attention reads only {kinds} masks; "
                    f"pass `{name}.bool()` if 1 means attend")


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
                      causal: bool = False, device=None, sink: int = 0) -> torch.Tensor:
    """`(Tq, Tk)` band mask: each query sees keys within `window` positions (lower-right
    aligned like `causal_mask`); with `causal=True` only the `window` keys before it (and
    itself). `sink`: the first `sink` keys stay visible to every query (StreamingLLM's
    attention sinks; still causal when `causal=True`)."""
    k_len = q_len if k_len is None else k_len
    q_pos = torch.arange(q_len, device=device) + (k_len - q_len)
    return window_mask_at(q_pos, torch.arange(k_len, device=device), window, causal, sink)


def window_mask_at(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int, causal: bool,
                   sink: int = 0) -> torch.Tensor:
    """The band mask for queries and keys at the given absolute positions `(Tq,)`, `(Tk,)`
    -> `(Tq, Tk)`; what `local_window_mask` computes for contiguous positions, and what a
    rolling KV cache needs (its keys are the sinks plus the last `window` positions)."""
    dist = q_pos[:, None] - k_pos[None, :]  # (Tq, Tk), >0 means the key is in the past
    band = dist.abs() <= window
    if causal:
        band = band & (dist >= 0)
    if sink:
        sinks = k_pos[None, :] < sink
        band = band | (sinks & (dist >= 0) if causal else sinks)
    return band


def merge_masks(padding: torch.Tensor | None, attn_mask: torch.Tensor | None) -> torch.Tensor | None:
    """Combine a `(B, Tk)` padding mask and a `(Tq, Tk)` / `(B, 1|H, Tq, Tk)` attention mask
    into one mask that broadcasts to `(B, H, Tq, Tk)`: boolean when `attn_mask` is, float
    additive (padding = -inf) when `attn_mask` is float; None when both are None."""
    check_mask(padding, "padding_mask", allow_float=False)
    check_mask(attn_mask, "attn_mask")
    if padding is None:
        return attn_mask
    pad = padding[:, None, None, :]  # (B, 1, 1, Tk)
    if attn_mask is None:
        return pad
    if attn_mask.dtype == torch.bool:
        return pad & attn_mask
    return torch.where(pad, attn_mask, float("-inf"))  # broadcasts to (B, 1|H, Tq, Tk)


def split_mask(mask, padding_mask=None, attn_mask=None):
    """The stacks' positional shorthand -> `(padding_mask, attn_mask)`: a 2-D `mask` is a
    `(B, T)` padding mask, any other an attention mask. The one place where a mask's kind is
    read from its shape; everything below takes the two masks by name."""
    if mask is not None:
        if padding_mask is not None or attn_mask is not None:
            raise ValueError("pass either the shorthand mask or padding_mask=/attn_mask=, not both")
        padding_mask, attn_mask = (mask, None) if mask.dim() == 2 else (None, mask)
    return check_mask(padding_mask, "padding_mask", allow_float=False), check_mask(attn_mask, "attn_mask")
