"""A plain-text file as one stream of character ids for a language model, prepared once and
memory-mapped (`lm-<content>-<tokenizer>/ids.u16|u32`, see `prepared.py` for the cache folders,
chunks and worker pool it shares with the labelled rows).

Like nanoGPT's `train.bin`: the vocabulary is counted on the training part (the first
1 - valid_frac of the characters), then the whole file is encoded chunk by chunk in worker
processes and written in file order. Training reads windows of the stream by offset, so memory
stays flat in the file's size.
"""
from __future__ import annotations

import hashlib
import time
from collections import Counter
from pathlib import Path

import numpy as np

from ..errors import UserError
from . import prepared
from .file_array import memmap_array
from .prepared import (Chunk, _cached, _decode, _digest_of, _read, _split_lines, _Writer, chunks_of, content_digest,
                       default_workers, id_dtype, prepared_dir)
from .prepared_scan import char_counts, char_ids
from .prepared_tokens import _tok_from_state, _tok_state
from .prepared_workers import run_tasks


def _decode_chunk(path: Path, chunk: Chunk) -> str:
    """A chunk's text as `readers.read_utf8` gives the whole file (BOM dropped, newlines \\n):
    one decode when it holds no \\r, else (and to name a bad byte's line) line by line."""
    raw, pos = _read(path, chunk)
    if prepared.FAST_PATHS and b"\r" not in raw:
        try:
            return raw.decode("utf-8")  # a chunk ends just after a \n, or at the end of the file
        except UnicodeDecodeError:
            pass
    text = "\n".join(_decode(path, lineno, at, line) for lineno, at, _, line in _split_lines(raw, pos, chunk.line))
    with open(path, "rb") as f:  # the chunk's own last line break (or none, at the end of a file)
        f.seek(chunk.end - 1)
        last = f.read(1)
    return text + "\n" if chunk.end > chunk.start and last in (b"\n", b"\r") else text


def _char_count_task(task) -> tuple[int, bool, Counter]:
    path, chunk = task
    text = _decode_chunk(path, chunk)
    return len(text), bool(text.strip()), char_counts(text)


def _char_encode_task(task) -> np.ndarray:
    path, chunk, state = task
    tok = _tok_from_state(state)
    text = _decode_chunk(path, chunk)
    if not text:
        return np.zeros(0, np.uint32)
    return char_ids(tok, [text])[0]


class TokenStream:
    """A text's ids as one memory-mapped array; `cut` is where the training part ends."""

    def __init__(self, folder: Path, meta: dict):
        self.folder, self.meta = folder, meta
        self.ids = memmap_array(folder / meta["ids_file"], np.dtype(meta["dtype"]), (int(meta["tokens"]),))
        if meta.get("max_id") is not None and meta["max_id"] >= meta["vocab_size"]:  # recorded, digest-verified
            from .prepared_tokens import id_out_of_range

            raise id_out_of_range(folder / meta["ids_file"], int(meta["max_id"]), int(meta["vocab_size"]))


def char_lm_stream(path: str | Path, valid_frac: float | None, min_freq: int = 1, workers: int | None = None,
                   tok=None, rebuild: bool = False, log=None):
    """(char tokenizer, stream, cut) for a plain-text file: the tokenizer is
    `build_tokenizer("char", [train], min_freq)` of the training part (the first
    1 - valid_frac of the characters, `datasets.split_text`'s rule; `valid_frac` None: all of
    it), unless `tok` is given; the stream holds the whole file's ids (one per character), so
    train = ids[:cut] and valid = ids[cut:]."""
    from .tokenizers import SPECIAL_TOKENS, CharTokenizer

    path = Path(path)
    digest = content_digest(path)
    workers = default_workers(path.stat().st_size) if workers is None else workers
    chunks = chunks_of(path)
    vkey = {"valid_frac": valid_frac, "min_freq": min_freq, "kind": "char-lm"}
    vfolder = prepared_dir() / f"lmvocab-{digest[:16]}-{_digest_of(vkey)[:16]}"

    def fill_vocab(tmp: Path, files: dict) -> dict:
        t0 = time.monotonic()
        lengths, counters, nonblank = [], [], False
        for n, nb, c in run_tasks(_char_count_task, [(path, ch) for ch in chunks], workers):
            lengths.append(n)
            counters.append(c)
            nonblank |= nb
        if not nonblank:
            raise UserError(f"{path}: the file is empty; a language model needs some text")
        total = sum(lengths)
        cut = total if valid_frac is None else int(total * (1.0 - valid_frac))
        counts: Counter = Counter()
        seen = 0
        for ch, n, c in zip(chunks, lengths, counters):
            if seen + n <= cut:
                counts.update(c)
            elif seen < cut:  # the chunk the cut falls in: its first part only
                counts.update(char_counts(_decode_chunk(path, ch)[:cut - seen]))
            seen += n
        vocab = CharTokenizer(SPECIAL_TOKENS)._build_vocab(counts, min_freq, None)
        CharTokenizer(vocab).save(tmp / "tokenizer.json")
        return {"kind": "lm-vocab", "characters": total, "cut": cut, "vocab_size": len(vocab),
                "seconds": round(time.monotonic() - t0, 3)}

    vmeta, _ = _cached(vfolder, fill_vocab, rebuild)
    from .tokenizers import Tokenizer

    tok = Tokenizer.load(vfolder / "tokenizer.json") if tok is None else tok
    state = _tok_state(tok)
    key = {"tokenizer": hashlib.sha256(state.encode("utf-8")).hexdigest(), "kind": "lm"}
    folder = prepared_dir() / f"lm-{digest[:16]}-{_digest_of(key)[:16]}"
    dtype = id_dtype(tok.vocab_size)

    def fill(tmp: Path, files: dict) -> dict:
        t0 = time.monotonic()
        name = f"ids.{'u16' if dtype == np.uint16 else 'u32'}"
        w = _Writer(tmp, name)
        total, top = 0, -1
        for arr in run_tasks(_char_encode_task, [(path, ch, state) for ch in chunks], workers):
            w.write(arr.astype(dtype))
            total += len(arr)
            top = max(top, int(arr.max())) if len(arr) else top
        files[name] = w.close()
        secs = time.monotonic() - t0
        return {"kind": "lm", "source": str(path.absolute()), "content": digest, "tokens": total, "dtype": dtype.name,
                "ids_file": name, "tokenizer": "char", "vocab_size": tok.vocab_size, "max_id": top, "seconds": round(secs, 3),
                "mb_per_s": round(path.stat().st_size / 1e6 / max(secs, 1e-9), 2)}

    meta, built = _cached(folder, fill, rebuild)
    if built and log:
        log(f"prepared: {path} -> {meta['tokens']:,} char tokens ({meta['dtype']}) in {meta['seconds']:.1f} s, "
            f"{meta['mb_per_s']:.1f} MB/s -> {folder}")
    return tok, TokenStream(folder, meta), int(vmeta["cut"])


__all__ = ["TokenStream", "char_lm_stream"]
