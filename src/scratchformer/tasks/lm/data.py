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
    the lengths come from the same (seed, epoch) generator, after the start offsets, so the
    starts are those of fixed-length training and a resumed epoch replays the same batches."""

    def __init__(self, ids: np.ndarray, context: int, batch_size: int, seed: int, epoch: int,
                 min_length: int | None = None):
        self.ids, self.context, self.batch_size = ids, context, batch_size
        n_windows = max(len(ids) // context, batch_size)
        self.n_batches = n_windows // batch_size
        self.seed, self.epoch, self.min_length = seed, epoch, min_length

    def __len__(self) -> int:
        return self.n_batches

    def __iter__(self) -> Iterator[LMBatch]:
        rng = np.random.default_rng([self.seed, self.epoch])
        starts = rng.integers(0, len(self.ids) - self.context, size=(self.n_batches, self.batch_size))
        lengths = np.full(self.n_batches, self.context)
        if self.min_length is not None:
            lengths = rng.integers(self.min_length, self.context + 1, size=self.n_batches)
        for row, length in zip(starts, lengths):
            yield _windows(self.ids, row, int(length))


def fixed_windows(ids: np.ndarray, context: int, batch_size: int, limit: int | None = None) -> list[LMBatch]:
    """Non-overlapping windows of `context` targets (stride `context`), evenly thinned to at
    most `limit`. A tail shorter than a full window is left out."""
    n = (len(ids) - 1) // context
    if n < 1:
        return []
    starts = np.arange(n) * context
    if limit is not None and n > limit:
        starts = starts[np.linspace(0, n - 1, limit).round().astype(np.int64)]
    return [_windows(ids, starts[i : i + batch_size], context) for i in range(0, len(starts), batch_size)]


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
