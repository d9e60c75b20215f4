"""Hashed bigram ids: each position also gets an embedding of (previous token, token), bucketed.

Three hashes, each with its own input, all mapping to [1, n) with 0 = nothing (specials,
padding). They are kept apart on purpose: a trained run's embeddings are indexed by its hash,
so changing one would silently change every model trained with it.

    char_bigrams     characters (the char tokenizer):   1 + crc32(prev_char + char) % (n - 1)
    id_bigrams       token ids, a list (other tokenizers): 1 + crc32("prev id") % (n - 1)
    id_bigrams_batch token ids, a tensor (translation source, computed inside the model):
                     (prev * 1_000_003 + id) % (n - 1) + 1, 0 at special ids

crc32 is stable across processes and machines (Python's `hash()` is not).
"""
from __future__ import annotations

import zlib
from typing import Sequence

from .specials import NUM_SPECIALS


def check_buckets(n: int) -> None:
    if n == 1 or n < 0:
        raise ValueError("bigram_buckets must be 0 (off) or >= 2 (bucket 0 is for specials)")


def char_bigrams(chars: Sequence[str], n: int) -> list[int]:
    """One bucket per character; the first pairs with ""."""
    prev = [""] + list(chars[:-1])
    return [1 + zlib.crc32((p + c).encode("utf-8")) % (n - 1) for p, c in zip(prev, chars)]


def id_bigrams(ids: Sequence[int], n: int) -> list[int]:
    """One bucket per token id; the first pairs with -1."""
    prev = [-1] + list(ids[:-1])
    return [1 + zlib.crc32(f"{p} {c}".encode()) % (n - 1) for p, c in zip(prev, ids)]


def id_bigrams_batch(ids, n: int):
    """`(B, S)` id tensor -> `(B, S)` buckets (integer hashing, 0 at specials and padding)."""
    import torch.nn.functional as F

    prev = F.pad(ids[:, :-1], (1, 0), value=0)  # (B, S), 0 before the first
    h = (prev * 1_000_003 + ids) % (n - 1) + 1
    return h.masked_fill(ids < NUM_SPECIALS, 0)
