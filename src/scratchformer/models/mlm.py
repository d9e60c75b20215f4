"""Masked language model (BERT-style pretraining) on our own Embeddings + Encoder.

    ids (B, T) --mask_tokens--> inputs, labels          (15% of real tokens chosen;
                                                          of those 80% [MASK], 10% random, 10% kept)
    inputs -> Embeddings -> Encoder -> h (B, T, C)
    h[chosen] -> dense -> GELU -> LayerNorm -> @ E^T + b  (E: the input token embedding, tied)

The embeddings and the encoder have exactly the classifier's module names (`embed.*`,
`encoder.*`), so `scratchformer train classify --init RUN` copies them one to one.

Our tokenizers have no mask token, so the MLM vocabulary has one more row than the
tokenizer: `mask_id = tokenizer.vocab_size`. A classifier started from the run keeps that
row (it is simply never used after pretraining).

Hashed bigram ids would give a masked character away: the bigram at position i hashes
(prev, char_i) and the one at i+1 hashes (char_i, next). So every chosen position also
loses the bigram ids at i and i+1 (bucket 0, the zero vector).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UserError
from ..config import JsonConfig, check_buckets, check_count, check_table
from ..data.specials import NUM_SPECIALS
from ..nn import Encoder, LayerNorm, Linear, TransformerConfig
from .embedding import Embeddings

IGNORE = -100  # label of positions that are not predicted (F.cross_entropy's ignore_index)


@dataclass
class MLMConfig(JsonConfig):
    vocab_size: int = 0  # tokenizer vocabulary + 1 (the mask token)
    mask_id: int = 0  # = tokenizer vocabulary size
    n_specials: int = NUM_SPECIALS  # ids below this are special (<pad> <unk> <bos> <eos> <cls>): never chosen
    encoder: TransformerConfig = field(default_factory=lambda: TransformerConfig(
        d_model=128, n_heads=4, d_ff=512, n_layers=2, dropout=0.1, norm_first=True,
        activation="gelu", position="sinusoidal"))
    bigram_buckets: int = 0

    def __post_init__(self) -> None:
        check_count("model.vocab_size", self.vocab_size, least=0, hint=" (0: the tokenizer's + 1)")
        check_count("model.mask_id", self.mask_id, least=0)
        check_count("model.n_specials", self.n_specials, least=0)
        check_buckets("model.bigram_buckets", self.bigram_buckets)
        if self.vocab_size and not self.n_specials <= self.mask_id < self.vocab_size:
            raise UserError(f"model.mask_id={self.mask_id} must be a real id of the vocabulary "
                            f"(in {self.n_specials}..{self.vocab_size - 1}); leave it to the tokenizer")
        check_table("model.bigram_buckets", self.bigram_buckets, self.encoder.d_model)


def mask_tokens(ids: torch.Tensor, mask_id: int, vocab_size: int, n_specials: int = NUM_SPECIALS,
                mask_prob: float = 0.15, span: int = 1,
                generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """BERT's masking. ids `(B, T)` -> `(inputs, labels)`, both `(B, T)`; `vocab_size` is the
    tokenizer's (real ids are below it; `mask_id` is usually equal to it).

    About `mask_prob` of the real tokens (ids >= n_specials) are chosen, in runs of `span`
    consecutive tokens (a run starts at a token with probability mask_prob / span and covers
    the next span-1 tokens too, never crossing a special or padding). Each run is then, as a
    whole: replaced by `mask_id` (80%), by random real tokens from [n_specials, vocab_size)
    (10%), or kept (10%). `labels` holds the original id at chosen positions and IGNORE
    elsewhere. Specials and padding are never chosen.
    """
    real = ids >= n_specials  # (B, T)
    B, T = ids.shape
    start = (torch.rand(B, T, generator=generator) < mask_prob / span) & real
    action = torch.rand(B, T, generator=generator)  # one draw per run, read at its start

    def shift(x: torch.Tensor, fill) -> torch.Tensor:  # x[:, t - 1] at position t
        return torch.cat([torch.full_like(x[:, :1], fill), x[:, :-1]], 1)

    chosen, run_action = start.clone(), action
    alive, act = start, action
    for _ in range(1, span):  # extend each run over the next real tokens
        alive, act = shift(alive, False) & real, shift(act, 2.0)
        run_action = torch.where(alive & ~chosen, act, run_action)  # the nearest start wins
        chosen |= alive
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE))
    to_mask = chosen & (run_action < 0.8)
    to_random = chosen & (run_action >= 0.8) & (run_action < 0.9)
    random_ids = torch.randint(n_specials, vocab_size, (B, T), generator=generator)
    inputs = torch.where(to_mask, torch.full_like(ids, mask_id), ids)
    inputs = torch.where(to_random, random_ids, inputs)
    return inputs, labels


def hide_bigrams(bigrams: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Zero the bigram ids at each chosen position i and at i+1 (both contain token i)."""
    chosen = labels != IGNORE
    hide = chosen.clone()
    hide[:, 1:] |= chosen[:, :-1]
    return bigrams.masked_fill(hide, 0)


class MLMHead(nn.Module):
    """h `(N, C)` -> logits `(N, V)`: dense, GELU, LayerNorm, then the tied embedding matrix."""

    def __init__(self, cfg: MLMConfig, embedding: nn.Embedding):
        super().__init__()
        C = cfg.encoder.d_model
        self.dense = Linear(C, C)
        self.norm = LayerNorm(C, eps=cfg.encoder.norm_eps)
        self.embedding = [embedding]  # tied weight, kept out of this module's parameters
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = self.norm(F.gelu(self.dense(h)))
        return h @ self.embedding[0].weight.t() + self.bias


class MaskedLM(nn.Module):
    def __init__(self, cfg: MLMConfig):
        super().__init__()
        if cfg.vocab_size <= cfg.mask_id:
            raise UserError(f"vocab_size {cfg.vocab_size} must exceed mask_id {cfg.mask_id}")
        self.cfg = cfg
        self.embed = Embeddings(cfg.vocab_size, cfg.encoder, cfg.bigram_buckets)
        self.encoder = Encoder(cfg.encoder)
        self.head = MLMHead(cfg, self.embed.tokens)

    def set_gradient_checkpointing(self, enabled: bool = True) -> None:
        self.encoder.set_gradient_checkpointing(enabled)

    def forward(self, inputs: torch.Tensor, labels: torch.Tensor,
                bigrams: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """inputs, labels `(B, T)` -> logits `(N, V)` at the N chosen positions, and their
        labels `(N,)`. Only chosen positions go through the output layer."""
        mask = inputs != 0  # (B, T) real tokens (the mask token is real)
        if bigrams is not None:
            bigrams = hide_bigrams(bigrams, labels)
        h = self.encoder(self.embed(inputs, bigrams), mask)  # (B, T, C)
        chosen = labels != IGNORE
        return self.head(h[chosen]), labels[chosen]  # (N, V), (N,)
