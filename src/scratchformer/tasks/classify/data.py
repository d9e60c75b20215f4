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
from ...data.prepared import TSV_SUFFIXES, LazyPairs, labeled_rows, prepared_enabled
from ...data.prepared_tokens import TokenShards, vocab_tokenizer
from ...data.readers import read_labeled_file, seeded_split_indices
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
    if _prepared_source(name, dc):
        return _load_prepared(name, dc)
    train, valid, test = user_splits(lambda p: read_labeled_file(p, dc.text_col, dc.label_col), name, dc)
    labels = sorted({lab for _, lab in train})
    if len(labels) < 2:  # the file's rows: training and the splits not given as files of their own
        rows = list(train) + [r for split, given in ((valid, dc.valid_file), (test, dc.test_file)) if not given
                              for r in split or []]
        raise UserError(too_few_labels(name, rows, train, dc))
    for split_name, split, path in (("valid", valid, dc.valid_file), ("test", test, dc.test_file)):
        unknown = sorted({lab for _, lab in split or []} - set(labels))
        if unknown:
            raise UserError(f"{path or split_name} has labels not in the training data: {unknown[:5]}; "
                            "every label must occur in training")
    meta = {"name": Path(name).name, "source": str(name)}
    meta.update(hygiene(train, {"valid": valid or [], "test": test or []}, labels))
    return ClassificationData(train, valid or [], test or [], labels, meta)


def _labels_of(pairs) -> list[str]:
    return pairs.label_names() if hasattr(pairs, "label_names") else sorted({lab for _, lab in pairs})


def too_few_labels(name: str, rows, train, dc) -> str:
    """Fewer than 2 labels in the training split, counted where they are: the file's own labels
    when it has fewer than 2 (one row is one label, even when the split left training none of it),
    else the training split's, with how many rows it got."""
    n_train, file_labels = len(train), _labels_of(rows)
    if len(file_labels) < 2:
        msg = (f"{name} has {len(rows)} labelled row(s) with {len(file_labels)} distinct label(s); a classifier "
               f"needs at least 2 labels")
    else:
        msg = (f"{name}: the training split has {n_train} row(s) with {len(_labels_of(train))} of the file's "
               f"{len(file_labels)} labels; a classifier needs at least 2 labels in training")
    if n_train < 10:  # a header and a row or two: the split, not the labels, is what is short
        split = "" if dc.valid_file or dc.test_file else " (80/10/10 into train/valid/test)"
        msg += f"; the file has too few rows for its split{split}: give at least a few rows of each label"
    return msg


def hygiene(train, splits: dict[str, Sequence], labels: list[str]) -> dict:
    """What the user's data says about itself, said rather than silent (meta["hygiene"], logged by
    the pipeline): labels that differ only in case (two classes, where one was likely meant), and
    valid/test texts that repeat a training text (`<split>_in_train`, their indices: the reports
    give the accuracy without them). Texts are compared by 64-bit digests held in one numpy
    array, so prepared data of millions of rows is checked in flat memory."""
    import unicodedata

    out: dict = {"hygiene": []}
    by_case: dict[str, list[str]] = {}
    for lab in labels:  # NFKC then casefold: "Café" in NFC and in NFD, or "ＡＢ" and "AB", are one key
        by_case.setdefault(unicodedata.normalize("NFKC", lab).casefold(), []).append(lab)
    for same in (v for v in by_case.values() if len(v) > 1):
        if len({unicodedata.normalize("NFKC", lab) for lab in same}) < len(same):
            forms = ", ".join(f"{lab!r} ({'NFC' if unicodedata.is_normalized('NFC', lab) else 'not NFC'})" for lab in same)
            out["hygiene"].append(f"labels {forms} look the same but differ in their Unicode form (NFC/NFD or "
                                  f"full-width): they are {len(same)} classes; if one was meant, write it one way "
                                  "in the file (e.g. NFC)")
        else:
            out["hygiene"].append(f"labels {', '.join(map(repr, same))} differ only in case: they are {len(same)} "
                                  "classes; if one was meant, write it one way in the file")
    seen = _text_digests(train)
    seen.sort()  # in place, looked up by binary search (np.isin sorted copies of both: +137 MB at 3M rows)
    for split, pairs in splits.items():
        if not len(pairs):
            continue
        digests = _text_digests(pairs)
        at = np.minimum(np.searchsorted(seen, digests), max(len(seen) - 1, 0))
        repeat = np.flatnonzero(seen[at] == digests).tolist() if len(seen) else []
        if repeat:
            out[f"{split}_in_train"] = repeat
            out["hygiene"].append(f"{len(repeat)} of the {len(pairs)} {split} texts also occur in the training "
                                  f"data (the {split} report gives the accuracy without them too)")
    return out


