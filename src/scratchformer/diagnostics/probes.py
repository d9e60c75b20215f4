"""Measurements that run the model: head importance by masking, activation and gradient
norms per layer, non-finite values, embedding rows left at their initial values.

Head masking follows Michel et al. (2019), "Are Sixteen Heads Really Better than One?": the
importance of a head is how much the loss rises when its output is removed. A head's output
is its slice of the concatenated heads `(..., H * head_dim)` that enters the attention's
`out_proj`; a forward pre-hook on `out_proj` multiplies that slice by 0, so no layer code
changes (the hooks TransformerLens uses for the same experiment).
"""
from __future__ import annotations

import contextlib
import math

import torch
from torch import nn

from ..nn.blocks import DecoderBlock, EncoderBlock
from ..tasks.inspection import EmbeddingTable, Subject


@contextlib.contextmanager
def heads_removed(attention: nn.Module, heads: list[int]):
    """Inside the block, the given heads of one `MultiHeadAttention` contribute nothing."""
    n, d = attention.n_heads, attention.head_dim
    keep = torch.ones(n * d)
    for h in heads:
        keep[h * d:(h + 1) * d] = 0.0

    def hook(_module, args):
        x = args[0]  # (..., H * head_dim): the heads' outputs side by side
        return (x * keep.to(x.dtype).to(x.device),) + tuple(args[1:])

    handle = attention.out_proj.register_forward_pre_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def mean_loss(subject: Subject) -> float:
    """The loss averaged over the sample batches (eval mode, no gradients)."""
    with torch.no_grad():
        losses = [float(subject.loss(b)) for b in subject.batches]
    return sum(losses) / max(len(losses), 1)


def head_importance(subject: Subject) -> tuple[float, dict[str, torch.Tensor]]:
    """Base loss, and per view `(L, H)` loss increase when that one head is removed."""
    base = mean_loss(subject)
    out = {}
    for view, modules in subject.heads.items():
        delta = torch.zeros(len(modules), modules[0].n_heads if modules else 0, dtype=torch.float64)
        for li, attn in enumerate(modules):
            for h in range(attn.n_heads):
                with heads_removed(attn, [h]):
                    delta[li, h] = mean_loss(subject) - base
        out[view] = delta
    return base, out


def loss_without(subject: Subject, removed: dict[str, list[tuple[int, int]]]) -> float:
    """The loss with several heads removed at once: {view: [(layer, head), ...]}."""
    with contextlib.ExitStack() as stack:
        for view, pairs in removed.items():
            by_layer: dict[int, list[int]] = {}
            for li, h in pairs:
                by_layer.setdefault(li, []).append(h)
            for li, hs in by_layer.items():
                stack.enter_context(heads_removed(subject.heads[view][li], hs))
        return mean_loss(subject)


def non_finite_parameters(model: nn.Module) -> list[tuple[str, int, int]]:
    """(name, non-finite count, size) of every parameter holding NaN or inf."""
    bad = []
    for name, p in model.named_parameters():
        n = int((~torch.isfinite(p.detach())).sum())
        if n:
            bad.append((name, n, p.numel()))
    return bad


def layer_norms(subject: Subject) -> dict:
    """One forward and backward pass on the first sample batch (eval mode: no dropout).

    Per block (in model order): rms of its output, rms of the loss gradient at that output,
    norm of its parameters' gradient. Also the blocks whose output or gradient is not
    finite, the parameters whose gradient is not finite, and the loss."""
    model = subject.model
    blocks = [(n, m) for n, m in model.named_modules() if isinstance(m, (EncoderBlock, DecoderBlock))]
    rows = {name: {"name": name} for name, _ in blocks}
    handles = []

    def watch(name):
        def hook(_m, _args, out):
            x = out[0] if isinstance(out, tuple) else out
            rows[name]["act_rms"] = _rms(x)
            rows[name]["act_finite"] = bool(torch.isfinite(x).all())
            if x.requires_grad:
                x.register_hook(lambda g: rows[name].update(grad_rms=_rms(g), grad_finite=bool(torch.isfinite(g).all())))
        return hook

    for name, m in blocks:
        handles.append(m.register_forward_hook(watch(name)))
    model.zero_grad(set_to_none=True)
    try:
        with torch.enable_grad():
            loss = subject.loss(subject.batches[0])
            loss.backward()
    finally:
        for h in handles:
            h.remove()
    for name, m in blocks:
        grads = [p.grad for p in m.parameters() if p.grad is not None]
        rows[name]["param_grad_norm"] = math.sqrt(sum(float(g.double().pow(2).sum()) for g in grads)) if grads else 0.0
    bad_grads = [n for n, p in model.named_parameters() if p.grad is not None and not bool(torch.isfinite(p.grad).all())]
    model.zero_grad(set_to_none=True)
    return {"loss": float(loss.detach()), "layers": [rows[n] for n, _ in blocks], "non_finite_grads": bad_grads}


