"""Hashed bigram ids: each position also gets an embedding of (previous token, token), bucketed.

Three bigram hashes (and a character trigram hash), each with its own input, all mapping to [1, n) with 0 = nothing (specials,
padding). They are kept apart on purpose: a trained run's embeddings are indexed by its hash,
so changing one would silently change every model trained with it.

    char_bigrams     characters (the char tokenizer):   1 + crc32(prev_char + char) % (n - 1)
    id_bigrams       token ids, a list (other tokenizers): 1 + crc32("prev id") % (n - 1)
    id_bigrams_batch token ids, a tensor (translation source, computed inside the model):
                     (prev * 1_000_003 + id) % (n - 1) + 1, 0 at special ids

    char_trigrams    characters, with trigram_buckets:  1 + crc32(p2 \x1f p1 \x1f char) % (n - 1),
                     packed with the bigram as bigram + bigram_buckets * trigram (`pack_ngrams`)

crc32 is stable across processes and machines (Python's `hash()` is not).
"""
from __future__ import annotations

import zlib
from functools import lru_cache
from typing import Sequence

import numpy as np

from .specials import NUM_SPECIALS


def check_buckets(n: int) -> None:
    if n == 1 or n < 0:
        raise ValueError("bigram_buckets must be 0 (off) or >= 2 (bucket 0 is for specials)")


def char_bigrams(chars: Sequence[str], n: int) -> list[int]:
    """One bucket per character; the first pairs with ""."""
    prev = [""] + list(chars[:-1])
    return [1 + zlib.crc32((p + c).encode("utf-8")) % (n - 1) for p, c in zip(prev, chars)]


def char_trigrams(chars: Sequence[str], n: int) -> list[int]:
    """One bucket per character for (the two before it, it); the first ones pair with "".
    The separator keeps ("ab", "c") and ("a", "bc") apart (characters are single code points,
    so it only matters for robustness)."""
    p1 = [""] + list(chars[:-1])
    p2 = ["", ""] + list(chars[:-2])
    return [1 + zlib.crc32(f"{a}\x1f{b}\x1f{c}".encode("utf-8")) % (n - 1) for a, b, c in zip(p2, p1, chars)]


def pack_ngrams(bigrams: Sequence[int], trigrams: Sequence[int], bigram_buckets: int) -> list[int]:
    """One id per position carrying both buckets, `bigram + bigram_buckets * trigram`, so the
    data path (one int per token) stays as it is; `Embeddings` splits them again."""
    return [b + bigram_buckets * t for b, t in zip(bigrams, trigrams)]


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


# ----------------------------------------------------------------------------- many texts at once
# The same hashes by numpy, for prepared data (millions of texts; equal to the functions above,
# tested). crc32 is linear: crc32(a + b) = Z_len(b)(crc32(a)) ^ crc32(b), where Z_k runs k zero
# bytes through the CRC register (what zlib's crc32_combine does). So a bigram's hash needs only
# each piece's crc32 and byte length, computed once per distinct character (or id) with zlib,
# and Z_1..Z_10 as tables of the 4 bytes of a crc32.
_POLY = 0xEDB88320  # crc32's polynomial, bit-reversed (zlib's)


@lru_cache(maxsize=1)
def _zero_tables(longest: int = 10):
    """(longest + 1, 4, 256) uint32: [k, j, v] is Z_k(v << 8j), so Z_k(c) is the XOR over the
    bytes j of c of [k, j, byte j]."""
    table = np.arange(256, dtype=np.uint32)  # the byte-at-a-time CRC table
    for _ in range(8):
        table = np.where(table & 1, (table >> 1) ^ np.uint32(_POLY), table >> 1).astype(np.uint32)
    out = np.zeros((longest + 1, 4, 256), dtype=np.uint32)
    x = (np.arange(256, dtype=np.uint32)[None, :] << (8 * np.arange(4, dtype=np.uint32))[:, None])  # (4, 256)
    out[0] = x
    for k in range(1, longest + 1):
        x = table[x & 0xFF] ^ (x >> 8)  # one zero byte through the register
        out[k] = x
    return out


