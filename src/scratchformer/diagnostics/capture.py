"""Attention weights of a stack that a model calls without asking for them.

`with attention_of(model.encoder) as got: model(ids)` runs the model as it is, while the
stack (our `Encoder` or `Decoder`) is made to return its per-layer weights, which are kept in
`got.weights` and stripped from its output, so the model never sees them. No model code needs
a `need_weights` path of its own."""
from __future__ import annotations

import contextlib
import inspect

import torch


class Captured:
    weights: list[torch.Tensor] | None = None


@contextlib.contextmanager
def attention_of(stack: torch.nn.Module):
    got = Captured()
    at = list(inspect.signature(stack.forward).parameters).index("need_weights")  # position after self

    def ask(_module, args, kwargs):
        if len(args) > at:
            args = args[:at] + (True,) + args[at + 1:]
        else:
            kwargs = {**kwargs, "need_weights": True}
        return args, kwargs

    def strip(_module, _args, _kwargs, out):
        out, got.weights = out
        return out

    handles = [stack.register_forward_pre_hook(ask, with_kwargs=True),
               stack.register_forward_hook(strip, with_kwargs=True)]
    try:
        yield got
    finally:
        for h in handles:
            h.remove()
