"""Token ids of a labelled file's rows, prepared once: the vocabulary counted over the rows
(`vocab_tokenizer`), then every row's ids, and aligned hashed bigram ids, written as flat arrays
(`tokens-<content>-<tokenizer>/`, see `prepared.py` for the folder layout, the row index these
read and the worker pool they share).

Counting and encoding are cut into runs of rows, one worker task each; the counts merge into one
`Counter` (memory bounded by the vocabulary) and the ids are written in file order. Each run has a
numpy fast path (`prepared_scan.py`) beside the text-by-text one here, which is the reference.
"""
from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from functools import lru_cache
from pathlib import Path

import numpy as np

from . import prepared
from ..errors import UserError
from .file_array import FileArray
from .prepared import CHUNK_BYTES, LabeledRows, LazyPairs, _cached, _digest_of, _Writer, default_workers, id_dtype
from .prepared_scan import char_counts, encode_run, word_counts
from .prepared_workers import run_tasks


def _tok_state(tok) -> str:
    from .tokenizers import FORMAT_VERSION as TOK_FORMAT

    return json.dumps({"type": tok.kind, "format_version": TOK_FORMAT, **tok._state()}, ensure_ascii=False,
                      sort_keys=True)


@lru_cache(maxsize=4)
def _tok_from_state(state: str):
    """The tokenizer of a `_tok_state` (one per state in a worker: its tasks share it, unchanged)."""
    from .tokenizers import _REGISTRY

    data = json.loads(state)
    return _REGISTRY[data["type"]]._from_state(data)


def _row_groups(rows: LabeledRows, index: np.ndarray, chunk_rows: int) -> list[np.ndarray]:
    """`index` (row numbers) cut into runs of about `chunk_rows` rows, each a worker's task."""
    return [index[a:a + chunk_rows] for a in range(0, len(index), chunk_rows)] or [index[:0]]


