"""Language-model data: the text (a registered corpus or a file), its tokenizer, random
training windows (`EncodedSplit.batches(epoch)`) and fixed validation windows."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch

from ...data.datasets import split_text
from ...data.readers import read_text_file
from ...data.registry import DATASETS
from ...data.tokenizers import Tokenizer, build_tokenizer
from ...errors import UserError
from ..runs import registered
from .recipe import LMDataConfig


@dataclass
class LMBatch:
    ids: torch.Tensor  # (B, T + 1): inputs ids[:, :-1], targets ids[:, 1:]

    def to(self, device) -> "LMBatch":
        return LMBatch(self.ids.to(device))


def _windows(ids: np.ndarray, starts: np.ndarray, context: int) -> LMBatch:
    idx = starts[:, None] + np.arange(context + 1)  # (B, T + 1)
    return LMBatch(torch.from_numpy(ids[idx].astype(np.int64)))


class RandomWindows:
    """The batches of one training epoch: random windows, deterministic in (seed, epoch).

    With `min_length` (random-length crops), each batch's windows are cut to a length drawn
    uniformly from min_length..context, one length per batch so the batch stays a rectangle;
    the length comes from the batch's own (seed, epoch, batch) generator, after its start
    offsets, so the starts are those of fixed-length training and a resumed epoch replays the
    same batches."""

    def __init__(self, ids: np.ndarray, context: int, batch_size: int, seed: int, epoch: int,
                 min_length: int | None = None):
        self.ids, self.context, self.batch_size = ids, context, batch_size
        n_windows = max(len(ids) // context, batch_size)
        self.n_batches = n_windows // batch_size
        self.seed, self.epoch, self.min_length = seed, epoch, min_length

    def __len__(self) -> int:
        return self.n_batches

    def __iter__(self) -> Iterator[LMBatch]:
        for b in range(self.n_batches):
            yield self.batch(b)

    def batch(self, b: int) -> LMBatch:
        """Batch `b` of the epoch, from a generator of its own (seed, epoch, b): an epoch of a
        1 GB text holds no table of its 15M window starts (memory flat in the text's size),
        and any batch can be made without the ones before it."""
        rng = np.random.default_rng([self.seed, self.epoch, b])
        starts = rng.integers(0, len(self.ids) - self.context, size=self.batch_size)
        length = self.context if self.min_length is None else int(rng.integers(self.min_length, self.context + 1))
        return _windows(self.ids, starts, length)


def fixed_windows(ids: np.ndarray, context: int, batch_size: int, limit: int | None = None) -> list[LMBatch]:
    """Non-overlapping windows of `context` targets (stride `context`), evenly thinned to at
    most `limit`. A tail shorter than a full window is left out."""
    return list(FixedWindows(ids, context, batch_size, limit))


class FixedWindows:
    """`fixed_windows` made when iterated: every window of a big (memory-mapped) text costs
    one batch at a time, not the whole text again as int64 tensors."""

    def __init__(self, ids: np.ndarray, context: int, batch_size: int, limit: int | None = None):
        n = max((len(ids) - 1) // context, 0)
        if limit is not None and n > limit:  # the chosen windows only, not all n of a big text first
            starts = np.linspace(0, n - 1, limit).round().astype(np.int64) * context
        else:
            starts = np.arange(n, dtype=np.int64) * context
        self.ids, self.starts, self.context, self.batch_size = ids, starts, context, batch_size

    def __len__(self) -> int:
        return -(-len(self.starts) // self.batch_size)

    def __iter__(self) -> Iterator[LMBatch]:
        for i in range(0, len(self.starts), self.batch_size):
            yield _windows(self.ids, self.starts[i : i + self.batch_size], self.context)


@dataclass
class LMText:
    train: str
    valid: str
    name: str


def load_lm_text(dc: LMDataConfig) -> LMText:
    """The training and validation text of `dc` (a registered corpus or a file)."""
    name = dc.dataset
    info = registered(name)
    if info is not None:
        if info.task != "lm":
            raise UserError(f"dataset {name!r} is a {info.task} data set, not a text corpus; "
                            f"use one of {', '.join(n for n, i in DATASETS.items() if i.task == 'lm')} or a .txt file")
        text, name = info.load(), info.name
    else:
        text, name = read_text_file(name), Path(name).name
    if dc.valid_file:
        train, valid = text, read_text_file(dc.valid_file)
    else:
        train, valid = split_text(text, dc.valid_frac)
    return LMText(train, valid, name)


@dataclass
class PreparedLM:
    """A text file's ids, prepared once (`data.prepared_lm.char_lm_stream`) and memory-mapped."""
    tokenizer: Tokenizer
    train: np.ndarray  # (N,) ids, a memory map
    valid: np.ndarray
    name: str
    train_chars: int
    valid_chars: int
    folder: str = ""  # where the stream of --data lies in the cache


def prepared_lm(dc: LMDataConfig, tok: Tokenizer | None = None) -> PreparedLM | None:
    """The prepared form of the user's text file for a char LM (None: a registered corpus, a
    BPE tokenizer, or SCRATCHFORMER_PREPARED=0; those are read in memory as before). `tok`:
    the run's own tokenizer (a resumed run), else the one counted on the training part."""
    import sys

    from ...data.prepared import prepared_enabled
    from ...data.prepared_lm import char_lm_stream

    if dc.tokenizer != "char" or not prepared_enabled() or registered(dc.dataset) is not None:
        return None
    if not Path(dc.dataset).is_file() or (dc.valid_file and not Path(dc.valid_file).is_file()):
        return None  # read_text_file says what is wrong
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    if dc.valid_file:
        tok, stream, _ = char_lm_stream(dc.dataset, None, dc.min_freq, tok=tok, log=log)
        _, vstream, _ = char_lm_stream(dc.valid_file, None, dc.min_freq, tok=tok, log=log)
        train, valid = stream.ids, vstream.ids
    else:
        tok, stream, cut = char_lm_stream(dc.dataset, dc.valid_frac, dc.min_freq, tok=tok, log=log)
        train, valid = stream.ids[:cut], stream.ids[cut:]
    return PreparedLM(tok, train, valid, Path(dc.dataset).name, len(train), len(valid), str(stream.folder))


def unk_share(ids: np.ndarray, block: int = 1 << 22) -> float:
    """The share of <unk> ids, read in blocks (a memory map is never copied whole)."""
    from ...data.tokenizers import UNK_ID

    n = sum(int((ids[i:i + block] == UNK_ID).sum()) for i in range(0, len(ids), block))
    return n / max(len(ids), 1)


def encode_text(tok: Tokenizer, text: str) -> np.ndarray:
    """The whole text as one id array (BPE: encoded line by line, in parallel, which gives the
    same ids as encoding the text at once except where a run of blank lines is split)."""
    if tok.kind == "char":
        return np.asarray(tok.encode(text), dtype=np.int32)
    lines = text.splitlines(keepends=True)
    return np.fromiter((i for ids in tok.encode_batch(lines) for i in ids), dtype=np.int32)


def build_lm_tokenizer(dc: LMDataConfig, train_text: str) -> Tokenizer:
    if dc.tokenizer == "char":
        return build_tokenizer("char", [train_text], min_freq=dc.min_freq)
    return build_tokenizer("bpe", train_text.splitlines(keepends=True), vocab_size=dc.vocab_size)


def chars_per_token(tok: Tokenizer, text: str, ids: np.ndarray | None = None) -> float:
    if tok.kind == "char":
        return 1.0
    n = len(ids) if ids is not None else len(encode_text(tok, text))
    return len(text) / max(n, 1)


class EncodedSplit:
    """The training text, encoded once; `batches(epoch)` are that epoch's random windows
    (of random lengths from `min_length` up to `context` when `min_length` is given)."""

    def __init__(self, ids: np.ndarray, context: int, batch_size: int, seed: int, min_length: int | None = None):
        self.ids, self.context, self.batch_size, self.seed = ids, context, batch_size, seed
        self.min_length = min_length

    def batches(self, epoch: int = 0) -> RandomWindows:
        return RandomWindows(self.ids, self.context, self.batch_size, self.seed, epoch, self.min_length)
