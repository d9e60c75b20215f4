"""The Trainer's view of classification (docs/contracts.md): batch -> loss, metrics, report."""
from __future__ import annotations

from array import array
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from ...data.tokenizers import Tokenizer
from ...errors import UserError
from ...models.classifier import EncoderClassifier
from ..runs import RunDir, eval_mode
from .data import ClassifyBatch, EncodedSplit, save_tokenizer
from .recipe import ClassifyRecipe
from .report import confusion_matrix, report, write_report


class ClassificationTask:
    """The Trainer's view of classification (see docs/contracts.md)."""

    def __init__(self, model: EncoderClassifier, recipe: ClassifyRecipe, tokenizer: Tokenizer,
                 labels: list[str], given: ClassifyRecipe | None = None):
        self.model, self.recipe, self.tokenizer, self.labels = model, recipe, tokenizer, labels
        self.given = given  # the recipe as the user gave it (recipe.json), if known

    def logits(self, b: ClassifyBatch) -> torch.Tensor:
        return self.model(b.ids, b.bigrams, b.doc_index, len(b.labels))

    def count(self, b: ClassifyBatch) -> int:
        return len(b.labels)

    def batch_tokens(self, b: ClassifyBatch) -> int:
        return int((b.ids != self.recipe.model.pad_id).sum())

    def loss_sum(self, b: ClassifyBatch):
        """Cross-entropy with the labels; with a teacher's probabilities `b.soft` (distillation,
        already softened at temperature T), (1 − a) · that + a · T² · cross-entropy between them
        and ours at T, a = `distill_weight` (T² keeps the gradient's scale, as in Hinton et al.)."""
        logits = self.logits(b).float()
        loss = F.cross_entropy(logits, b.labels, reduction="sum",
                               label_smoothing=self.recipe.data.label_smoothing)
        if self.recipe.rdrop > 0 and self.model.training:
            loss = (loss + self._rdrop(b, logits)) / 2  # the mean of the two passes' losses + the KL term
        if b.soft is not None:
            a, t = self.recipe.distill_weight, self.recipe.distill_temperature
            soft = a * t * t * -(b.soft * F.log_softmax(logits / t, -1)).sum()
            if not torch.isfinite(soft):  # the real cause, before the Trainer calls it a divergence
                raise UserError(f"the distillation term is {float(soft.detach())} at distill_temperature {t:g}: the logits "
                                "divided by it overflow; use a temperature between 0.5 and 10 (2 is the default)")
            loss = (1 - a) * loss + soft
        return loss, {"accuracy": float((logits.argmax(-1) == b.labels).sum())}

    def _rdrop(self, b: ClassifyBatch, first: torch.Tensor) -> torch.Tensor:
        """The second pass's cross-entropy + 2 · rdrop · ½ (KL(p1 ‖ p2) + KL(p2 ‖ p1)), summed over
        the batch (halved with the first pass's loss by the caller: rdrop · the symmetric KL)."""
        second = self.logits(b).float()  # other dropout masks (and token dropout draws)
        ce = F.cross_entropy(second, b.labels, reduction="sum", label_smoothing=self.recipe.data.label_smoothing)
        lp, lq = F.log_softmax(first, -1), F.log_softmax(second, -1)  # (B, K) each
        kl = F.kl_div(lq, lp, log_target=True, reduction="sum") + F.kl_div(lp, lq, log_target=True, reduction="sum")
        return ce + self.recipe.rdrop * kl

    def predictions(self, batches) -> tuple[np.ndarray, np.ndarray, float]:
        """(predicted ids, gold ids, mean loss). The ids go into two growing int64 buffers, not a
        small array kept per batch: thousands of those, each between the freed activations of
        ever longer (length-sorted) batches, kept the allocator from reusing or returning that
        memory (1.4 GB more RSS over 300k valid texts, measured)."""
        preds, gold, loss = array("q"), array("q"), 0.0
        for b in batches:
            logits = self.logits(b).float()
            loss += float(F.cross_entropy(logits, b.labels, reduction="sum"))
            preds.extend(logits.argmax(-1).tolist())
            gold.extend(b.labels.tolist())
        preds, gold = np.asarray(preds, dtype=np.int64), np.asarray(gold, dtype=np.int64)
        return preds, gold, loss / max(len(gold), 1)

    def evaluate(self, batches) -> dict[str, float]:
        preds, gold, loss = self.predictions(batches)
        rep = report(confusion_matrix(gold, preds, len(self.labels)), self.labels)
        return {"loss": loss, "accuracy": rep["accuracy"], "macro_f1": rep["macro_f1"]}

    def save(self, run_dir: Path) -> None:
        run = RunDir(run_dir)
        run.save_recipe(self.recipe, self.given)
        save_tokenizer(self.tokenizer, run.path)
        run.save_labels(self.labels)

    def report(self, split: EncodedSplit, out_dir: Path | None, name: str,
               meta: dict | None = None) -> dict[str, Any]:
        """Full report on one split; writes `<name>_metrics.json` and `confusion_<name>.png`."""
        with eval_mode(self.model):
            preds, gold, loss = self.predictions(split.batches(0))
        # the batches are length-sorted: prediction i is split item order[i] (arrays, not lists of ints)
        order = np.concatenate(split.sampler.epoch_arrays(0) or [np.zeros(0, np.int64)])
        return write_report(preds, gold, self.labels, loss, out_dir, name, meta, order)
