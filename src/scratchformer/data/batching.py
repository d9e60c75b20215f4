"""Batching: group sequences of similar length, pad them, and cut long documents.

Padding is wasted compute: a batch of lengths [3, 50] costs 2 * 50 = 100 token slots for
53 real tokens. `LengthBucketSampler` shuffles, then sorts by length inside large random
chunks, so each batch holds sequences of similar length while the epoch stays random.

    sampler = LengthBucketSampler(lengths, max_tokens=4096, seed=0)
    for batch_indices in sampler.epoch_batches(epoch):   # same (seed, epoch) -> same batches
        ids, lens = pad_sequences([data[i] for i in batch_indices])

`truncate` and `segment` shorten or window documents longer than the model's context.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np
import torch


def _padded_cost(n: int, max_len: int) -> int:
    return n * max_len


class LengthBucketSampler:
    """Yields lists of indices into a dataset, grouped so that lengths in a batch are close.

    lengths: the length of each example (in tokens).
    batch_size: at most this many sequences per batch.
    max_tokens: at most this many *padded* tokens per batch: len(batch) * max length in it.
        Give batch_size, max_tokens, or both (a batch closes when either limit is hit).
        A single sequence longer than max_tokens still gets a batch of its own.
    shuffle: True (training): random chunks of bucket_size_multiplier * (typical batch size)
        examples are each sorted by length, cut into batches, and the batches shuffled.
        False (evaluation): all examples sorted by length (ties by index), batches in that
        order. No randomness, so the same batches for every epoch.
    seed: with the epoch number, fixes the order: `epoch_batches(e)` is a pure function of
        (lengths, options, seed, e), which is what lets a resumed run skip what it consumed.

    It is also a torch batch sampler: call `set_epoch(e)` and pass it as
    `DataLoader(..., batch_sampler=sampler)`.
    """

    def __init__(self, lengths: Sequence[int], batch_size: int | None = None,
                 max_tokens: int | None = None, shuffle: bool = True, seed: int = 0,
                 bucket_size_multiplier: int = 100):
        if batch_size is None and max_tokens is None:
            raise ValueError("give batch_size, max_tokens, or both")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if max_tokens is not None and max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        if bucket_size_multiplier < 1:
            raise ValueError(f"bucket_size_multiplier must be >= 1, got {bucket_size_multiplier}")
        lengths = np.asarray(lengths).reshape(-1)
        # an integer array is kept as it is (prepared data passes int32: one number per row of
        # millions), anything else becomes int64; the order and the batches do not depend on it
        self.lengths = lengths if lengths.dtype.kind in "iu" and lengths.size else lengths.astype(np.int64)
        if (self.lengths < 0).any():
            raise ValueError("lengths must be >= 0")
        self.batch_size = batch_size
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.bucket_size_multiplier = bucket_size_multiplier
        self.epoch = 0

    def _typical_batch_size(self) -> int:
        """How many sequences a batch usually holds; sets the chunk size when shuffling."""
        if self.max_tokens is None:
            return self.batch_size
        typical_len = max(1, int(np.median(self.lengths))) if len(self.lengths) else 1
        n = max(1, self.max_tokens // typical_len)
        return min(n, self.batch_size) if self.batch_size is not None else n

    def _cut(self, order: np.ndarray) -> list[list[int]]:
        """Cut indices (already sorted by length, ascending) into batches greedily."""
        batches, cur, cur_max = [], [], 0
        for i in order.tolist():
            n_len = max(cur_max, int(self.lengths[i]), 1)   # empty sequences still cost 1 slot
            too_many = self.batch_size is not None and len(cur) + 1 > self.batch_size
            too_big = (self.max_tokens is not None
                       and _padded_cost(len(cur) + 1, n_len) > self.max_tokens)
            if cur and (too_many or too_big):
                batches.append(cur)
                cur, n_len = [], max(int(self.lengths[i]), 1)
            cur.append(i)
            cur_max = n_len
        if cur:
            batches.append(cur)
        return batches

    def _cut_arrays(self, order: np.ndarray) -> list[np.ndarray]:
        """`_cut` as integer arrays (int32: an epoch of millions of rows held in 4 bytes a row;
        int64 from 2**31 examples); with batch_size alone, consecutive runs of batch_size cut by
        numpy (an epoch of millions of indices never becomes Python ints)."""
        dtype = np.int32 if len(self.lengths) < 1 << 31 else np.int64
        if self.max_tokens is None:
            return np.split(order.astype(dtype), np.arange(self.batch_size, len(order), self.batch_size))
        return [np.asarray(b, dtype=dtype) for b in self._cut(order)]

    def epoch_batches(self, epoch: int = 0) -> list[list[int]]:
        """All batches of one epoch; every index appears exactly once."""
        return self._epoch(epoch, self._cut)

    def epoch_arrays(self, epoch: int = 0) -> list[np.ndarray]:
        """`epoch_batches(epoch)`, each batch an integer array (the same indices, in the same
        order; for prepared data, whose epochs hold millions of rows)."""
        return self._epoch(epoch, self._cut_arrays)

    def _epoch(self, epoch: int, cut) -> list:
        if not self.shuffle:
            return cut(np.argsort(self.lengths, kind="stable"))
        rng = np.random.default_rng([self.seed, epoch])
        perm = rng.permutation(len(self.lengths))
        chunk = self._typical_batch_size() * self.bucket_size_multiplier
        batches = []
        for start in range(0, len(perm), chunk):
            part = perm[start:start + chunk]
            part = part[np.argsort(self.lengths[part], kind="stable")]
            batches.extend(cut(part))
        # Shuffle batch order so an epoch does not go short-to-long inside each chunk.
        return [batches[j] for j in rng.permutation(len(batches))]

    def padding_fraction(self, batches: Sequence[Sequence[int]]) -> float:
        """Fraction of padded token slots in `batches` that are padding (see module fn)."""
        return padding_fraction(batches, self.lengths)

    # torch batch-sampler protocol
    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.epoch_batches(self.epoch))

    def __len__(self) -> int:
        """Number of batches in the current epoch (varies by epoch with max_tokens)."""
        return len(self.epoch_batches(self.epoch))


def padding_fraction(batches: Sequence[Sequence[int]], lengths: Sequence[int]) -> float:
    """1 - real tokens / padded token slots, where a batch takes len(batch) * its max length."""
    lengths = np.asarray(lengths)
    real = slots = 0
    for b in batches:
        if len(b):
            ls = lengths[list(b)]
            real += int(ls.sum())
            slots += _padded_cost(len(b), int(ls.max()))
    return 1.0 - real / slots if slots else 0.0


def bucketing_report(lengths: Sequence[int], batch_size: int, seed: int = 0,
                     bucket_size_multiplier: int = 100) -> dict[str, float]:
    """Padding with and without length bucketing, for fixed-size batches.

    Returns {"padding_fraction_random": shuffled batches, no sorting,
             "padding_fraction_bucketed": LengthBucketSampler(shuffle=True),
             "padding_fraction_sorted": fully sorted (the lower bound),
             "speedup_bound": random padded slots / bucketed padded slots}.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    perm = np.random.default_rng([seed, 0]).permutation(len(lengths)).tolist()
    random_batches = [perm[i:i + batch_size] for i in range(0, len(perm), batch_size)]
    kw = dict(batch_size=batch_size, seed=seed, bucket_size_multiplier=bucket_size_multiplier)
    bucketed = LengthBucketSampler(lengths, shuffle=True, **kw).epoch_batches(0)
    sorted_ = LengthBucketSampler(lengths, shuffle=False, **kw).epoch_batches(0)

    def slots(bs):
        return sum(_padded_cost(len(b), int(lengths[b].max())) for b in bs if len(b))

    return {
        "padding_fraction_random": padding_fraction(random_batches, lengths),
        "padding_fraction_bucketed": padding_fraction(bucketed, lengths),
        "padding_fraction_sorted": padding_fraction(sorted_, lengths),
        "speedup_bound": slots(random_batches) / max(1, slots(bucketed)),
    }


