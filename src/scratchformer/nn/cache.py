"""Key/value caches for incremental decoding: what attention has seen so far."""
from __future__ import annotations

import torch


class KVCache:
    """Keys and values of the positions seen so far, for incremental decoding.

    Self-attention appends each step's keys/values (`update`); cross-attention stores the
    encoder memory's projections once (`set`). The buffer grows by doubling, so appending a
    token costs O(1) copies amortised instead of re-concatenating the whole history.
    `length` is the number of positions seen, i.e. the absolute position of the next one.
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
