"""Adversarial training on the input embeddings (``train.adversarial``; Miyato et al. 2017,
"Adversarial Training Methods for Semi-Supervised Text Classification", the FGM form).

A step with it on:
  1. the clean forward/backward as usual, recording g = dLoss/de at every marked embedding
     output e (`(B, T, C)`, one record per call, in call order);
  2. a second forward/backward on the same micro-batches in which each such output becomes
     e + r, r = epsilon * g / ||g||, the norm taken per example over its (T, C) entries; its
     gradient is added to the clean one (loss = clean + adversarial, as in the paper);
  3. the optimizer step on the sum.

The perturbation acts on activations, not on the embedding tables, so no weight is changed and
nothing has to be restored; it depends only on each example's own gradient, so it is the same
whatever the batch is split into (micro-batches, processes). Which modules are the input
embeddings is the model's to say: every submodule with ``adversarial_input = True`` (our
`Embeddings`, `BertEmbeddings`). Evaluation and inference never see a perturbation.
"""
from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from scratchformer.errors import UserError

__all__ = ["EmbeddingAdversary"]


class EmbeddingAdversary:
    """Forward hooks on the marked embedding modules of `model`, active only inside `record()`
    (step 1) and `perturb()` (step 2)."""

    def __init__(self, model: nn.Module, epsilon: float) -> None:
        targets = [m for m in model.modules() if getattr(m, "adversarial_input", False)]
        if not targets:
            raise UserError(f"train.adversarial={epsilon} needs input embeddings to perturb, but "
                            f"{type(model).__name__} marks none (adversarial_input = True); set "
                            "train.adversarial=0 for this model")
        self.epsilon = float(epsilon)
        self._mode: str | None = None
        self._grads: list[torch.Tensor | None] = []
        self._next = 0
        for m in targets:
            m.register_forward_hook(self._hook)

    @contextmanager
    def record(self):
        """The clean passes: keep each marked output's gradient (filled in by backward)."""
        self._grads, self._mode = [], "record"
        try:
            yield
        finally:
            self._mode = None

    @contextmanager
    def perturb(self):
        """The adversarial passes: the same calls, in the same order, each output moved by r."""
        self._next, self._mode = 0, "perturb"
        try:
            yield
        finally:
            self._mode, self._grads = None, []

    def _hook(self, module: nn.Module, args, output: torch.Tensor):
        if self._mode == "record":
            if output.requires_grad:
                i = len(self._grads)
                self._grads.append(None)
                output.register_hook(lambda g, i=i: self._keep(i, g))
            return None
        if self._mode == "perturb":
            if self._next >= len(self._grads):
                raise UserError("train.adversarial: the adversarial pass called the embeddings more often than "
                                "the clean pass; the task's loss must call the model the same way each time")
            g = self._grads[self._next]
            self._next += 1
            if g is None:  # that call's output had no gradient (not used by the loss)
                return None
            return output + self._step(g).to(output.dtype)
        return None

    def _keep(self, i: int, grad: torch.Tensor) -> None:
        self._grads[i] = grad.detach()

    def _step(self, g: torch.Tensor) -> torch.Tensor:
        """r = epsilon * g / ||g||, the norm per example over all its other dimensions."""
        g = g.float()
        norm = g.flatten(1).norm(dim=1).clamp_min(1e-12)  # (B,)
        return self.epsilon * g / norm.view(-1, *([1] * (g.dim() - 1)))  # (B, T, C)
