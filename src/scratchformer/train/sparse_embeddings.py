"""Sparse gradients for large embedding tables during training: the same step, less memory traffic.

A dense embedding backward allocates a zero gradient the size of the whole table and adds the
few rows a batch used into it; with 200,000 hashed bigram buckets of width 128 that is 100 MB
filled and then added into ``.grad`` on every backward pass, four times a step with R-Drop and
adversarial training, for the ~1,400 rows a batch of 64 headlines touches. With ``sparse=True``
torch returns only those rows (indices + values), accumulates them by concatenation, and this
module turns each such gradient dense once per step, before the all-reduce, the clipping and
the optimizer, which all see exactly what the dense path gives (up to the order of float sums).
Measured on one core for that table: four backward passes 280 ms dense, 60 ms sparse including
the one densify (benchmarks/results/ has the whole-step figure).

Which tables qualify is the model's to say: an ``nn.Embedding`` with ``sparse_gradient = True``
(our hashed n-gram tables, models/embedding.py). A shared (tied) table must not be marked: its
other use would mix a dense gradient in. The switch is on only inside `SparseEmbeddings.active`,
so code outside the trainer (doctor's probes, the budget's timing) sees ordinary dense gradients.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

__all__ = ["SparseEmbeddings", "densify_gradients"]


class SparseEmbeddings:
    """The marked embedding tables of `model`, switched to sparse gradients inside `active()`."""

    def __init__(self, model: nn.Module) -> None:
        self.tables = [m for m in model.modules()
                       if isinstance(m, nn.Embedding) and getattr(m, "sparse_gradient", False)]

    @contextmanager
    def active(self):
        before = [m.sparse for m in self.tables]
        for m in self.tables:
            m.sparse = True
        try:
            yield
        finally:
            for m, was in zip(self.tables, before):
                m.sparse = was


def densify_gradients(params: list[torch.nn.Parameter]) -> None:
    """Every sparse ``.grad`` in `params` becomes the dense tensor it stands for."""
    for p in params:
        if p.grad is not None and p.grad.is_sparse:
            p.grad = p.grad.to_dense()
