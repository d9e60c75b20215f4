"""Classification data: where the labelled texts come from, tokenizers, and how a text
becomes segments of ids and a split becomes an epoch's batches (`EncodedSplit.batches`)."""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from ...data.batching import LengthBucketSampler, pad_sequences, segment, truncate
from ...data.bert_tokenizer import BertTokenizer
from ...data.datasets import ClassificationData
from ...data.readers import read_labeled_file
from ...data.tokenizers import CLS_ID, PAD_ID, Tokenizer, auto_kind, build_tokenizer, encode_with_bigrams
from ...errors import UserError
from ...models.classifier import ClassifierConfig
from ..runs import registered, user_splits
from .recipe import ClassifyDataConfig, ClassifyRecipe


def load_classification(dc) -> ClassificationData:
    """`dc` is a `ClassifyDataConfig`: a registered name, or files with an optional split."""
    name = dc.dataset
    info = registered(name)
    if info is not None:
        data = info.load(**dc.dataset_options)
        if not isinstance(data, ClassificationData):
            raise UserError(f"dataset {name!r} is not a classification data set")
        return data
    if not Path(name).exists():
        raise UserError(f"training file {name} does not exist")
    train, valid, test = user_splits(lambda p: read_labeled_file(p, dc.text_col, dc.label_col), name, dc)
    labels = sorted({lab for _, lab in train})
    if len(labels) < 2:
        raise UserError(f"{name} has {len(labels)} distinct label(s); a classifier needs at least 2")
    for split_name, split, path in (("valid", valid, dc.valid_file), ("test", test, dc.test_file)):
        unknown = sorted({lab for _, lab in split or []} - set(labels))
        if unknown:
            raise UserError(f"{path or split_name} has labels not in the training data: {unknown[:5]}; "
                            "every label must occur in training")
    meta = {"name": Path(name).name, "source": str(name)}
    meta.update(hygiene(train, {"valid": valid or [], "test": test or []}, labels))
    return ClassificationData(train, valid or [], test or [], labels, meta)


def hygiene(train, splits: dict[str, list], labels: list[str]) -> dict:
    """What the user's data says about itself, said rather than silent (meta["hygiene"], logged by
    the pipeline): labels that differ only in case (two classes, where one was likely meant), and
    valid/test texts that repeat a training text (`<split>_in_train`, their indices: the reports
    give the accuracy without them)."""
    out: dict = {"hygiene": []}
    by_case: dict[str, list[str]] = {}
    for lab in labels:
        by_case.setdefault(lab.casefold(), []).append(lab)
    for same in (v for v in by_case.values() if len(v) > 1):
        out["hygiene"].append(f"labels {', '.join(map(repr, same))} differ only in case: they are {len(same)} classes; "
                              "if one was meant, write it one way in the file")
    seen = {t for t, _ in train}
    for split, pairs in splits.items():
        repeat = [i for i, (t, _) in enumerate(pairs) if t in seen]
        if repeat:
            out[f"{split}_in_train"] = repeat
            out["hygiene"].append(f"{len(repeat)} of the {len(pairs)} {split} texts also occur in the training "
                                  f"data (the {split} report gives the accuracy without them too)")
    return out


def without_holdout_fold(data: ClassificationData, dc: ClassifyDataConfig,
                         soft: np.ndarray | None = None) -> tuple[ClassificationData, np.ndarray | None]:
    """`data` (and a teacher's rows `soft` for its training texts) with the training texts of
    fold `dc.holdout_fold` left out: text i is in fold i % `dc.folds`, in the split's fixed order.
    Unchanged without a fold."""
    if dc.max_train is not None and dc.max_train < len(data.train):
        data, soft = replace(data, train=data.train[:dc.max_train]), None if soft is None else soft[:dc.max_train]
    if dc.folds is None:
        return data, soft
    keep = np.arange(len(data.train)) % dc.folds != dc.holdout_fold
    return (replace(data, train=[p for p, k in zip(data.train, keep) if k]),
            None if soft is None else soft[keep])


@dataclass
class ClassifyBatch:
    ids: torch.Tensor  # (S, T) segments
    labels: torch.Tensor  # (B,)
    bigrams: torch.Tensor | None = None  # (S, T)
    doc_index: torch.Tensor | None = None  # (S,) document of each segment; None = one each
    soft: torch.Tensor | None = None  # (B, K) a teacher's probabilities (distillation, distill.py)

    def to(self, device) -> "ClassifyBatch":
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return ClassifyBatch(move(self.ids), move(self.labels), move(self.bigrams), move(self.doc_index),
                             move(self.soft))