def _rows_per_task(rows: LabeledRows) -> int:
    per_row = max(1, rows.meta.get("bytes", 1) // max(rows.n, 1))
    return max(1000, CHUNK_BYTES // per_row)


def _count_task(task) -> Counter:
    rows, index, state = task
    tok = _tok_from_state(state)
    texts = rows.texts(np.sort(index))  # file order: the reads go forward through the file
    if tok.kind == "char":  # one count of the run's code points (what _split gives, joined)
        return char_counts("".join(t.lower() for t in texts) if tok.lowercase else "".join(texts))
    fast = word_counts(tok, texts) if prepared.FAST_PATHS and tok.kind == "word" else None
    if fast is not None:
        return fast
    counts: Counter = Counter()
    for t in texts:
        counts.update(tok._split(t))
    return counts


def count_tokens(pairs: LazyPairs, tok, workers: int | None = None) -> Counter:
    """How often each piece of `tok._split` occurs in the texts of `pairs`, counted in
    parallel over runs of rows; memory is bounded by the vocabulary."""
    workers = default_workers(pairs.rows.meta.get("bytes", 0)) if workers is None else workers
    state = _tok_state(tok)
    total: Counter = Counter()
    groups = _row_groups(pairs.rows, pairs.index, _rows_per_task(pairs.rows))
    for c in run_tasks(_count_task, [(pairs.rows, g, state) for g in groups], workers):
        total.update(c)
    return total


def vocab_tokenizer(kind: str, pairs: LazyPairs, min_freq: int = 1, lowercase: bool = False,
                    bigram_buckets: int = 0, workers: int | None = None, log=None, trigram_buckets: int = 0):
    """The char or word tokenizer `build_tokenizer(kind, texts, ...)` would train on these
    texts (the same vocabulary, ids and segmenter), counted in parallel; cached beside the
    row index by (rows, kind, settings)."""
    from .tokenizers import SPECIAL_TOKENS, CharTokenizer, Tokenizer, WordTokenizer

    if kind == "char":
        blank = CharTokenizer(SPECIAL_TOKENS, lowercase, 0)
        make = lambda vocab: CharTokenizer(vocab, lowercase, bigram_buckets, trigram_buckets)  # noqa: E731
    elif kind == "word":
        segmenter = "jieba" if pairs.cjk_fraction() > 0.30 else "regex"
        blank = WordTokenizer(SPECIAL_TOKENS, lowercase, segmenter)
        make = lambda vocab: WordTokenizer(vocab, lowercase, segmenter)  # noqa: E731
    else:
        raise ValueError(f"vocab_tokenizer builds char and word tokenizers, not {kind!r}")
    key = {"kind": kind, "min_freq": min_freq, "lowercase": lowercase, "bigram_buckets": bigram_buckets,
           **({"trigram_buckets": trigram_buckets} if trigram_buckets else {}), "index": pairs.rows.folder.name, "rows": hashlib.sha256(pairs.index.tobytes()).hexdigest()}
    folder = pairs.rows.folder.parent / f"vocab-{pairs.rows.digest[:16]}-{_digest_of(key)[:16]}"

    def fill(tmp: Path, files: dict) -> dict:
        t0 = time.monotonic()
        counts = count_tokens(pairs, blank, workers)
        tok = make(blank._build_vocab(counts, min_freq, None))
        tok.save(tmp / "tokenizer.json")
        return {"kind": "vocab", "tokenizer": kind, "settings": key | {"rows": key["rows"][:16]},
                "vocab_size": tok.vocab_size, "seconds": round(time.monotonic() - t0, 3)}

    meta, built = _cached(folder, fill)
    if built and log:
        log(f"prepared: {kind} vocabulary of {meta['vocab_size']:,} counted over {len(pairs):,} texts "
            f"in {meta['seconds']:.1f} s")
    return Tokenizer.load(folder / "tokenizer.json")


# ----------------------------------------------------------------------------- token shards
def _encode_task(task) -> dict:
    """A run of rows' ids: by numpy and one regex pass (`prepared_scan.encode_run`) for the char
    tokenizer and the word tokenizer's regex segmenter, else text by text, the reference."""
    rows, index, state, bigram_buckets = task
    from .tokenizers import encode_with_bigrams

    tok = _tok_from_state(state)
    texts = rows.texts(index)
    fast = encode_run(tok, texts, bigram_buckets) if prepared.FAST_PATHS else None
    if fast is not None:
        return fast
    ids, lengths, bis = [], [], []
    if hasattr(tok, "hf") and not bigram_buckets:  # the `tokenizers` library encodes a batch in Rust
        encoded = tok.encode_batch(texts)
    else:
        encoded = None
    for j, text in enumerate(texts):
        if encoded is not None:
            a, b = encoded[j], None
        else:
            a, b = encode_with_bigrams(tok, text, bigram_buckets)
        ids.append(np.asarray(a, dtype=np.uint32))
        lengths.append(len(a))
        if bigram_buckets:
            bis.append(np.asarray(b, dtype=np.uint64 if _packed_trigrams(tok, bigram_buckets) else np.uint32))
    cat = lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.uint32)  # noqa: E731
    return {"ids": cat(ids), "lengths": np.asarray(lengths, dtype=np.int64), "bigrams": cat(bis) if bigram_buckets else None}


def _packed_trigrams(tok, bigram_buckets: int) -> int:
    """The trigram buckets packed into each bigram id (`data.bigrams.pack_ngrams`), 0 if none."""
    return getattr(tok, "trigram_buckets", 0) if getattr(tok, "bigram_buckets", 0) == bigram_buckets else 0


class TokenShards:
    """Every row's token ids (and bigram ids), read with `os.pread` (`FileArray`): row i is
    `ids[offsets[i]:offsets[i + 1]]`. Batches read their rows' ids (`bounds`, then `ids[positions]`),
    so the process holds what it reads, not the pages of the files."""

    def __init__(self, folder: Path, meta: dict):
        self.folder, self.meta = folder, meta
        self.dtype = np.dtype(meta["dtype"])
        n, total = int(meta["rows"]), int(meta["tokens"])
        self.offsets = FileArray(folder / "offsets.i64", np.int64, (n + 1,))
        self.ids = FileArray(folder / meta["ids_file"], self.dtype, (total,))
        self.bigrams = (FileArray(folder / meta["bigrams_file"], np.dtype(meta["bigram_dtype"]), (total,))
                        if meta.get("bigrams_file") else None)
        self.vocab_size = int(meta["vocab_size"])
        if meta.get("max_id") is not None:  # recorded while written, and verified with the files' digests
            self.check_ids(meta["max_id"], meta["ids_file"])
        if meta.get("max_bigram") is not None and meta.get("bigram_limit"):
            self.check_ids(meta["max_bigram"], meta["bigrams_file"], int(meta["bigram_limit"]))

    def check_ids(self, top: int, name: str | None = None, limit: int | None = None) -> None:
        """One line (never an IndexError inside the model) when an id `top` is not below the
        vocabulary's size (`limit`: the bigram buckets')."""
        limit = self.vocab_size if limit is None else limit
        if top >= limit:
            raise id_out_of_range(self.folder / (name or self.meta["ids_file"]), int(top), limit)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def bounds(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(start, end) int64 of each row's ids in the flat files (offsets i and i + 1, read together)."""
        rows = np.asarray(rows, dtype=np.int64)
        both = self.offsets[np.stack([rows, rows + 1])]  # (2, B)
        return both[0], both[1]

    def lengths(self, index: np.ndarray) -> np.ndarray:
        """The number of ids of each row of `index` (int32 unless the file holds 2**31 ids or more):
        every row's count from the offsets read front to back (4 bytes a row of the file, for the
        moment), then picked."""
        n, step = len(self), 1 << 20
        every = np.empty(n, dtype=np.int32 if self.meta.get("tokens", 0) < 1 << 31 else np.int64)
        for a in range(0, n, step):
            every[a:a + step] = np.diff(self.offsets[a:min(n, a + step) + 1])
        return every[np.asarray(index, dtype=np.int64)]

    def row(self, i: int) -> tuple[list[int], list[int] | None]:
        a, b = (int(x) for x in self.offsets[i:i + 2])
        ids = self.ids[a:b]
        if len(ids):
            self.check_ids(int(ids.max()))
        return ids.tolist(), None if self.bigrams is None else self.bigrams[a:b].tolist()


def id_out_of_range(where: Path, top: int, limit: int) -> UserError:
    return UserError(f"{where} holds the id {top}, outside the vocabulary of {limit} ids (it was changed, or "
                     f"made for another tokenizer); delete the folder {where.parent} and run again")


def token_shards(rows: LabeledRows, tok, bigram_buckets: int = 0, workers: int | None = None,
                 rebuild: bool = False, log=None) -> TokenShards:
    """Every row of `rows` tokenized by `tok` (as `encode_with_bigrams(tok, text,
    bigram_buckets)` gives it), built once per (content, tokenizer, buckets) and reused."""
    state = _tok_state(tok)
    key = {"tokenizer": hashlib.sha256(state.encode("utf-8")).hexdigest(), "bigram_buckets": bigram_buckets,
           "layout": rows.meta["layout"]}
    folder = rows.folder.parent / f"tokens-{rows.digest[:16]}-{_digest_of(key)[:16]}"
    workers = default_workers(rows.meta.get("bytes", 0)) if workers is None else workers
    dtype = id_dtype(tok.vocab_size)
    largest = bigram_buckets * max(1, _packed_trigrams(tok, bigram_buckets))  # packed trigrams: up to N * M
    bdtype = id_dtype(largest) if largest <= 1 << 32 else np.dtype(np.uint64)

    def fill(tmp: Path, files: dict) -> dict:
        t0 = time.monotonic()
        ids_file, bi_file = f"ids.{dtype.char == 'H' and 'u16' or 'u32'}", f"bigrams.u{8 * bdtype.itemsize}"
        w_ids, w_off = _Writer(tmp, ids_file), _Writer(tmp, "offsets.i64")
        w_bi = _Writer(tmp, bi_file) if bigram_buckets else None
        w_off.write(np.zeros(1, np.int64))
        total, top, top_bi = 0, -1, -1
        tasks = [(rows, g, state, bigram_buckets) for g in _row_groups(rows, np.arange(rows.n), _rows_per_task(rows))]
        for res in run_tasks(_encode_task, tasks, workers):
            w_ids.write(res["ids"].astype(dtype))
            w_off.write(total + np.cumsum(res["lengths"]))
            total += int(res["lengths"].sum())
            top = max(top, int(res["ids"].max())) if len(res["ids"]) else top
            if w_bi is not None:
                w_bi.write(res["bigrams"].astype(bdtype))
                top_bi = max(top_bi, int(res["bigrams"].max())) if len(res["bigrams"]) else top_bi
        files[ids_file], files["offsets.i64"] = w_ids.close(), w_off.close()
        if w_bi is not None:
            files[bi_file] = w_bi.close()
        secs = time.monotonic() - t0
        return {"kind": "tokens", "source": rows.meta["source"], "content": rows.digest, "rows": rows.n,
                "tokens": total, "dtype": dtype.name, "ids_file": ids_file, "vocab_size": tok.vocab_size,
                "max_id": top, "max_bigram": top_bi if bigram_buckets else None, "bigram_limit": largest,
                "tokenizer": tok.kind, "bigrams_file": bi_file if bigram_buckets else None,
                "bigram_dtype": bdtype.name, "settings": key, "seconds": round(secs, 3),
                "mb_per_s": round(rows.meta.get("bytes", 0) / 1e6 / max(secs, 1e-9), 2)}

    meta, built = _cached(folder, fill, rebuild)
    if built and log:
        log(f"prepared: {meta['rows']:,} rows -> {meta['tokens']:,} {meta['tokenizer']} tokens ({meta['dtype']}) "
            f"in {meta['seconds']:.1f} s, {meta['mb_per_s']:.1f} MB/s -> {folder}")
    return TokenShards(folder, meta)


__all__ = ["TokenShards", "count_tokens", "token_shards", "vocab_tokenizer"]
