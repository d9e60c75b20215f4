"""Token embeddings plus absolute positions: the input side of every model."""
from __future__ import annotations

import math

import torch
from torch import nn

from ..data.specials import NUM_SPECIALS, UNK_ID
from ..nn import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, TransformerConfig


class Embeddings(nn.Module):
    """ids `(B, T)` -> `(B, T, C)`: token embedding * sqrt(C) (the paper's scaling, which keeps
    embeddings and sinusoids at the same magnitude), plus absolute positions when the config
    asks for `sinusoidal` or `learned` (RoPE/ALiBi act inside attention instead), plus
    optional hashed character-bigram (and trigram) embeddings, then dropout.

    With `trigram_buckets`, each bigram id carries both buckets, `bigram + bigram_buckets *
    trigram` (`data.bigrams.pack_ngrams`): one id per position, so the data path is unchanged.
    """

    adversarial_input = True  # train.adversarial perturbs this output (train/adversarial.py)

    def __init__(self, vocab_size: int, cfg: TransformerConfig, bigram_buckets: int = 0,
                 pad_id: int = 0, scale: bool = True, trigram_buckets: int = 0):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, cfg.d_model, padding_idx=pad_id)
        self.bigrams = nn.Embedding(bigram_buckets, cfg.d_model, padding_idx=0) if bigram_buckets else None
        self.trigrams = nn.Embedding(trigram_buckets, cfg.d_model, padding_idx=0) if trigram_buckets else None
        self.bigram_buckets = bigram_buckets
        self.scale = math.sqrt(cfg.d_model) if scale else 1.0
        if cfg.position == "sinusoidal":
            self.position = SinusoidalPositionalEncoding(cfg.d_model)
        elif cfg.position == "learned":
            self.position = LearnedPositionalEmbedding(cfg.max_len, cfg.d_model)
        else:
            self.position = None
        self.dropout = nn.Dropout(cfg.dropout)
        for table in (self.tokens, self.bigrams, self.trigrams):
            if table is not None:
                nn.init.normal_(table.weight, std=cfg.d_model ** -0.5)
                with torch.no_grad():
                    table.weight[table.padding_idx].zero_()
        for table in (self.bigrams, self.trigrams):  # hashed: a batch touches <1% of the rows
            if table is not None:
                table.sparse_gradient = True  # the trainer's fast path (train/sparse_embeddings.py)

    def forward(self, ids: torch.Tensor, bigram_ids: torch.Tensor | None = None, offset: int = 0) -> torch.Tensor:
        x = self.tokens(ids) * self.scale  # (B, T, C)
        if self.trigrams is not None and bigram_ids is not None:
            x = x + self.trigrams(bigram_ids // self.bigram_buckets) * self.scale  # (B, T, C)
            bigram_ids = bigram_ids % self.bigram_buckets
        if self.bigrams is not None and bigram_ids is not None:
            x = x + self.bigrams(bigram_ids) * self.scale
        if self.position is not None:
            x = self.position(x, offset)
        return self.dropout(x) if self.training and self.dropout.p > 0 else x


def token_dropout(ids: torch.Tensor, p: float, bigrams: torch.Tensor | None = None):
    """Word dropout (training only; Sennrich & Zhang 2019: a strong regulariser on small data):
    each ordinary token (not <pad>/<bos>/<eos>/...) becomes <unk> with probability p, and its
    bigram id (if any) becomes 0. Returns `(ids, bigrams)`."""
    if p <= 0:
        return ids, bigrams
    hit = (torch.rand(ids.shape, device=ids.device) < p) & (ids >= NUM_SPECIALS)  # (B, T)
    return ids.masked_fill(hit, UNK_ID), None if bigrams is None else bigrams.masked_fill(hit, 0)
