"""Key/value caches for incremental decoding: what attention has seen so far."""
from __future__ import annotations

import torch


class KVCache:
    """Keys and values of the positions seen so far, for incremental decoding.

    Self-attention appends each step's keys/values (`update`); cross-attention stores the
    encoder memory's projections once (`set`). With `capacity` (the most positions a decode
    can reach, known before it starts) the buffer `(B, Hkv, capacity, D)` is allocated once on
    the first `update` and every later step writes its keys/values in place; without it the
    buffer grows by doubling (O(1) copies amortised, never a re-concatenation of the history).
    `length` is the number of positions seen, i.e. the absolute position of the next one.
    """

    def __init__(self, capacity: int | None = None) -> None:
        if capacity is not None and capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._k: torch.Tensor | None = None  # (B, Hkv, cap, D): the rows in use of `_base_k`
        self._v: torch.Tensor | None = None
        self._base_k: torch.Tensor | None = None  # the whole buffer (more rows after a reorder that dropped some)
        self._base_v: torch.Tensor | None = None
        self._spare: tuple[torch.Tensor, torch.Tensor] | None = None  # where the next reorder writes
        self.length = 0

    @property
    def filled(self) -> bool:
        return self._k is not None

    def update(self, k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append `(B, Hkv, T, D)` and return all keys/values `(B, Hkv, length, D)`."""
        T = k_new.shape[2]
        need = self.length + T
        if self._k is None or need > self._k.shape[2]:
            if self._k is None and self.capacity is not None and need <= self.capacity:
                cap = self.capacity  # preallocated: no step after this one allocates
            else:  # unknown (or exceeded) capacity: grow by doubling
                cap = max(need, 2 * (0 if self._k is None else self._k.shape[2]), 16)
            B, H, _, D = k_new.shape
            k_buf = k_new.new_empty(B, H, cap, D)
            v_buf = v_new.new_empty(B, H, cap, D)
            if self._k is not None:
                k_buf[:, :, : self.length] = self._k[:, :, : self.length]
                v_buf[:, :, : self.length] = self._v[:, :, : self.length]
            self._k, self._v = k_buf, v_buf
            self._base_k, self._base_v, self._spare = k_buf, v_buf, None
        self._k[:, :, self.length : need] = k_new
        self._v[:, :, self.length : need] = v_new
        self.length = need
        return self._k[:, :, :need], self._v[:, :, :need]

    contiguous = True  # the keys `update` returns are positions 0 .. length-1

    def positions(self, device=None) -> torch.Tensor:
        """`(Tk,)` absolute positions of the keys the last `update` returned."""
        return torch.arange(self.length, device=device)

    def set(self, k: torch.Tensor, v: torch.Tensor) -> None:
        self._k, self._v, self.length = k, v, k.shape[2]
        self._base_k, self._base_v, self._spare = k, v, None

    def get(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self._k[:, :, : self.length], self._v[:, :, : self.length]

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows `index` (beam search: follow the surviving hypotheses).

        Only the `length` filled positions are copied, into a second buffer of the same
        capacity kept for that (the two swap at every reorder): a beam search reorders at
        every step, and copying the whole preallocated capacity, or allocating it anew,
        would cost more than the step's attention. Keys/values returned before a reorder
        are not valid after the next one."""
        if self._k is None:
            return
        n, L = index.numel(), self.length
        spare = self._spare
        if spare is None or spare[0].shape[0] < n or spare[0].shape[1:] != self._k.shape[1:] \
                or spare[0].dtype != self._k.dtype or spare[0].device != self._k.device:
            spare = tuple(t.new_empty((n, *t.shape[1:])) for t in (self._k, self._v))  # (n, Hkv, cap, D)
        k, v = spare[0][:n], spare[1][:n]  # views: the rows in use
        torch.index_select(self._k[:, :, :L], 0, index, out=k[:, :, :L])
        torch.index_select(self._v[:, :, :L], 0, index, out=v[:, :, :L])
        self._spare = (self._base_k, self._base_v)
        self._base_k, self._base_v = spare
        self._k, self._v = k, v


class RollingKVCache:
    """A KV cache for sliding-window attention: memory constant however long decoding runs.

    With a window of w, a new query at position p sees keys p-w .. p, so only the last w
    positions need to be kept (plus the first `sink` ones: StreamingLLM's attention sinks,
    Xiao et al. 2023, which a windowed model keeps visible). `update` returns the keys the new
    queries may need (the kept ones and the new ones) and then drops what no later query will
    see, so at most `sink + window` positions stay between steps. Positions stay absolute
    (`length` = positions seen), so RoPE and learned positions go on counting; the attention
    builds its window mask from `positions()`. Use it with the same window and sink as the
    attention it serves (`Encoder.new_caches()` / `Decoder.new_cache()` do).
    """

    def __init__(self, window: int, sink: int = 0) -> None:
        self.window, self.sink = window, sink
        self._k: torch.Tensor | None = None  # (B, Hkv, kept, D): sinks, then the recent positions
        self._v: torch.Tensor | None = None
        self.length = 0
        self._recent = 0  # first kept position after the sinks
        self._returned_recent = 0  # the same, for the keys the last `update` returned

    @property
    def filled(self) -> bool:
        return self._k is not None

    @property
    def contiguous(self) -> bool:
        """True while nothing was dropped: the keys returned are positions 0 .. length-1."""
        return self._returned_recent <= self.sink

    @property
    def kept(self) -> int:
        return 0 if self._k is None else self._k.shape[2]

    def positions(self, device=None) -> torch.Tensor:
        """`(Tk,)` absolute positions of the keys the last `update` returned."""
        r = self._returned_recent
        return torch.cat([torch.arange(min(self.sink, r), device=device), torch.arange(r, self.length, device=device)])

    def update(self, k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append `(B, Hkv, T, D)`; return the kept and new keys/values, then drop the old."""
        k = k_new if self._k is None else torch.cat([self._k, k_new], 2)  # (B, Hkv, kept + T, D)
        v = v_new if self._v is None else torch.cat([self._v, v_new], 2)
        self.length += k_new.shape[2]
        old, new = self._recent, max(self._recent, self.length - self.window)
        self._returned_recent = old
        # stored: positions [0, min(sink, old)) then [old, length); keep [0, min(sink, new)), [new, length)
        n_sink, start = min(self.sink, new), new - old + min(self.sink, old)
        if start > n_sink:
            self._k = torch.cat([k[:, :, :n_sink], k[:, :, start:]], 2)
            self._v = torch.cat([v[:, :, :n_sink], v[:, :, start:]], 2)
        else:
            self._k, self._v = k, v
        self._recent = new
        return k, v

    def reorder(self, index: torch.Tensor) -> None:
        """Keep batch rows `index` (beam search: follow the surviving hypotheses)."""
        if self._k is not None:
            self._k = self._k.index_select(0, index)
            self._v = self._v.index_select(0, index)
