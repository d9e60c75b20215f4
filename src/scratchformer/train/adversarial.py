"""Adversarial training on the input embeddings (``train.adversarial``; Miyato et al. 2017,
"Adversarial Training Methods for Semi-Supervised Text Classification", the FGM form; with
``adversarial_steps`` K > 1, the K-step projected ascent of Madry et al. 2018 with every step's
gradient kept, as FreeLB does, Zhu et al. 2020).

A step with it on:
  1. the clean forward/backward as usual, recording g_0 = dLoss/de at every marked embedding
     output e (`(B, T, C)`, one record per call, in call order);
  2. K more forward/backwards on the same micro-batches; in pass k each such output becomes
     e + r_k, r_k = P(r_{k-1} + epsilon * g_{k-1} / ||g_{k-1}||), r_0 = 0, with the norm taken
     per example over its (T, C) entries and P scaling any r longer than epsilon back to
     epsilon; g_k is the gradient at e + r_k (recorded unless k = K). Each pass's gradient is
     added to the clean one at weight 1/K (loss = clean + the mean adversarial loss). K = 1 is
     FGM exactly (r_1 = epsilon * g_0 / ||g_0||, no projection needed);
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

    def __init__(self, model: nn.Module, epsilon: float, steps: int = 1) -> None:
        targets = [m for m in model.modules() if getattr(m, "adversarial_input", False)]
        if not targets:
            raise UserError(f"train.adversarial={epsilon} needs input embeddings to perturb, but "
                            f"{type(model).__name__} marks none (adversarial_input = True); set "
                            "train.adversarial=0 for this model")
        self.epsilon, self.steps = float(epsilon), int(steps)
        self._mode: str | None = None
        self._grads: list[torch.Tensor | None] = []  # g per call, being recorded
        self._before: list[torch.Tensor | None] = []  # g per call from the pass before, being used
        self._moves: list[torch.Tensor | None] = []  # r per call: the last pass's perturbation
        self._record_next_pass = False  # a later pass follows: keep this pass's gradients
        self._next = 0
        for m in targets:
            m.register_forward_hook(self._hook)

    @contextmanager
    def record(self):
        """The clean passes: keep each marked output's gradient (filled in by backward)."""
        self._grads, self._moves, self._mode = [], [], "record"
        try:
            yield
        finally:
            self._mode = None

    def passes(self):
        """The K adversarial passes of one step: ``for _ in adversary.passes(): <forward/backward
        of the step's micro-batches, the loss weighted 1/K>``; inside each, every marked output
        is moved by its r_k (the same calls, in the same order, as the clean pass)."""
        for k in range(1, self.steps + 1):
            with self.perturb(last=k == self.steps):
                yield k

    @contextmanager
    def perturb(self, last: bool = True):
        """One adversarial pass; unless `last`, its gradients are recorded for the next one."""
        self._next, self._mode, self._record_next_pass = 0, "perturb", not last
        self._before = self._grads
        self._grads = [None] * len(self._before) if not last else []
        if not self._moves:
            self._moves = [None] * len(self._before)
        try:
            yield
        finally:
            self._mode, self._before = None, []
            if last:
                self._moves = []

    def _hook(self, module: nn.Module, args, output: torch.Tensor):
        if self._mode == "record":
            if output.requires_grad:
                i = len(self._grads)
                self._grads.append(None)
                output.register_hook(lambda g, i=i: self._keep(i, g))
            return None
        if self._mode == "perturb":
            i = self._next
            if i >= len(self._before):
                raise UserError("train.adversarial: the adversarial pass called the embeddings more often than "
                                "the clean pass; the task's loss must call the model the same way each time")
            self._next += 1
            g = self._before[i]
            if g is None:  # that call's output had no gradient (not used by the loss)
                return None
            r = self._ascend(self._moves[i], g)
            self._moves[i] = r
            if self._record_next_pass and output.requires_grad:
                # d loss / d(e + r) = d loss / de: r is a constant of this pass
                output.register_hook(lambda grad, i=i: self._keep(i, grad))
            return output + r.to(output.dtype)
        return None

    def _keep(self, i: int, grad: torch.Tensor) -> None:
        self._grads[i] = grad.detach()

    def _ascend(self, r: torch.Tensor | None, g: torch.Tensor) -> torch.Tensor:
        """P(r + epsilon * g / ||g||); r = None is r_0 = 0, whose step has norm epsilon already."""
        step = self.epsilon * g.float() / _norms(g.float())  # (B, T, C)
        if r is None:
            return step
        r = r + step
        return r * (self.epsilon / _norms(r)).clamp(max=1.0)  # P: back onto the epsilon ball


def _norms(x: torch.Tensor) -> torch.Tensor:
    """Each example's L2 norm over all its other dimensions, shaped to broadcast over x."""
    norm = x.flatten(1).norm(dim=1).clamp_min(1e-12)  # (B,)
    return norm.view(-1, *([1] * (x.dim() - 1)))  # (B, 1, ..., 1)
