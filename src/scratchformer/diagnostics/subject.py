"""What `doctor` examines, in task-free terms. An adapter (adapters.py) builds a `Subject`
from a run directory; everything else in this package reads only these fields."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch


@dataclass
class AttentionBatch:
    """One kind of attention over a batch of samples.

    layers: per layer `(B, H, Tq, Tk)` probabilities. Masks are True where the position is a
    real token; `key_kinds` maps a special token's name (e.g. '<cls>', '[SEP]') to the
    `(B, Tk)` positions holding it. `self_attention`: queries and keys are the same positions
    (so distances and the diagonal mean something). `causal`: key j > query i is blocked."""

    name: str
    layers: list[torch.Tensor]
    query_real: torch.Tensor  # (B, Tq) bool
    key_real: torch.Tensor  # (B, Tk) bool
    key_kinds: dict[str, torch.Tensor] = field(default_factory=dict)
    self_attention: bool = True
    causal: bool = False


@dataclass
class EmbeddingTable:
    """An input embedding, as trained and as it was at initialisation (rebuilt from the seed).

    train_counts: `(V,)` how often each row's id occurs in the training inputs (None when not
    known). special: ids of special tokens, which are allowed to go unused."""

    name: str
    weight: torch.Tensor  # (V, C)
    initial: torch.Tensor | None  # (V, C)
    train_counts: torch.Tensor | None = None
    token: Callable[[int], str] = str
    special: set[int] = field(default_factory=set)
    hashed: bool = False  # rows are hash buckets (bigrams): unused rows are expected


@dataclass
class Subject:
    """A trained model, a few real batches of its data, and how to read them."""

    run_dir: Path
    task: str
    model: torch.nn.Module
    batches: list[Any]
    loss: Callable[[Any], torch.Tensor]  # mean loss of one batch (a scalar tensor)
    attention: Callable[[Any], list[AttentionBatch]]
    input_ids: Callable[[Any], list[torch.Tensor]]  # id tensors whose <unk> share is measured
    heads: dict[str, list[torch.nn.Module]]  # view name -> its MultiHeadAttention per layer
    embeddings: list[EmbeddingTable] = field(default_factory=list)
    pad_id: int = 0
    unk_id: int = 1
    n_samples: int = 0
    data_name: str = ""
    notes: list[str] = field(default_factory=list)  # e.g. "an ensemble: member 0 is examined"
