"""MLM data: documents from data sets or files, cut into token windows; each epoch's batches
are masked on the fly (`EncodedSplit.batches(epoch)`)."""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from ...data.batching import LengthBucketSampler, pad_sequences
from ...data.datasets import ClassificationData
from ...data.registry import DATASETS
from ...data.tokenizers import PAD_ID
from ...errors import UserError
from ...models.mlm import IGNORE, MLMConfig, mask_tokens
from ..runs import looks_like_path, registered
from .recipe import MLMDataConfig


def pretraining_texts(dc: MLMDataConfig, log=print) -> list[str]:
    """All documents named by `dc.datasets` (see the module docstring)."""
    docs: list[str] = []
    for name in dc.datasets:
        name = name.strip()
        opts = dc.dataset_options.get(name, {})
        info = registered(name) if not looks_like_path(name) or name.lower().replace("_", "-") in DATASETS else None
        if info is not None:
            data = info.load(**opts)
            if isinstance(data, ClassificationData):
                part = [t for t, _ in data.train + data.valid]
            elif isinstance(data, str):
                part = data.split("\n")
            else:
                raise UserError(f"dataset {name!r} ({info.task}) cannot be used for MLM pretraining; "
                                "use a classification or language-modelling data set, or a text file")
        elif looks_like_path(name):
            path = Path(name)
            if not path.is_file():
                raise UserError(f"text file {name} does not exist")
            part = path.read_text(encoding="utf-8").split("\n")
        part = [t.strip() for t in part if t.strip()]
        log(f"mlm text: {name}: {len(part)} documents, {sum(map(len, part)) / 1e6:.2f}M chars")
        docs += part
    if not docs:
        raise UserError(f"no text found in {', '.join(dc.datasets)}")
    return docs


@dataclass
class MLMBatch:
    inputs: torch.Tensor  # (B, T) after masking
    labels: torch.Tensor  # (B, T) original id at chosen positions, IGNORE elsewhere
    bigrams: torch.Tensor | None = None  # (B, T) of the original text (hidden at chosen positions by the model)

    def to(self, device) -> "MLMBatch":
        return MLMBatch(self.inputs.to(device), self.labels.to(device),
                        None if self.bigrams is None else self.bigrams.to(device))


class Windows:
    """Token windows of at most `max_len`, stored flat; batches masked on demand."""

    def __init__(self, encoded: list[tuple[list[int], list[int] | None]], max_len: int):
        starts, lengths, ids, bis = [], [], [], []
        offset = 0
        self.has_bigrams = bool(encoded) and encoded[0][1] is not None
        for doc_ids, doc_bis in encoded:
            for s in range(0, len(doc_ids), max_len):
                n = min(max_len, len(doc_ids) - s)
                starts.append(offset + s)
                lengths.append(n)
            offset += len(doc_ids)
            ids.extend(doc_ids)
            if self.has_bigrams:
                bis.extend(doc_bis)
        self.ids = np.asarray(ids, dtype=np.int64)
        self.bigrams = np.asarray(bis, dtype=np.int64) if self.has_bigrams else None
        self.starts, self.lengths = np.asarray(starts, np.int64), np.asarray(lengths, np.int64)

    def __len__(self) -> int:
        return len(self.starts)

    def tokens(self) -> int:
        return int(self.lengths.sum())

    def collate(self, idx: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
        rows = [self.ids[self.starts[i]:self.starts[i] + self.lengths[i]] for i in idx]
        ids, _ = pad_sequences(rows, PAD_ID)
        bi = None
        if self.has_bigrams:
            bi, _ = pad_sequences([self.bigrams[self.starts[i]:self.starts[i] + self.lengths[i]] for i in idx], 0)
        return ids, bi


class MaskedBatches:
    """One epoch of masked batches: a sized, re-iterable sequence (masks drawn lazily, from a
    generator seeded by (seed, epoch, batch number), so the same epoch gives the same batches)."""

    def __init__(self, windows: Windows, batches: list[list[int]], mcfg: MLMConfig, dc: MLMDataConfig,
                 seed: int, epoch: int):
        self.windows, self.batches, self.mcfg, self.dc, self.seed, self.epoch = windows, batches, mcfg, dc, seed, epoch

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self):
        for k, idx in enumerate(self.batches):
            yield make_masked_batch(self.windows, idx, self.mcfg, self.dc, (self.seed, self.epoch, k))


def make_masked_batch(windows: Windows, idx: Sequence[int], mcfg: MLMConfig, dc: MLMDataConfig,
                      key: tuple[int, int, int]) -> MLMBatch:
    ids, bi = windows.collate(idx)
    g = torch.Generator().manual_seed(zlib.crc32(repr(key).encode()))
    inputs, labels = mask_tokens(ids, mcfg.mask_id, mcfg.mask_id, mcfg.n_specials, dc.mask_prob, dc.span, g)
    if not bool((labels != IGNORE).any()):  # tiny batches: predict at least one token
        real = (ids >= mcfg.n_specials).nonzero()
        if len(real):
            r, c = real[0].tolist()
            labels[r, c], inputs[r, c] = ids[r, c], mcfg.mask_id
    return MLMBatch(inputs, labels, bi)


class EncodedSplit:
    """The training windows, encoded once; `batches(epoch)` masks that epoch's batches."""

    def __init__(self, windows: Windows, sampler: LengthBucketSampler, mcfg: MLMConfig, dc: MLMDataConfig,
                 seed: int):
        self.windows, self.sampler, self.mcfg, self.dc, self.seed = windows, sampler, mcfg, dc, seed

    def batches(self, epoch: int = 0) -> MaskedBatches:
        return MaskedBatches(self.windows, self.sampler.epoch_batches(epoch), self.mcfg, self.dc, self.seed, epoch)