def _combine(crc_a, crc_b, len_b):
    """crc32(a + b) from crc32(a), crc32(b) and len(b) in bytes (arrays; len_b <= 10: a character,
    or the decimal digits of a uint32 id)."""
    z = _zero_tables().reshape(-1)
    base = len_b.astype(np.int64) * 1024
    out = crc_b.astype(np.uint32)
    for j in range(4):
        out = out ^ z[base + j * 256 + ((crc_a >> np.uint32(8 * j)) & 0xFF)]
    return out


def _crc_table(values, encode) -> tuple:
    """(crc32, byte length) of encode(v) for each v that occurs in `values`, as arrays indexed by v."""
    counts = np.bincount(values) if len(values) else np.zeros(0, np.int64)
    crcs, lens = np.zeros(len(counts), np.uint32), np.zeros(len(counts), np.int64)
    for v in np.flatnonzero(counts).tolist():
        e = encode(v)
        crcs[v], lens[v] = zlib.crc32(e), len(e)
    return crcs, lens


def char_bigrams_array(cps, first, n: int):
    """`char_bigrams` of many texts: `cps` their code points one after another (uint32), `first`
    True at each text's first character. Returns int64 buckets aligned with `cps`.

    crc32(prev + c) = Z_len(c)(crc32(prev)) ^ crc32(c) takes few values per distinct `prev`
    (len(c) is 1 to 4 bytes), so those are tabled first: then a pair costs one look-up and an XOR."""
    counts = np.bincount(cps) if len(cps) else np.zeros(0, np.int64)
    chars = np.flatnonzero(counts)  # the distinct code points
    crc = np.array([zlib.crc32(chr(c).encode("utf-8")) for c in chars.tolist()], dtype=np.uint32)
    nbytes = 1 + (chars >= 0x80) + (chars >= 0x800) + (chars >= 0x10000)  # UTF-8 length
    d = len(chars)
    shifted = np.zeros((5, d + 1), dtype=np.uint32)  # [len(c), prev]; the last column: no prev ("")
    for k in range(1, 5):
        shifted[k, :d] = _combine(crc, np.zeros_like(crc), np.full(d, k))
    index_of = np.zeros(len(counts), dtype=np.intp)
    index_of[chars] = np.arange(d)
    i = index_of[cps]  # each character's place among the distinct ones
    prev = np.empty_like(i)
    prev[1:] = i[:-1]
    prev[:1] = d
    prev[first] = d  # a text's first character pairs with "" (crc32 0, and Z_k(0) = 0)
    h = shifted.ravel()[(nbytes * (d + 1))[i] + prev] ^ crc[i]  # crc32(prev + c)
    return 1 + (h % np.uint32(n - 1) if n - 1 < 1 << 32 else h.astype(np.int64) % (n - 1)).astype(np.int64)


def id_bigrams_array(ids, first, n: int):
    """`id_bigrams` of many texts: `ids` their ids one after another, `first` True at each text's
    first id. Returns int64 buckets aligned with `ids` ("p c": crc32 of "p " combined with "c")."""
    ids = np.asarray(ids, dtype=np.int64)
    crc_c_of, len_c_of = _crc_table(ids, lambda i: str(i).encode())
    crc_p_of, _ = _crc_table(ids, lambda i: f"{i} ".encode())
    crc_p = np.zeros(len(ids), dtype=np.uint32)
    crc_p[1:] = crc_p_of[ids[:-1]]
    crc_p[first] = zlib.crc32(b"-1 ")  # a text's first id pairs with -1
    return 1 + _combine(crc_p, crc_c_of[ids], len_c_of[ids]).astype(np.int64) % (n - 1)
