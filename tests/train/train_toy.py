"""A toy Task following docs/contracts.md: a tiny MLP classifier over random data."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn


class Batch:
    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def to(self, device) -> "Batch":
        return Batch(self.x.to(device), self.y.to(device))


class ToyTask:
    """Classify 8-d points into 3 classes; the loss is summed over examples."""

    def __init__(self, seed: int = 0, dropout: float = 0.0, dtype=torch.float32) -> None:
        g = torch.Generator().manual_seed(seed)
        self.model = nn.Sequential(
            nn.Linear(8, 16), nn.LayerNorm(16), nn.ReLU(), nn.Dropout(dropout), nn.Linear(16, 3)
        ).to(dtype)
        with torch.no_grad():  # an init that depends on `seed` only, not on the global RNG
            for p in self.model.parameters():
                p.copy_(torch.randn(p.shape, generator=g, dtype=dtype) * 0.5)
        self.saved_to: Path | None = None

    def count(self, batch: Batch) -> int:
        return len(batch.y)

    def loss_sum(self, batch: Batch):
        logits = self.model(batch.x)
        loss = F.cross_entropy(logits, batch.y, reduction="sum")
        correct = (logits.argmax(-1) == batch.y).sum().item()
        return loss, {"accuracy": float(correct)}

    def evaluate(self, batches) -> dict[str, float]:
        total, n, correct = 0.0, 0, 0
        for b in batches:
            logits = self.model(b.x)
            total += F.cross_entropy(logits.float(), b.y, reduction="sum").item()
            correct += (logits.argmax(-1) == b.y).sum().item()
            n += len(b.y)
        return {"loss": total / n, "accuracy": correct / n}

    def batch_tokens(self, batch: Batch) -> int:
        return batch.x.shape[0]

    def save(self, run_dir: Path) -> None:
        self.saved_to = Path(run_dir)
        (Path(run_dir) / "task.json").write_text(json.dumps({"task": "toy"}))


def make_data(n: int, seed: int = 0, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + seed)
    x = torch.randn(n, 8, generator=g, dtype=dtype)
    w = torch.randn(8, 3, generator=g, dtype=dtype)
    y = (x @ w + 0.5 * torch.randn(n, 3, generator=g, dtype=dtype)).argmax(-1)
    return x, y


def batch_fn(x, y, sizes, seed: int = 0, shuffle: bool = True):
    """train_batches(epoch): micro-batches of the given sizes, shuffled per (seed, epoch)."""
    assert sum(sizes) <= len(y)

    def train_batches(epoch: int):
        if shuffle:
            perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(seed * 7919 + epoch))
        else:
            perm = torch.arange(len(y))
        start = 0
        for s in sizes:  # a generator: no len(), like a streaming reader
            idx = perm[start : start + s]
            start += s
            yield Batch(x[idx], y[idx])

    return train_batches


def valid_fn(x, y, size: int = 16):
    def valid_batches():
        return [Batch(x[i : i + size], y[i : i + size]) for i in range(0, len(y), size)]

    return valid_batches


def weights(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
