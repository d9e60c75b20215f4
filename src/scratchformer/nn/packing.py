"""Padding packing: run the token-wise parts of an encoder on the real tokens only."""
from __future__ import annotations

import torch


class PackedTokens:
    """The real tokens of a padded batch, gathered into one row `(1, N, C)`.

    Everything in an encoder block except attention works token by token, so with a
    padding mask it can skip the padding slots (what torch's nested-tensor fast path
    does). Attention scatters its q/k/v back to `(B, T, .)` (zeros at padding, which the
    mask hides) and gathers its output again.
    """

    def __init__(self, padding_mask: torch.Tensor):
        self.batch, self.length = padding_mask.shape  # (B, T), True = real token
        self.index = padding_mask.reshape(-1).nonzero().squeeze(1)  # (N,) flat slots of real tokens

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """`(B, T, C)` -> `(1, N, C)`."""
        return x.reshape(self.batch * self.length, -1).index_select(0, self.index).unsqueeze(0)

    def unpack(self, x: torch.Tensor) -> torch.Tensor:
        """`(1, N, C)` -> `(B, T, C)` with zeros at padding."""
        out = x.new_zeros(self.batch * self.length, x.shape[-1])
        return out.index_copy_(0, self.index, x[0]).view(self.batch, self.length, -1)
