"""The Trainer's view of MLM pretraining: loss summed over the masked positions."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch.nn.functional as F

from ...data.tokenizers import PAD_ID, Tokenizer
from ...models.mlm import IGNORE, MaskedLM
from ..runs import RunDir
from .data import MLMBatch
from .recipe import MLMRecipe


class MLMTask:
    """The Trainer's view of MLM pretraining: loss summed over the chosen positions."""

    def __init__(self, model: MaskedLM, recipe: MLMRecipe, tokenizer: Tokenizer, given: MLMRecipe | None = None):
        self.model, self.recipe, self.tokenizer, self.given = model, recipe, tokenizer, given

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
        run = RunDir(run_dir)
        run.save_recipe(self.recipe, self.given)
        self.tokenizer.save(run / "tokenizer.json")
