"""Masked-language-model pretraining: unlabeled text -> an encoder to start classifiers from.

`pretrain_mlm(recipe, out_dir)` is what `scratchformer pretrain mlm` runs. The run directory
holds config.json (task "mlm"), tokenizer.json and model.safetensors; then
`scratchformer train classify --init RUN_DIR` starts a classifier's embeddings and encoder
from it (see `tasks.classify.load_init`).

Where the text comes from (`data.datasets`, each one of):
  - a registered classification data set: the texts of its train and valid splits, labels
    unused, test never read (e.g. `inews`: titles and article bodies; `thucnews`: headlines);
  - a registered language-modelling corpus (`sanguo`, `shakespeare`): its non-empty lines;
  - a path to a text file: one document per non-empty line.
Each document is tokenized once and cut into windows of `max_len` tokens. Masking is
dynamic: every epoch draws new masks, from a generator seeded by (seed, epoch, batch), so a
resumed run sees exactly the batches it would have seen.
"""
from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..data.batching import LengthBucketSampler, pad_sequences
from ..data.datasets import ClassificationData
from ..data.registry import DATASETS, get_dataset
from ..data.tokenizers import NUM_SPECIALS, PAD_ID, Tokenizer, build_tokenizer
from ..errors import UserError
from ..models.mlm import IGNORE, MaskedLM, MLMConfig, mask_tokens
from ..nn import JsonConfig
from ..train import TrainConfig, Trainer
from .data_source import looks_like_path


@dataclass
class MLMDataConfig(JsonConfig):
    datasets: list = field(default_factory=lambda: ["inews", "thucnews"])
    dataset_options: dict = field(default_factory=dict)  # per data set: {"inews": {"fields": "content"}}
    tokenizer: str = "char"  # char | word | bpe | wordpiece
    vocab_size: int = 8000  # bpe / wordpiece
    min_freq: int = 2  # char / word: rarer tokens become <unk>
    lowercase: bool = False
    max_len: int = 128  # tokens per window
    batch_size: int = 64
    max_tokens: int | None = None  # token budget per batch instead of batch_size
    mask_prob: float = 0.15
    span: int = 1  # masked runs: 1 = single tokens (BERT), 2 = whole bigrams (Chinese words)
    valid_frac: float = 0.02  # documents held out for the masked-token accuracy
    valid_max_windows: int = 2000

    def __post_init__(self) -> None:
        if isinstance(self.datasets, str):
            self.datasets = [d for d in self.datasets.split(",") if d.strip()]
        if not self.datasets:
            raise UserError("pretrain mlm needs text: give --data DATASET_OR_FILE (repeatable)")
        if not 0.0 < self.mask_prob < 1.0:
            raise UserError(f"mask_prob must be in (0, 1), got {self.mask_prob}")
        if self.span < 1 or self.max_len < 2:
            raise UserError("span must be >= 1 and max_len >= 2")
        if not 0.0 <= self.valid_frac < 0.5:
            raise UserError(f"valid_frac must be in [0, 0.5), got {self.valid_frac}")


@dataclass
class MLMRecipe(JsonConfig):
    task: str = "mlm"
    data: MLMDataConfig = field(default_factory=MLMDataConfig)
    model: MLMConfig = field(default_factory=MLMConfig)
    train: TrainConfig = field(default_factory=lambda: TrainConfig(
        lr=1e-3, warmup_steps=500, max_minutes=20, epochs=20, metric="accuracy", metric_mode="max",
        eval_every=500))


# --------------------------------------------------------------------------- text


def pretraining_texts(dc: MLMDataConfig, log=print) -> list[str]:
    """All documents named by `dc.datasets` (see the module docstring)."""
    docs: list[str] = []
    for name in dc.datasets:
        name = name.strip()
        opts = dc.dataset_options.get(name, {})
        if name.lower().replace("_", "-") in DATASETS:
            info = get_dataset(name)
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
        else:
            get_dataset(name)  # raises "unknown dataset ... did you mean"
            part = []
        part = [t.strip() for t in part if t.strip()]
        log(f"mlm text: {name}: {len(part)} documents, {sum(map(len, part)) / 1e6:.2f}M chars")
        docs += part
    if not docs:
        raise UserError(f"no text found in {', '.join(dc.datasets)}")
    return docs


def _id_bigrams(ids: Sequence[int], n: int) -> list[int]:
    """Hashed bigrams of token ids (for non-char tokenizers): bucket in [1, n)."""
    prev = [-1] + list(ids[:-1])
    return [1 + zlib.crc32(f"{p} {c}".encode()) % (n - 1) for p, c in zip(prev, ids)]


def encode_with_bigrams(tok: Tokenizer, text: str, bigram_buckets: int) -> tuple[list[int], list[int] | None]:
    """ids and, when `bigram_buckets`, aligned hashed bigram ids (char bigrams for the char
    tokenizer, token-id bigrams otherwise)."""
    ids = tok.encode(text)
    if not bigram_buckets:
        return ids, None
    if hasattr(tok, "encode_bigrams") and getattr(tok, "bigram_buckets", 0) == bigram_buckets:
        return ids, tok.encode_bigrams(text)
    return ids, _id_bigrams(ids, bigram_buckets)