def pad_sequences(seqs: Sequence[Sequence[int]], pad_id: int = 0,
                  max_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad id lists into a LongTensor (B, T) and return the true lengths (B,).

    T is the longest sequence, or exactly `max_len` when given (for fixed shapes). A
    sequence longer than `max_len` is an error: shorten it first with `truncate`.
    """
    lengths = [len(s) for s in seqs]
    longest = max(lengths, default=0)
    if max_len is not None and longest > max_len:
        raise ValueError(f"a sequence has {longest} tokens, more than max_len={max_len}; "
                         "truncate or segment it first")
    T = longest if max_len is None else max_len
    out = torch.full((len(seqs), T), pad_id, dtype=torch.long)
    for row, s in enumerate(seqs):
        if len(s):
            out[row, :len(s)] = torch.as_tensor(list(s), dtype=torch.long)
    return out, torch.tensor(lengths, dtype=torch.long)


def truncate(ids: Sequence[int], max_len: int, keep: str = "head") -> list[int]:
    """Shorten `ids` to at most `max_len` tokens.

    keep='head': the first max_len tokens; 'tail': the last max_len;
    'head+tail': the first ceil(max_len / 2) and the last floor(max_len / 2) (for long
    reviews and articles the ending often carries as much signal as the beginning).
    """
    if max_len < 0:
        raise ValueError(f"max_len must be >= 0, got {max_len}")
    if keep not in ("head", "tail", "head+tail"):
        raise ValueError(f"keep must be 'head', 'tail' or 'head+tail', got {keep!r}")
    ids = list(ids)
    if len(ids) <= max_len:
        return ids
    if keep == "head":
        return ids[:max_len]
    if keep == "tail":
        return ids[len(ids) - max_len:]
    n_tail = max_len // 2
    return ids[:max_len - n_tail] + ids[len(ids) - n_tail:]


def segment(ids: Sequence[int], seg_len: int, stride: int | None = None,
            max_segments: int | None = None) -> list[list[int]]:
    """Split `ids` into windows of `seg_len` tokens starting every `stride` tokens.

    stride defaults to seg_len (no overlap); a smaller stride makes windows overlap. Windows
    stop at the first one that reaches the end, so the last may be shorter than seg_len.
    max_segments keeps only the first windows. Empty `ids` gives [] (no windows).
        segment([1, 2, 3, 4, 5], 2)            -> [[1, 2], [3, 4], [5]]
        segment([1, 2, 3, 4, 5], 3, stride=2)  -> [[1, 2, 3], [3, 4, 5]]
    """
    stride = seg_len if stride is None else stride
    if seg_len < 1:
        raise ValueError(f"seg_len must be >= 1, got {seg_len}")
    if not 1 <= stride <= seg_len:
        raise ValueError(f"stride must be in [1, seg_len={seg_len}], got {stride}")
    if max_segments is not None and max_segments < 1:
        raise ValueError(f"max_segments must be >= 1, got {max_segments}")
    ids = list(ids)
    out = []
    for start in range(0, len(ids), stride):
        out.append(ids[start:start + seg_len])
        if start + seg_len >= len(ids) or (max_segments is not None and len(out) >= max_segments):
            break
    return out


__all__ = ["LengthBucketSampler", "padding_fraction", "bucketing_report", "pad_sequences",
           "truncate", "segment"]
