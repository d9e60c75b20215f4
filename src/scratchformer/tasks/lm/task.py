"""The Trainer's view of language modelling (docs/contracts.md): next-token loss, perplexity, bpc."""
from __future__ import annotations

import math
from pathlib import Path

import torch.nn.functional as F

from ...data.tokenizers import Tokenizer
from ...models.language_model import DecoderLM
from ..runs import RunDir, eval_mode
from .data import LMBatch
from .recipe import LMRecipe

LN2 = math.log(2.0)


class LMTask:
    """The Trainer's view of language modelling (see docs/contracts.md)."""

    def __init__(self, model: DecoderLM, recipe: LMRecipe, tokenizer: Tokenizer, chars_per_token: float = 1.0,
                 given: LMRecipe | None = None):
        self.model, self.recipe, self.tokenizer, self.given = model, recipe, tokenizer, given
        self.chars_per_token = chars_per_token

    def count(self, b: LMBatch) -> int:
        return b.ids[:, 1:].numel()

    def batch_tokens(self, b: LMBatch) -> int:
        return b.ids[:, 1:].numel()

    def loss_sum(self, b: LMBatch):
        logits = self.model(b.ids[:, :-1])  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1).float(), b.ids[:, 1:].flatten(), reduction="sum")
        return loss, {}

    def evaluate(self, batches) -> dict[str, float]:
        total, count = 0.0, 0
        for b in batches:
            loss, _ = self.loss_sum(b)
            total += float(loss)
            count += self.count(b)
        return metrics_from(total, count, self.chars_per_token)

    def save(self, run_dir: Path) -> None:
        run = RunDir(run_dir)
        run.save_recipe(self.recipe, self.given)
        self.tokenizer.save(run / "tokenizer.json")


def metrics_from(loss_sum: float, tokens: int, chars_per_token: float = 1.0) -> dict[str, float]:
    loss = loss_sum / max(tokens, 1)
    return {"loss": loss, "perplexity": math.exp(loss) if loss < 700 else float("inf"),
            "bpc": loss / chars_per_token / LN2, "tokens": float(tokens)}


def evaluate_windows(task: LMTask, batches: list[LMBatch]) -> dict[str, float]:
    with eval_mode(task.model):
        return task.evaluate(batches)
