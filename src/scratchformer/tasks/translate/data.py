"""Translation data: parallel text from a registered set or the user's files, tokenizers, and
an encoded split whose `batches(epoch)` are token-budgeted length buckets."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from ...data.batching import LengthBucketSampler, pad_sequences
from ...data.datasets import TranslationData
from ...data.readers import read_parallel
from ...data.tokenizers import PAD_ID, Tokenizer, auto_kind, build_tokenizer
from ...errors import UserError
from ..runs import registered, user_splits
from .recipe import TranslateDataConfig


@dataclass
class TranslateBatch:
    src: torch.Tensor  # (B, S) source ids + <eos> (an XLM-R source: <s> ids </s>, padded with 1)
    tgt_in: torch.Tensor  # (B, T) <bos> y_1 .. y_n
    tgt_out: torch.Tensor  # (B, T) y_1 .. y_n <eos>
    idx: torch.Tensor  # (B,) position of each pair in its split

    def to(self, device) -> "TranslateBatch":
        return TranslateBatch(self.src.to(device), self.tgt_in.to(device), self.tgt_out.to(device), self.idx)


def read_parallel_spec(spec: str) -> list[tuple[str, str]]:
    """A `src<TAB>tgt` file, or two aligned files given as "a.src,a.tgt"."""
    if not Path(spec).exists() and "," in spec:
        a, b = spec.split(",", 1)
        return read_parallel((a.strip(), b.strip()))
    if not Path(spec).exists():
        raise UserError(f"parallel file {spec} does not exist (give a src<TAB>tgt file or 'a.src,a.tgt')")
    return read_parallel(spec)


def load_translation(dc: TranslateDataConfig) -> TranslationData:
    name = dc.dataset
    info = registered(name, path_hint="," in name)
    if info is not None:
        data = info.load(**dc.dataset_options)
        if not isinstance(data, TranslationData):
            raise UserError(f"dataset {name!r} is not a translation data set (try hsk-zh-en, fr-en, de-en)")
        return data
    train, valid, test = user_splits(read_parallel_spec, name, dc)
    return TranslationData(train, valid, test or [], "src", "tgt", {"name": Path(name.split(",")[0]).name})


def _tokenizer(kind: str, texts: list[str], vocab_size: int, min_freq: int) -> Tokenizer:
    kind = auto_kind(texts) if kind == "auto" else kind
    if kind in ("char", "word"):
        return build_tokenizer(kind, texts, min_freq=min_freq)
    return build_tokenizer(kind, texts, vocab_size=vocab_size)


def build_tokenizers(dc: TranslateDataConfig, pairs: list[tuple[str, str]]) -> tuple[Tokenizer, Tokenizer]:
    srcs, tgts = [s for s, _ in pairs], [t for _, t in pairs]
    if dc.joint_vocab:
        tok = _tokenizer(dc.src_tokenizer, srcs + tgts, dc.src_vocab_size, dc.min_freq)
        return tok, tok
    return (_tokenizer(dc.src_tokenizer, srcs, dc.src_vocab_size, dc.min_freq),
            _tokenizer(dc.tgt_tokenizer, tgts, dc.tgt_vocab_size, dc.min_freq))


def source_ids(tok, texts: list[str]) -> list[list[int]]:
    """What the encoder reads: `tok.encode_source` (tokens + <eos>; `<s> .. </s>` for a pretrained
    XLM-R source), or for any object with only `encode_batch`, the tokens + <eos>."""
    if hasattr(tok, "encode_source"):
        return tok.encode_source(texts)
    return tok.encode_batch(texts, add_eos=True)


class EncodedSplit:
    """One split, encoded once; batches by token budget over length buckets."""

    def __init__(self, pairs, src_tok: Tokenizer, tgt_tok: Tokenizer, dc: TranslateDataConfig,
                 shuffle: bool, seed: int = 0, max_len: int | None = None):
        src = source_ids(src_tok, [s for s, _ in pairs])
        self.src_pad_id = getattr(src_tok, "pad_id", PAD_ID)
        tgt = tgt_tok.encode_batch([t for _, t in pairs], add_bos=True, add_eos=True)
        keep = list(range(len(pairs)))
        if max_len is not None:
            keep = [i for i in keep if len(src[i]) <= max_len and len(tgt[i]) - 1 <= max_len]
        self.dropped = len(pairs) - len(keep)
        self.pairs = [pairs[i] for i in keep]
        self.src, self.tgt = [src[i] for i in keep], [tgt[i] for i in keep]
        lengths = [max(len(s), len(t) - 1) for s, t in zip(self.src, self.tgt)]
        self.sampler = LengthBucketSampler(lengths, batch_size=dc.batch_size, max_tokens=dc.max_tokens,
                                           shuffle=shuffle, seed=seed)
        self.n_tokens = sum(len(s) + len(t) - 1 for s, t in zip(self.src, self.tgt))

    def __len__(self) -> int:
        return len(self.pairs)

    def batches(self, epoch: int = 0) -> list[TranslateBatch]:
        out = []
        for idx in self.sampler.epoch_batches(epoch):
            src, _ = pad_sequences([self.src[i] for i in idx], self.src_pad_id)
            tgt, _ = pad_sequences([self.tgt[i] for i in idx], PAD_ID)
            out.append(TranslateBatch(src, tgt[:, :-1], tgt[:, 1:], torch.tensor(idx)))
        return out
