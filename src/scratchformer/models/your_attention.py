"""The attention maps of a learner's model, read from what it computes, not from its class names.

你的模型的注意力图：从它实际算出的东西中读取（softmax 的 (T, T) 概率、scaled_dot_product_attention 的输入）。

Their attention may be a class of their own, a per-head loop, `F.scaled_dot_product_attention` or
`nn.MultiheadAttention`; none exposes its probabilities the same way. While their forward runs under
`captured_attention(T)`, a torch function mode keeps every softmax over the last dimension whose output is
square in the sequence length (`(..., T, T)`, rows of probabilities), and for each scaled-dot-product call it
recomputes the probabilities from its query, key, mask and scale. Each capture is one view of shape
(B, heads, T, T) in the order computed: a layer with its heads, or, for a per-head loop, one head at a time.
"""
from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

_SOFTMAX = {torch.softmax, F.softmax, torch.Tensor.softmax, torch.nn.functional.softmax}


def _sdpa_weights(q, k, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False, **_):
    s = q @ k.transpose(-2, -1) * (scale if scale is not None else 1.0 / math.sqrt(q.shape[-1]))  # (..., Tq, Tk)
    if is_causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    if attn_mask is not None:
        s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else s + attn_mask
    return s.softmax(-1)


class _Capture(TorchFunctionMode):
    def __init__(self, T: int, B: int):
        super().__init__()
        self.T, self.B, self.maps = T, B, []

    def _keep(self, w: torch.Tensor) -> None:
        if w.dim() < 3 or w.shape[-1] != self.T or w.shape[-2] != self.T:
            return
        w = w.detach().float()
        if w.dim() == 3:
            w = w.reshape(self.B, -1, self.T, self.T) if w.shape[0] % self.B == 0 else w[:, None]  # (B, h, T, T)
        elif w.dim() > 4:
            w = w.reshape(self.B, -1, self.T, self.T)
        if w.shape[0] == self.B:
            self.maps.append(w)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if func in _SOFTMAX:
            dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
            if dim in (-1, 3, 2) and isinstance(out, torch.Tensor):
                self._keep(out)
        elif func is F.scaled_dot_product_attention:
            with torch.no_grad():
                names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")
                bound = dict(zip(names, args))
                bound.update(kwargs)
                self._keep(_sdpa_weights(bound["query"], bound["key"], bound.get("attn_mask"),
                                         is_causal=bound.get("is_causal", False), scale=bound.get("scale")))
        return out


@contextlib.contextmanager
def captured_attention(B: int, T: int):
    """Yields a list that fills with (B, heads, T, T) maps while their forward runs inside."""
    mode = _Capture(T, B)
    with mode:
        yield mode.maps