def _text_digests(pairs) -> np.ndarray:
    """(N,) uint64: the first 8 bytes of each text's blake2b digest (a collision among a few million
    texts has odds of about 1e-7)."""
    import hashlib

    texts = pairs.texts() if is_prepared(pairs) else (t for t, _ in pairs)  # prepared: read in blocks
    return np.fromiter((int.from_bytes(hashlib.blake2b(t.encode("utf-8"), digest_size=8).digest(), "little")
                        for t in texts), dtype=np.uint64, count=len(pairs))


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
        if getattr(text, "encoded_by", None) is self:  # tokenized already (a served text: `tokenized`)
            return self.shape(*text.encoded)
        return self.shape(*self.encode(text))

    def encode(self, text: str) -> tuple[list[int], list[int] | None]:
        """A text's ids (no specials) and aligned bigram ids (None without bigrams)."""
        if self.bert:
            return self.tok.encode(text, add_special_tokens=False), None
        return encode_with_bigrams(self.tok, text, self.bigram_buckets)

    def tokenized(self, text: str):
        """`text` with its ids (a `Tokenized`): what this encoder reads later without tokenizing
        again; `n_tokens` counts the ids (`Classifier.count_tokens`)."""
        from ...data.tokenizers import Tokenized

        encoded = self.encode(text)
        return Tokenized.of(text, encoded, self, len(encoded[0]))

    def shape(self, ids: list[int], bis: list[int] | None) -> list[list[tuple[int, int]]]:
        """A text's ids (and aligned bigram ids) as the segments the model reads (prepared data
        stores the ids; this is the part that depends on the data config)."""
        pairs = list(zip(ids, bis or [0] * len(ids)))
        room = self.dc.max_len - len(self.prefix) - len(self.suffix)
        if self.dc.long_mode == "truncate":
            segs = [truncate(pairs, room, keep=self.dc.truncate_keep)]
        else:
            segs = segment(pairs, room, max_segments=self.dc.max_segments) or [[]]
        return [self.prefix + s + self.suffix for s in segs]

    def lengths(self, n_ids: np.ndarray) -> np.ndarray:
        """The tokens `shape` gives a text of `n_ids` ids (all its segments), for many texts at once."""
        n_ids = np.asarray(n_ids, dtype=np.int64)
        extra = len(self.prefix) + len(self.suffix)
        room = self.dc.max_len - extra
        if self.dc.long_mode == "truncate":
            return np.minimum(n_ids, room) + extra
        n_segs = np.clip(-(-n_ids // room), 1, self.dc.max_segments)  # segment(): ceil(n / room) windows, >= 1
        return np.minimum(n_ids, room * self.dc.max_segments) + n_segs * extra


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


class PreparedSplit:
    """One split read from prepared data (`data/prepared.py`): each batch's rows read from the
    ids file (`os.pread`, nothing mapped) and collated when it is taken. The same documents, lengths, sampler and so the same
    batches as `EncodedSplit` of the same texts, in memory flat in the number of rows."""

    def __init__(self, pairs: LazyPairs, shards: TokenShards, encode: DocumentEncoder, label_ids: dict[str, int],
                 dc: ClassifyDataConfig, shuffle: bool, seed: int = 0):
        self.index, self.shards, self.encode = pairs.index, shards, encode
        to_id = np.asarray([label_ids.get(n, -1) for n in pairs.rows.names], dtype=np.int32)
        self.labels = to_id[np.asarray(pairs.rows.labels[self.index])] if len(self.index) else np.zeros(0, np.int32)
        self.soft = None
        self.bigrams, self.pad_id = encode.bigrams, encode.pad_id
        lengths = shards.lengths(self.index)  # ids per row (int32): the sampler's one number per row
        for a in range(0, len(lengths), 1 << 18):  # -> tokens per document, in place, in pieces (int64 inside)
            lengths[a:a + (1 << 18)] = encode.lengths(lengths[a:a + (1 << 18)])
        self.sampler = LengthBucketSampler(lengths, batch_size=None if dc.max_tokens else dc.batch_size,
                                           max_tokens=dc.max_tokens, shuffle=shuffle, seed=seed)
        self.padding_fraction = self.sampler.padding_fraction(self.sampler.epoch_arrays(0))

    def __len__(self) -> int:
        return len(self.index)

    def doc(self, j: int) -> list[list[tuple[int, int]]]:
        return self.encode.shape(*self.shards.row(int(self.index[j])))

    @property
    def docs(self) -> "_Docs":
        return _Docs(self)

    def batch(self, idx: Sequence[int]) -> ClassifyBatch:
        idx = np.asarray(idx, dtype=np.int64)
        dc = self.encode.dc
        if dc.long_mode == "truncate" and dc.truncate_keep in ("head", "tail") and not self.encode.suffix:
            return self._gathered(idx, dc.truncate_keep == "tail")
        return collate([self.doc(i) for i in idx], self.labels[idx].tolist(), self.bigrams, None, self.pad_id)

    def _gathered(self, idx: np.ndarray, tail: bool) -> ClassifyBatch:
        """`collate` of truncated documents as one gather from the ids file (the same tensors;
        the per-row Python of `shape` + `collate` was most of the data wait)."""
        rows = self.index[idx]
        start, end = self.shards.bounds(rows)  # (B,) each
        room = self.encode.dc.max_len - len(self.encode.prefix)
        n = np.minimum(end - start, room)  # (B,) ids kept of each text
        first = end - n if tail else start
        width = int(n.max()) if len(n) else 0
        cols = np.arange(width)
        keep = cols[None, :] < n[:, None]  # (B, W)
        at = (first[:, None] + cols[None, :])[keep]  # positions of the kept ids in the flat file, row by row
        p = len(self.encode.prefix)

        def matrix(flat, fill: int, head: list[int]) -> torch.Tensor:
            out = np.full((len(rows), p + width), fill, dtype=np.int64)  # (B, T)
            body = out[:, p:]  # (B, W) a view
            body[keep] = flat[at]  # boolean assignment fills row by row, as `at` runs
            out[:, :p] = head
            return torch.from_numpy(out)

        ids = matrix(self.shards.ids, self.pad_id, [i for i, _ in self.encode.prefix])
        if ids.numel():  # an id out of range is never fed to the model: one line, not an IndexError
            self.shards.check_ids(int(ids.max()))
        bi = matrix(self.shards.bigrams, 0, [0] * p) if self.bigrams else None
        return ClassifyBatch(ids, torch.from_numpy(self.labels[idx].astype(np.int64)), bi, None, None)

    def batches(self, epoch: int = 0) -> "LazyBatches":
        return LazyBatches(self.batch, self.sampler.epoch_arrays(epoch))


class _Docs(Sequence):
    def __init__(self, split: PreparedSplit):
        self.split = split

    def __len__(self) -> int:
        return len(self.split)

    def __getitem__(self, j):
        return self.split.doc(j)


class LazyBatches(Sequence):
    """An epoch's batches, each collated when it is taken (`make(indices)`), so that an epoch
    of millions of rows holds its index lists, not its tensors."""

    def __init__(self, make, index_batches: list[list[int]]):
        self.make, self.index_batches = make, index_batches

    def __len__(self) -> int:
        return len(self.index_batches)

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self.make(b) for b in self.index_batches[k]]
        return self.make(self.index_batches[k])

    def __iter__(self):
        for b in self.index_batches:
            yield self.make(b)


def _prepared_source(name: str, dc) -> bool:
    files = [name] + [f for f in (dc.valid_file, dc.test_file) if f]
    return prepared_enabled() and all(Path(f).suffix.lower() in TSV_SUFFIXES for f in files)


def _load_prepared(name: str, dc) -> ClassificationData:
    """`load_classification` of the user's TSV files through their prepared row index: the same
    splits (the seeded 80/10/10 rule by row number), labels and errors, texts read on demand."""
    import sys

    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    rows = labeled_rows(name, dc.text_col, dc.label_col, log=log)
    other = {f: labeled_rows(f, dc.text_col, dc.label_col, log=log) for f in (dc.valid_file, dc.test_file) if f}
    whole = lambda r: LazyPairs(r, np.arange(len(r)))  # noqa: E731
    valid = whole(other[dc.valid_file]) if dc.valid_file else None
    test = whole(other[dc.test_file]) if dc.test_file else None
    if valid is None and test is None:
        tr, va, te = seeded_split_indices(len(rows), 0, (0.8, 0.1, 0.1))
        train, valid, test = LazyPairs(rows, tr), LazyPairs(rows, va), LazyPairs(rows, te)
    elif valid is None:
        tr, va = seeded_split_indices(len(rows), 0, (0.9, 0.1))
        train, valid = LazyPairs(rows, tr), LazyPairs(rows, va)
    else:
        train = whole(rows)
    labels = train.label_names()
    if len(labels) < 2:
        raise UserError(too_few_labels(name, whole(rows), train, dc))  # `rows`: the whole file, whatever its split
    for split_name, split, path in (("valid", valid, dc.valid_file), ("test", test, dc.test_file)):
        unknown = sorted(set(split.label_names() if split is not None else []) - set(labels))
        if unknown:
            raise UserError(f"{path or split_name} has labels not in the training data: {unknown[:5]}; "
                            "every label must occur in training")
    meta = {"name": Path(name).name, "source": str(name), "prepared": str(rows.folder)}
    meta.update(hygiene(train, {"valid": valid if valid is not None else [], "test": test if test is not None else []},
                        labels))
    return ClassificationData(train, valid if valid is not None else [], test if test is not None else [], labels, meta)


def labeled_pairs(path: str, text_col=None, label_col=None):
    """The (text, label) pairs of one labelled file: for a TSV file its prepared rows (read on
    demand, tokenized once), else `read_labeled_file`'s list."""
    if prepared_enabled() and Path(path).suffix.lower() in TSV_SUFFIXES and Path(path).is_file():
        import sys

        rows = labeled_rows(path, text_col, label_col, log=lambda m: print(m, file=sys.stderr))
        return LazyPairs(rows, np.arange(len(rows)))
    return read_labeled_file(path, text_col, label_col)


def is_prepared(pairs) -> bool:
    return isinstance(pairs, LazyPairs)


def texts_of(pairs) -> Sequence[str]:
    """The texts of `pairs`: a list, or for prepared data a sequence read on demand."""
    return pairs.texts() if is_prepared(pairs) else [t for t, _ in pairs]


def gold_ids(pairs: Sequence[tuple[str, str]], labels: list[str]) -> np.ndarray:
    """`(N,)` the label id of each labelled pair, in `labels` order."""
    ids = {lab: i for i, lab in enumerate(labels)}
    if is_prepared(pairs):  # from the row index, no text read
        to_id = np.asarray([ids.get(n, -1) for n in pairs.rows.names], dtype=np.int64)
        return to_id[np.asarray(pairs.rows.labels[pairs.index])]
    return np.asarray([ids[lab] for _, lab in pairs], dtype=np.int64)


def tokenizer_for_split(dc: ClassifyDataConfig, train, bigram_buckets: int, trigram_buckets: int = 0) -> Tokenizer:
    """`build_tokenizer_for` of the training texts; for prepared data counted in parallel
    from the file (char, word) or streamed into the `tokenizers` trainer (bpe, wordpiece).
    Under torchrun every process calls it at the same point: a counted vocabulary is cached,
    so it is built once (`build_once`: rank 0 counts it first, the others read it)."""
    if not is_prepared(train):
        return build_tokenizer_for(dc, [t for t, _ in train], bigram_buckets, trigram_buckets)
    kind = ("char" if train.cjk_fraction() > 0.30 else "bpe") if dc.tokenizer == "auto" else dc.tokenizer
    _check_trigrams(kind, trigram_buckets)
    if kind in ("char", "word"):
        import sys

        from ...train.once import build_once

        return build_once(lambda: vocab_tokenizer(kind, train, dc.min_freq, dc.lowercase,
                                                  bigram_buckets if kind == "char" else 0,
                                                  log=lambda m: print(m, file=sys.stderr), trigram_buckets=trigram_buckets))
    return build_tokenizer(kind, train.texts(), vocab_size=dc.vocab_size)


def prepare_classification(recipe: ClassifyRecipe, log=print) -> dict:
    """What `train classify` with `recipe` would prepare, built now (or found in the cache):
    the row index of each file, the tokenizer counted on the training split, the token ids.
    Returns what was built, for `scratchformer prepare` to print."""
    dc = recipe.data
    if registered(dc.dataset) is not None or not _prepared_source(dc.dataset, dc):
        raise UserError(f"{dc.dataset}: prepared data is made for the user's tab-separated files "
                        f"({', '.join(TSV_SUFFIXES)}); registered data sets, CSV and JSON lines are read in memory")
    if recipe.model.init:
        raise UserError("a run with model.init (--init) uses its backbone's tokenizer and reads its data in memory; "
                        "prepare the data without it")
    data = load_classification(dc)
    tok = tokenizer_for_split(dc, data.train, recipe.model.bigram_buckets, recipe.model.trigram_buckets)
    enc = encoder_for(recipe, tok)
    from ...data.prepared_tokens import token_shards

    out: dict = {"dataset": dc.dataset, "tokenizer": tok.kind, "vocab_size": tok.vocab_size, "labels": len(data.labels),
                 "splits": {k: len(getattr(data, k)) for k in ("train", "valid", "test")}, "files": []}
    seen = set()
    for pairs in (data.train, data.valid, data.test):
        if not is_prepared(pairs) or pairs.rows.folder in seen:
            continue
        seen.add(pairs.rows.folder)
        shards = token_shards(pairs.rows, tok, enc.bigram_buckets, log=log)
        out["files"].append({"file": str(pairs.rows.path), "rows": len(pairs.rows), "index": str(pairs.rows.folder),
                             "tokens": int(shards.meta["tokens"]), "dtype": shards.meta["dtype"],
                             "folder": str(shards.folder), "mb_per_s": shards.meta.get("mb_per_s"),
                             "bytes": sum(f.stat().st_size for f in shards.folder.iterdir() if f.is_file())})
    return out


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


def _check_trigrams(kind: str, trigram_buckets: int) -> None:
    if trigram_buckets and kind != "char":
        raise UserError(f"model.trigram_buckets hashes character trigrams: it needs data.tokenizer=char "
                        f"(this run's is {kind}); set model.trigram_buckets=0")


def build_tokenizer_for(dc: ClassifyDataConfig, texts: list[str], bigram_buckets: int,
                        trigram_buckets: int = 0) -> Tokenizer:
    """A fresh tokenizer; with bigram_buckets, the char tokenizer hashes character bigrams
    (any other kind gets hashed token-id bigrams from the DocumentEncoder), with
    trigram_buckets also character trigrams (the char tokenizer only)."""
    kind = auto_kind(texts) if dc.tokenizer == "auto" else dc.tokenizer
    _check_trigrams(kind, trigram_buckets)
    if kind == "char":
        return build_tokenizer("char", texts, min_freq=dc.min_freq, lowercase=dc.lowercase,
                               bigram_buckets=bigram_buckets, trigram_buckets=trigram_buckets)
    if kind == "word":
        return build_tokenizer("word", texts, min_freq=dc.min_freq, lowercase=dc.lowercase)
    return build_tokenizer(kind, texts, vocab_size=dc.vocab_size)


def encoder_for(recipe: ClassifyRecipe, tok) -> DocumentEncoder:
    return DocumentEncoder(tok, recipe.data, recipe.model.pooling == "cls", recipe.model.bigram_buckets)