def _rms(x: torch.Tensor) -> float:
    return float(x.detach().double().pow(2).mean().sqrt())


def unchanged_rows(table: EmbeddingTable, tol: float = 1e-4) -> dict:
    """Rows of an embedding that training never moved.

    A row that never receives a gradient keeps its initial direction: AdamW's weight decay
    only shrinks it (row = c * initial, c <= 1, up to float rounding of ~1e-7 per step). A
    row that got gradients has moved off that line by about lr per element and step. So
    "unchanged" = the part of the row orthogonal to its initial row is below `tol` of its
    norm (first order in the change; a cosine would be second order and miss rows of a
    barely trained model). All-zero initial rows (padding) are left out. Returns the ids
    split into 'special', 'unseen' (0 training occurrences), 'seen' (they occur in the batches
    the weights were trained on, so they should have moved: a bug), 'later' (their tokens occur
    in the training data only after the step the weights were saved at: nothing wrong),
    'dropped' (seen, but so rarely that token dropout may have hidden every occurrence: p^count
    >= DROPPED_CHANCE) and 'unknown_count', and 'typical_change', the median
    relative change of the rows whose tokens occur in training."""
    w, w0 = table.weight.detach().double(), table.initial.detach().double()
    norm0 = w0.norm(dim=1)
    unit0 = w0 / norm0.clamp(min=1e-30)[:, None]
    off_line = w - (w * unit0).sum(1, keepdim=True) * unit0  # (V, C)
    residual = off_line.norm(dim=1) / w.norm(dim=1).clamp(min=1e-30)  # (V,)
    used = norm0 > 0
    if table.train_counts is not None:
        used &= table.train_counts > 0
    typical = float(residual[used].median()) if bool(used.any()) else float("nan")
    # relative to how far the used rows moved too, so a barely trained table is not read as
    # rows that never got a gradient (that case is reported through `typical`)
    limit = min(tol, 0.01 * typical) if typical == typical else tol
    still = ((residual < limit) & (norm0 > 0)).nonzero().squeeze(1).tolist()
    out = {"special": [], "unseen": [], "seen": [], "later": [], "dropped": [], "unknown_count": [],
           "typical_change": typical}
    for i in still:
        if i in table.special:
            out["special"].append(i)
        elif table.train_counts is None:
            out["unknown_count"].append(i)
        elif int(table.train_counts[i]) == 0:
            later = table.data_counts is not None and int(table.data_counts[i]) > 0
            out["later" if later else "unseen"].append(i)
        elif table.token_dropout > 0 and table.token_dropout ** int(table.train_counts[i]) >= DROPPED_CHANCE:
            # token dropout may have turned every occurrence into <unk>: p^count is not negligible
            out["dropped"].append(i)
        else:
            out["seen"].append(i)
    return out


DROPPED_CHANCE = 1e-3  # a seen row is an error only when token dropout had less chance than this to hide it


def unk_share(subject: Subject) -> tuple[int, int]:
    """(<unk> tokens, real tokens) in the sample batches' inputs."""
    unk = real = 0
    for b in subject.batches:
        for ids in subject.input_ids(b):
            unk += int((ids == subject.unk_id).sum())
            real += int((ids != subject.pad_id).sum())
    return unk, real
