"""A flat binary file read as an array without mapping it (`FileArray`, `os.pread`), and the
memory-mapped reading it replaced where RSS matters (`memmap_array`).

A memory map counts every page the kernel maps around each read in the process's RSS: at 3M rows
the prepared index and ids added ~280 MB that way. `FileArray` reads exactly the items asked for
(grouped into few calls), so prepared data costs what a run holds, not what it has touched.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def memmap_array(path: Path, dtype, shape) -> np.ndarray:
    """The file as a read-only array mapped from disk (a plain ndarray over the np.memmap, whose
    per-access bookkeeping was most of the cost of reading rows one by one)."""
    if int(np.prod(shape)) == 0:
        return np.zeros(shape, dtype=dtype)
    return np.asarray(np.memmap(path, dtype=dtype, mode="r", shape=shape))


class FileArray:
    """A flat binary file as a read-only array whose items are read with `os.pread`: `a[i]`,
    `a[i:j]` and `a[index]` (integer arrays) read those items and map nothing.

    Why not a memory map: every page of a mapped file that a process touches counts in its RSS
    until it is unmapped, and the kernel maps up to 16 pages around each touch (fault-around).
    A training run touches rows all over the ids file (shuffled batches, length-sorted
    evaluation), so a memory map of it grew the RSS by the whole file (200 MB of ids at 3M rows,
    measured); the pages read here stay in the page cache, shared and reclaimable, not in the
    process.

    `a[index]` reads an index that wants an item every page or more of the stretch it spans front
    to back in pieces of `SCAN` bytes; a sparser one (a batch's rows) sorted, `CHUNK` items at a time, one
    call per run of items less than a `PAGE` apart within a `BLOCK`. Either way it holds a piece
    of the file at a time and a few bytes per item asked for, never the file."""

    PAGE = 1 << 12  # bytes
    BLOCK = 1 << 16  # bytes
    SCAN = 1 << 22  # bytes
    CHUNK = 1 << 14  # items of a sparse index per pass

    def __init__(self, path: str | Path, dtype, shape: tuple[int, ...]):
        self.path, self.dtype, self.shape = Path(path), np.dtype(dtype), tuple(int(s) for s in shape)
        self._item = self.dtype.itemsize * int(np.prod(self.shape[1:], dtype=np.int64))  # bytes per item
        self._fd: int | None = None

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def _open(self) -> int:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        return self._fd

    def _bytes(self, start: int, stop: int) -> bytes:
        """Items [start, stop) as bytes (one call, more only if the kernel returns less)."""
        want, at = (stop - start) * self._item, start * self._item
        if want <= 0:
            return b""
        data = os.pread(self._open(), want, at)
        while len(data) < want:
            more = os.pread(self._open(), want - len(data), at + len(data))
            if not more:
                raise UserError(f"{self.path}: shorter than its record says ({at + len(data)} of "
                                f"{len(self) * self._item} bytes); delete the folder to prepare it again")
            data += more
        return data

    def _items(self, data: bytes) -> np.ndarray:
        return np.frombuffer(data, dtype=self.dtype).reshape((-1,) + self.shape[1:])

    def __getitem__(self, key):
        n = len(self)
        if isinstance(key, (int, np.integer)):
            i = int(key) + n if key < 0 else int(key)
            if not 0 <= i < n:
                raise IndexError(f"index {int(key)} is out of bounds for {n} items")
            return self._items(self._bytes(i, i + 1))[0]
        if isinstance(key, tuple):
            raise TypeError("a FileArray takes one index (rows); index the array it returns for columns")
        if isinstance(key, slice):
            start, stop, step = key.indices(n)
            if step != 1:
                return self.take(np.arange(start, stop, step))
            return self._items(self._bytes(start, max(start, stop)))  # read-only, as a read-only map's slice
        return self.take(key)

    def take(self, index) -> np.ndarray:
        """The items at `index` (an integer array of any shape), as `array[index]` gives them."""
        index = np.asarray(index)
        if index.dtype == bool or index.dtype.kind not in "iu":
            raise TypeError(f"a FileArray is indexed by integers, not {index.dtype}")
        flat, n = index.reshape(-1).astype(np.int64, copy=False), len(self)
        if len(flat) and flat.min() < 0:
            flat = np.where(flat < 0, flat + n, flat)
        if len(flat) and (flat.min() < 0 or flat.max() >= n):
            raise IndexError(f"an index is out of bounds for {n} items")
        out = np.empty((len(flat),) + self.shape[1:], dtype=self.dtype)
        near = max(1, self.PAGE // self._item)  # items closer than a page are read in one call
        first, last = (int(flat.min()), int(flat.max()) + 1) if len(flat) else (0, 0)
        # runs of neighbours (items closer than a page) that the index touches: a batch's 64 rows
        # of ~30 ids each are 64 runs, not 2,000 scattered items
        runs = 1 + int(np.count_nonzero(np.diff(np.sort(flat)) > near)) if len(flat) else 0
        if runs * near >= last - first:  # a run a page or more: read that stretch through, pick them out
            step = max(1, self.SCAN // self._item)
            for a in range(first, last, step):
                sel = np.flatnonzero((flat >= a) & (flat < a + step))
                if len(sel):
                    out[sel] = self._items(self._bytes(a, min(last, a + step)))[flat[sel] - a]
            return out.reshape(index.shape + self.shape[1:])
        per = max(1, self.BLOCK // self._item)  # items per block
        for a in range(0, len(flat), self.CHUNK):
            order = np.argsort(flat[a:a + self.CHUNK], kind="stable")
            s = flat[a:a + self.CHUNK][order]  # sorted positions
            new = np.ones(len(s), dtype=bool)  # where a group starts: after a gap, or in another block
            new[1:] = (s[1:] - s[:-1] > near) | (s[1:] // per != s[:-1] // per)
            first = np.flatnonzero(new)  # a group is read in one call: [lo, hi)
            lo, hi = s[first], s[np.append(first[1:], len(s)) - 1] + 1
            spans = list(zip(lo.tolist(), hi.tolist()))
            fd, item, pread = self._open(), self._item, os.pread  # the loop is most of a batch's reading
            data = b"".join([pread(fd, (y - x) * item, x * item) for x, y in spans])
            if len(data) != int((hi - lo).sum()) * item:  # the kernel returned less somewhere: read carefully
                data = b"".join(self._bytes(x, y) for x, y in spans)
            group = np.cumsum(new) - 1
            at = (np.cumsum(hi - lo) - (hi - lo))[group] + s - lo[group]  # each position in `data`
            out[a:a + len(s)][order] = self._items(data)[at]
        return out.reshape(index.shape + self.shape[1:])

    def __array__(self, dtype=None, copy=None):
        whole = self[:]
        return whole if dtype is None else whole.astype(dtype)

    def tolist(self) -> list:
        return self[:].tolist()

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.close(fd)
            except OSError:
                pass

    def __del__(self):
        self.close()

    def __getstate__(self):  # a copy in another process opens the file itself
        return {"path": self.path, "dtype": self.dtype, "shape": self.shape}

    def __setstate__(self, s):
        self.__init__(s["path"], s["dtype"], s["shape"])
