"""Sparse gradients for the hashed n-gram tables (train/sparse_embeddings.py): the trainer's fast
path gives the weights the dense path gives (1e-6 after several steps, with gradient accumulation,
a table used twice per step and adversarial training), its backward really is sparse, the optimizer
only ever sees dense gradients, and the switch is undone after training."""
import json

import torch
import torch.nn.functional as F
from torch import nn

from scratchformer.models.embedding import Embeddings
from scratchformer.nn import TransformerConfig
from scratchformer.train import TrainConfig, Trainer

VOCAB, BUCKETS, C = 50, 400, 16


class Batch:
    def __init__(self, ids, bigrams, y) -> None:
        self.ids, self.bigrams, self.y = ids, bigrams, y

    def to(self, device) -> "Batch":
        return Batch(self.ids.to(device), self.bigrams.to(device), self.y.to(device))


class NgramTask:
    """Mean-pooled `Embeddings` (characters + hashed bigrams) and a linear head; the loss runs
    the model twice (as R-Drop does), so each table gets two backward contributions a pass."""

    def __init__(self, sparse: bool) -> None:
        torch.manual_seed(0)
        cfg = TransformerConfig(d_model=C, n_heads=2, d_ff=32, n_layers=1, dropout=0.1)
        self.embed = Embeddings(VOCAB, cfg, bigram_buckets=BUCKETS)
        if not sparse:  # the readable path: ordinary dense gradients
            del self.embed.bigrams.sparse_gradient
        self.model = nn.ModuleDict({"embed": self.embed, "head": nn.Linear(C, 3)})

    def logits(self, b: Batch) -> torch.Tensor:
        return self.model["head"](self.embed(b.ids, b.bigrams).mean(1))  # (B, T, C) -> (B, C) -> (B, 3)

    def loss_sum(self, b: Batch):
        loss = F.cross_entropy(self.logits(b), b.y, reduction="sum") + F.cross_entropy(self.logits(b), b.y, reduction="sum")
        return loss, {}

    def count(self, b: Batch) -> int:
        return len(b.y)

    def batch_tokens(self, b: Batch) -> int:
        return b.ids.numel()

    def evaluate(self, batches) -> dict:
        return {"loss": 0.0}

    def save(self, run_dir) -> None:
        (run_dir / "task.json").write_text(json.dumps({"task": "ngram"}))


def batches(epoch: int):
    g = torch.Generator().manual_seed(epoch)
    for size in (6, 10, 6, 10):
        ids = torch.randint(4, VOCAB, (size, 7), generator=g)
        yield Batch(ids, torch.randint(1, BUCKETS, (size, 7), generator=g), ids[:, 0] % 3)


def train(tmp_path, sparse: bool, **kw) -> tuple[NgramTask, list]:
    task = NgramTask(sparse)
    cfg = TrainConfig(lr=0.05, schedule="constant", max_steps=4, accumulation=2, seed=3, progress=False, **kw)
    tr = Trainer(task, batches, None, cfg, tmp_path / f"{sparse}{len(kw)}")
    seen = []
    task.embed.bigrams.weight.register_hook(lambda g: seen.append(("backward", g.is_sparse)))
    tr.optimizer.register_step_pre_hook(
        lambda opt, args, kwargs: seen.append(("optimizer", task.embed.bigrams.weight.grad.is_sparse)))
    tr.fit()
    return task, seen


def test_sparse_tables_train_to_the_same_weights_as_dense(tmp_path):
    for kw in ({}, {"adversarial": 0.5}):
        fast, seen = train(tmp_path, True, **kw)
        slow, seen_dense = train(tmp_path, False, **kw)
        diff = max((a - b).abs().max().item() for a, b in zip(fast.model.parameters(), slow.model.parameters()))
        assert diff <= 1e-6, (kw, diff)
        moved = (fast.embed.bigrams.weight - NgramTask(True).embed.bigrams.weight).abs().max().item()
        assert moved > 1e-3  # the table did train
        assert ("backward", True) in seen and ("backward", False) not in seen
        assert ("optimizer", True) not in seen and ("optimizer", False) in seen
        assert ("backward", True) not in seen_dense


def test_the_switch_is_undone_after_training_and_marks_only_hashed_tables(tmp_path):
    task, _ = train(tmp_path, True)
    assert task.embed.bigrams.sparse is False
    assert getattr(task.embed.bigrams, "sparse_gradient", False)
    assert not getattr(task.embed.tokens, "sparse_gradient", False)  # every row is used: dense is cheaper