# --------------------------------------------------------------------------- batches


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


# --------------------------------------------------------------------------- task


class MLMTask:
    """The Trainer's view of MLM pretraining: loss summed over the chosen positions."""

    def __init__(self, model: MaskedLM, recipe: MLMRecipe, tokenizer: Tokenizer):
        self.model, self.recipe, self.tokenizer = model, recipe, tokenizer

    def count(self, b: MLMBatch) -> int:
        return int((b.labels != IGNORE).sum())

    def batch_tokens(self, b: MLMBatch) -> int:
        return int((b.inputs != PAD_ID).sum())

    def loss_sum(self, b: MLMBatch):
        logits, labels = self.model(b.inputs, b.labels, b.bigrams)
        logits = logits.float()
        loss = F.cross_entropy(logits, labels, reduction="sum")
        return loss, {"accuracy": float((logits.argmax(-1) == labels).sum())}

    def evaluate(self, batches) -> dict[str, float]:
        loss = correct = n = 0.0
        for b in batches:
            logits, labels = self.model(b.inputs, b.labels, b.bigrams)
            logits = logits.float()
            loss += float(F.cross_entropy(logits, labels, reduction="sum"))
            correct += float((logits.argmax(-1) == labels).sum())
            n += len(labels)
        n = max(n, 1.0)
        return {"loss": loss / n, "accuracy": correct / n, "perplexity": float(np.exp(min(loss / n, 50.0)))}

    def save(self, run_dir: Path) -> None:
        run_dir = Path(run_dir)
        self.recipe.save_json(run_dir / "config.json")
        self.tokenizer.save(run_dir / "tokenizer.json")


def pretrain_mlm(recipe: MLMRecipe, out_dir: str | Path, resume: bool = False, log=print) -> dict[str, Any]:
    """Read the text, build (or reload) the tokenizer, pretrain, return the Trainer's summary."""
    out_dir = Path(out_dir)
    dc, mcfg = recipe.data, recipe.model
    docs = pretraining_texts(dc, log)
    rng = np.random.default_rng(recipe.train.seed)
    order = rng.permutation(len(docs))
    n_valid = int(round(len(docs) * dc.valid_frac))
    valid_docs = [docs[i] for i in order[:n_valid]]
    train_docs = [docs[i] for i in order[n_valid:]]
    if resume:
        tok = Tokenizer.load(out_dir / "tokenizer.json")
    else:
        if dc.tokenizer in ("char", "word"):
            opts = dict(min_freq=dc.min_freq, lowercase=dc.lowercase)
            if dc.tokenizer == "char" and mcfg.bigram_buckets:
                opts["bigram_buckets"] = mcfg.bigram_buckets
            tok = build_tokenizer(dc.tokenizer, train_docs, **opts)
        else:
            tok = build_tokenizer(dc.tokenizer, train_docs, vocab_size=dc.vocab_size)
        mcfg.mask_id = tok.vocab_size
        mcfg.vocab_size = tok.vocab_size + 1
        mcfg.n_specials = NUM_SPECIALS
    encode = lambda texts: [encode_with_bigrams(tok, t, mcfg.bigram_buckets) for t in texts]  # noqa: E731
    train = Windows(encode(train_docs), dc.max_len)
    valid = Windows(encode(valid_docs), dc.max_len) if valid_docs else None
    log(f"mlm data: {len(train_docs)} train documents -> {len(train)} windows, {train.tokens() / 1e6:.2f}M tokens; "
        f"{len(valid_docs)} valid documents; {type(tok).__name__} vocab {tok.vocab_size} (+1 mask)")
    sampler = LengthBucketSampler(train.lengths, batch_size=None if dc.max_tokens else dc.batch_size,
                                  max_tokens=dc.max_tokens, shuffle=True, seed=recipe.train.seed)
    seed = recipe.train.seed
    train_batches = lambda epoch: MaskedBatches(train, sampler.epoch_batches(epoch), mcfg, dc, seed, epoch)  # noqa: E731
    valid_batches = None
    if valid is not None:
        keep = np.random.default_rng(seed + 1).permutation(len(valid))[: dc.valid_max_windows]
        vs = LengthBucketSampler(valid.lengths[keep], batch_size=None if dc.max_tokens else dc.batch_size,
                                 max_tokens=dc.max_tokens, shuffle=False)
        fixed = [make_masked_batch(valid, keep[b], mcfg, dc, (seed, -1, k))
                 for k, b in enumerate(vs.epoch_batches(0))]
        valid_batches = lambda: fixed  # noqa: E731  the same masks at every evaluation
    torch.manual_seed(seed)
    model = MaskedLM(mcfg)
    log(f"model: {sum(p.numel() for p in model.parameters()) / 1e6:.2f}M parameters "
        f"(d_model {mcfg.encoder.d_model}, {mcfg.encoder.n_layers} layers, bigram buckets {mcfg.bigram_buckets})")
    task = MLMTask(model, recipe, tok)
    trainer = Trainer(task, train_batches, valid_batches, recipe.train, out_dir)
    summary = trainer.fit(resume=resume)
    (out_dir / "pretrain_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return summary
