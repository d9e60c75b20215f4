"""Pooling: many vectors -> one. Token vectors of a sequence, or segment vectors of a document."""
from __future__ import annotations

import torch

POOLINGS = ("mean", "cls", "max")


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean of the real tokens' vectors: `(B, T, C)`, mask `(B, T)` (1/True = real) -> `(B, C)`.

    The same arithmetic as sentence-transformers' Pooling (sum / clamp(count, 1e-9)), so a
    row of all padding gives zeros, not NaN.
    """
    if attention_mask is None:
        return hidden.mean(dim=1)
    m = attention_mask.unsqueeze(-1).to(hidden.dtype)  # (B, T, 1)
    return (hidden * m).sum(dim=1) / torch.clamp(m.sum(dim=1), min=1e-9)


def masked_pool(h: torch.Tensor, mask: torch.Tensor, how: str) -> torch.Tensor:
    """h `(B, T, C)`, mask `(B, T)` True = real -> `(B, C)` by mean, max, or position 0 (cls)."""
    if how == "cls":
        return h[:, 0]
    if how == "mean":
        return mean_pool(h, mask)
    return h.masked_fill(~mask[..., None], float("-inf")).amax(1).nan_to_num(0.0, neginf=0.0)


def pool_segments(seg: torch.Tensor, doc_index: torch.Tensor, n_docs: int, how: str) -> torch.Tensor:
    """`(S, C)` segment vectors -> `(n_docs, C)` by mean or max over each document's segments."""
    index = doc_index[:, None].expand_as(seg)
    if how == "max":
        init = seg.new_full((n_docs, seg.shape[1]), float("-inf"))
        return init.scatter_reduce(0, index, seg, reduce="amax", include_self=True)
    total = seg.new_zeros(n_docs, seg.shape[1]).index_add(0, doc_index, seg)
    count = torch.bincount(doc_index, minlength=n_docs).clamp(min=1).to(seg.dtype)
    return total / count[:, None]