class DocumentEncoder:
    """Text -> segments of token ids (and aligned bigram ids), following the data config.

    Our tokenizers: `[<cls>] tokens` (the `<cls>` only for cls pooling). A BERT tokenizer:
    `[CLS] tokens [SEP]` with its own ids, as the checkpoint was trained (so `max_len - 2`
    tokens of text per segment)."""

    def __init__(self, tokenizer, dc: ClassifyDataConfig, cls_token: bool, bigram_buckets: int):
        self.tok, self.dc, self.bigram_buckets = tokenizer, dc, bigram_buckets
        self.bigrams = bigram_buckets > 0
        self.bert = isinstance(tokenizer, BertTokenizer)
        self.prefix = [(tokenizer.cls_id, 0)] if self.bert else [(CLS_ID, 0)] if cls_token else []
        self.suffix = [(tokenizer.sep_id, 0)] if self.bert else []
        self.pad_id = tokenizer.pad_id if self.bert else PAD_ID

    def __call__(self, text: str) -> list[list[tuple[int, int]]]:
        if self.bert:
            ids, bis = self.tok.encode(text, add_special_tokens=False), None
        else:
            ids, bis = encode_with_bigrams(self.tok, text, self.bigram_buckets)
        pairs = list(zip(ids, bis or [0] * len(ids)))
        room = self.dc.max_len - len(self.prefix) - len(self.suffix)
        if self.dc.long_mode == "truncate":
            segs = [truncate(pairs, room, keep=self.dc.truncate_keep)]
        else:
            segs = segment(pairs, room, max_segments=self.dc.max_segments) or [[]]
        return [self.prefix + s + self.suffix for s in segs]


def collate(docs: Sequence[list[list[tuple[int, int]]]], labels: Sequence[int], bigrams: bool,
            soft: np.ndarray | None = None, pad_id: int = PAD_ID) -> ClassifyBatch:
    segs = [s for d in docs for s in d]
    ids, _ = pad_sequences([[i for i, _ in s] for s in segs], pad_id)  # (S, T)
    bi = pad_sequences([[b for _, b in s] for s in segs], 0)[0] if bigrams else None
    doc_index = None
    if len(segs) != len(docs):
        doc_index = torch.tensor([d for d, doc in enumerate(docs) for _ in doc])
    return ClassifyBatch(ids, torch.tensor(list(labels)), bi, doc_index,
                         None if soft is None else torch.as_tensor(soft, dtype=torch.float32))


class EncodedSplit:
    """One split, encoded once: documents as segments, labels as ids, batches on demand."""

    def __init__(self, pairs, encode: DocumentEncoder, label_ids: dict[str, int], dc: ClassifyDataConfig,
                 shuffle: bool, seed: int = 0, soft: np.ndarray | None = None):
        self.docs = [encode(t) for t, _ in pairs]
        self.labels = [label_ids[lab] for _, lab in pairs]
        self.soft = soft  # (N, K) a teacher's probabilities of these pairs, in their order, or None
        if soft is not None and soft.shape != (len(pairs), len(label_ids)):
            raise UserError(f"the teacher's probabilities have shape {soft.shape}, expected "
                            f"({len(pairs)}, {len(label_ids)}): one row per text, one column per label")
        self.bigrams, self.pad_id = encode.bigrams, encode.pad_id
        lengths = [sum(len(s) for s in d) for d in self.docs]
        self.sampler = LengthBucketSampler(lengths, batch_size=None if dc.max_tokens else dc.batch_size,
                                           max_tokens=dc.max_tokens, shuffle=shuffle, seed=seed)
        self.padding_fraction = self.sampler.padding_fraction(self.sampler.epoch_batches(0))

    def __len__(self) -> int:
        return len(self.docs)

    def batches(self, epoch: int = 0) -> list[ClassifyBatch]:
        return [collate([self.docs[i] for i in idx], [self.labels[i] for i in idx], self.bigrams,
                        None if self.soft is None else self.soft[np.asarray(idx)], self.pad_id)
                for idx in self.sampler.epoch_batches(epoch)]


def save_tokenizer(tok, run_dir: Path) -> None:
    """`tokenizer.json` in the run directory: ours (with a "type"), or a BERT checkpoint's
    tokenizer files (tokenizer.json in the HF format, vocab.txt, tokenizer_config.json)."""
    if isinstance(tok, BertTokenizer):
        tok.save(run_dir)
    else:
        tok.save(Path(run_dir) / "tokenizer.json")


def load_tokenizer(run_dir: Path, model_cfg: ClassifierConfig):
    """The tokenizer a run was trained with; a BERT backbone means a BERT tokenizer."""
    if model_cfg.bert is not None:
        return BertTokenizer.from_dir(run_dir, max_positions=model_cfg.bert.max_positions)
    return Tokenizer.load(Path(run_dir) / "tokenizer.json")


def build_tokenizer_for(dc: ClassifyDataConfig, texts: list[str], bigram_buckets: int) -> Tokenizer:
    """A fresh tokenizer; with bigram_buckets, the char tokenizer hashes character bigrams
    (any other kind gets hashed token-id bigrams from the DocumentEncoder)."""
    kind = auto_kind(texts) if dc.tokenizer == "auto" else dc.tokenizer
    if kind == "char":
        return build_tokenizer("char", texts, min_freq=dc.min_freq, lowercase=dc.lowercase, bigram_buckets=bigram_buckets)
    if kind == "word":
        return build_tokenizer("word", texts, min_freq=dc.min_freq, lowercase=dc.lowercase)
    return build_tokenizer(kind, texts, vocab_size=dc.vocab_size)


def encoder_for(recipe: ClassifyRecipe, tok) -> DocumentEncoder:
    return DocumentEncoder(tok, recipe.data, recipe.model.pooling == "cls", recipe.model.bigram_buckets)
