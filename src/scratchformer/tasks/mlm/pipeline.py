"""`pretrain mlm`: read the text, build (or reload) the tokenizer, pretrain."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ...config import check_model_memory
from ...data.batching import LengthBucketSampler
from ...fileio import atomic_write_text
from ...data.tokenizers import NUM_SPECIALS, Tokenizer, build_tokenizer, encode_with_bigrams
from ...models.mlm import MaskedLM
from ...train import Trainer
from ...train.once import build_once, write_once
from ..runs import count_parameters
from .data import EncodedSplit, Windows, make_masked_batch, pretraining_texts
from .recipe import MLMRecipe
from .task import MLMTask


def held_out(docs: list[str], dc, seed: int) -> tuple[list[str], list[str]]:
    """(valid, train) documents: a seeded permutation, the first `valid_frac` held out."""
    order = np.random.default_rng(seed).permutation(len(docs))
    n_valid = int(round(len(docs) * dc.valid_frac))
    return [docs[i] for i in order[:n_valid]], [docs[i] for i in order[n_valid:]]


def encode_windows(tok, texts: list[str], mcfg) -> list:
    return [encode_with_bigrams(tok, t, mcfg.bigram_buckets) for t in texts]


def training_split(train_docs: list[str], tok, recipe: MLMRecipe) -> EncodedSplit:
    """The training windows, bucketed by length and shuffled with the run's seed; `batches(epoch)`
    masks that epoch's batches (the same every time)."""
    dc, mcfg = recipe.data, recipe.model
    train = Windows(encode_windows(tok, train_docs, mcfg), dc.max_len)
    sampler = LengthBucketSampler(train.lengths, batch_size=None if dc.max_tokens else dc.batch_size,
                                  max_tokens=dc.max_tokens, shuffle=True, seed=recipe.train.seed)
    return EncodedSplit(train, sampler, mcfg, dc, recipe.train.seed)


def pretrain_mlm(recipe: MLMRecipe, out_dir: str | Path, resume: bool = False, log=print) -> dict[str, Any]:
    """Read the text, build (or reload) the tokenizer, pretrain, return the Trainer's summary."""
    out_dir = Path(out_dir)
    given, dc = recipe, recipe.data
    texts = build_once(lambda: pretraining_texts(dc, log))  # may fetch a data set into the cache
    valid_docs, train_docs = held_out(texts, dc, recipe.train.seed)
    if resume:
        tok = Tokenizer.load(out_dir / "tokenizer.json")
    else:
        if dc.tokenizer in ("char", "word"):
            opts = dict(min_freq=dc.min_freq, lowercase=dc.lowercase)
            if dc.tokenizer == "char" and recipe.model.bigram_buckets:
                opts["bigram_buckets"] = recipe.model.bigram_buckets
            tok = build_tokenizer(dc.tokenizer, train_docs, **opts)
        else:
            tok = build_tokenizer(dc.tokenizer, train_docs, vocab_size=dc.vocab_size)

    def derive(r: MLMRecipe) -> None:  # the mask token gets the id after the tokenizer's vocabulary
        if not resume:
            r.model.mask_id, r.model.vocab_size, r.model.n_specials = tok.vocab_size, tok.vocab_size + 1, NUM_SPECIALS

    recipe = recipe.resolved(derive)
    dc, mcfg = recipe.data, recipe.model
    split = training_split(train_docs, tok, recipe)
    train = split.windows
    valid = Windows(encode_windows(tok, valid_docs, mcfg), dc.max_len) if valid_docs else None
    log(f"mlm data: {len(train_docs)} train documents -> {len(train)} windows, {train.tokens() / 1e6:.2f}M tokens; "
        f"{len(valid_docs)} valid documents; {type(tok).__name__} vocab {tok.vocab_size} (+1 mask)")
    seed = recipe.train.seed
    valid_batches = None
    if valid is not None:
        keep = np.random.default_rng(seed + 1).permutation(len(valid))[: dc.valid_max_windows]
        vs = LengthBucketSampler(valid.lengths[keep], batch_size=None if dc.max_tokens else dc.batch_size,
                                 max_tokens=dc.max_tokens, shuffle=False)
        fixed = [make_masked_batch(valid, keep[b], mcfg, dc, (seed, -1, k))
                 for k, b in enumerate(vs.epoch_batches(0))]
        valid_batches = lambda: fixed  # noqa: E731  the same masks at every evaluation
    check_model_memory(lambda: MaskedLM(mcfg), "the masked language model")  # before any allocation
    torch.manual_seed(seed)
    model = MaskedLM(mcfg)
    log(f"model: {count_parameters(model) / 1e6:.2f}M parameters "
        f"(d_model {mcfg.encoder.d_model}, {mcfg.encoder.n_layers} layers, bigram buckets {mcfg.bigram_buckets})")
    task = MLMTask(model, recipe, tok, given)
    trainer = Trainer(task, split.batches, valid_batches, recipe.train, out_dir)
    summary = trainer.fit(resume=resume)
    write_once(lambda: atomic_write_text(out_dir / "pretrain_summary.json", json.dumps(summary, indent=1) + "\n",
                                         root=out_dir))
    return summary
