"""The position-wise components, each checked against the reference on the same weights and
inputs: the feed-forward block (ReLU/GELU and SwiGLU), layer norm, RMSNorm and the positional
encoding. Attention is in `attention.py`; the layers that wire them in `checks.py`.
"""
from __future__ import annotations

import math
import re

import torch
from torch import nn

from . import reference as R
from .compare import (Ctx, all_close, close, departure, grads_equal, has_lazy, linear_params,
                      randomize, search, settle, where)
from .discover import CannotCheck, Found, first_tensor
from .report import Component



def _ffn_module(ctx, f):
    mod = ctx.build(f)
    x = ctx.randn(3, 5, ctx.sizes.d_model)
    if has_lazy(mod):
        mod(x.float())
    return mod.double(), x


def bias_of_(params, n, size):
    b = dict(params).get(n.rsplit(".", 1)[0] + ".bias") if n.endswith(".weight") else None
    return b if b is not None and tuple(b.shape) == (size,) else None


def ffn_params(mod: nn.Module, d: int, dff: int | None = None):
    """((W₁, b₁, W₂, b₂), the mapping in words) of a feed-forward block, by shape (d→d_ff, d_ff→d); d_ff is
    read from the weights (4·d, 2/3 of it rounded, whatever the learner chose) unless given."""
    params, flipped = linear_params(mod)
    if dff is None:
        outs = {p.shape[0] for _, p in params if p.dim() == 2 and p.shape[1] == d and p.shape[0] != d}
        ins = {p.shape[1] for _, p in params if p.dim() == 2 and p.shape[0] == d and p.shape[1] != d}
        both = outs & ins
        dff = next(iter(both)) if len(both) == 1 else (d if not outs and not ins else -1)
    mats = [(n, p) for n, p in params if p.dim() == 2]
    if dff == -1 and len(mats) == 2 and mats[0][1].shape[1] == d and mats[1][1].shape[0] == d \
            and mats[0][1].shape[0] == 2 * mats[1][1].shape[1]:
        # one fused gate_up (2·d_ff × d), then down: SwiGLU with W₁, W₃ as the two row halves
        (n13, w13), (n2, w2_) = mats
        g, u = w13.chunk(2, 0)
        return (g, None, u, None, w2_, None), f"W_1 (gate), W_3 (up)←{n13} (two row halves), W_2←{n2} (SwiGLU)"
    if dff == d or dff == -1 and len(mats) == 2 and all(tuple(p.shape) == (d, d) for _, p in mats):
        dff = d  # hidden as wide as the model (ViT's Mlp with its default): W₁ then W₂ by registration order
        if len(mats) == 2 and all(tuple(p.shape) == (d, d) for _, p in mats):
            (n1, a), (n2, b) = mats
            return (a, bias_of_(params, n1, d), b, bias_of_(params, n2, d)), f"W_1←{n1}, W_2←{n2} (by order)"
    w1 = [(n, p) for n, p in params if tuple(p.shape) == (dff, d)]
    w2 = [(n, p) for n, p in params if tuple(p.shape) == (d, dff)]
    if len(w1) not in (1, 2) or len(w2) != 1 or dff == d and len(w1) != 1:
        raise CannotCheck(f"expected Linear d→d_ff (one, or two for a gated FFN) and one d_ff→d, found "
                          + ", ".join(f"{n} {tuple(p.shape)}" for n, p in params))

    def bias_of(n, size):
        b = dict(params).get(n.rsplit(".", 1)[0] + ".bias") if n.endswith(".weight") else None
        return b if b is not None and tuple(b.shape) == (size,) else None

    if len(w1) == 2:  # SwiGLU: the gate is W₁ by name (w1 / gate), else the first registered
        (n1, a), (n3, c) = w1
        if re.search(r"(^|\.)(w3|up|up_proj|fc_up|v)(\.|$)", n1) or re.search(r"gate", n3):
            (n1, a), (n3, c) = (n3, c), (n1, a)
        named = bool(re.search(r"gate|(^|\.)w_?1(\.|$)", n1) and re.search(r"up|(^|\.)w_?3(\.|$)", n3))
        return (a, bias_of(n1, dff), c, bias_of(n3, dff), w2[0][1], bias_of(w2[0][0], d)), \
            f"W_1 (gate)←{n1}, W_3 (up)←{n3}, W_2←{w2[0][0]} (by {'names' if named else 'shape'}; SwiGLU)"
    b1 = bias_of(w1[0][0], dff)
    b2 = bias_of(w2[0][0], d)
    if b1 is None:
        b1 = next((p for n, p in params if tuple(p.shape) == (dff,)), None)
    if b2 is None and dff != d:  # a bias of its own name, never a norm's gain inside the block
        b2 = next((p for n, p in params if tuple(p.shape) == (d,) and n.endswith("bias") and "norm" not in n), None)
    stored = f" (stored in×out: {', '.join(sorted(flipped))}, applied as x @ W)" if flipped else ""
    return (w1[0][1], b1, w2[0][1], b2), f"W_1←{w1[0][0]}, W_2←{w2[0][0]} (by shape){stored}"


def check_feed_forward(ctx: Ctx, f: Found) -> Component:
    mod, x = _ffn_module(ctx, f)
    randomize(mod, 2)
    d = ctx.sizes.d_model
    W, words = ffn_params(mod, d)
    x1 = ctx.randn(1, 3, d)
    L = [mod(x), mod(x1)]
    if len(W) == 6:
        return _check_swiglu(ctx, f, mod, W, words, x, x1, L)
    b1, b2 = W[1], W[3]

    inner = [m for m in mod.modules() if isinstance(m, nn.LayerNorm)]  # `norm(x + FFN(x))` inside (a tutorial's)

    def ref(bugs, act="relu", W=W, wrap=False):
        outer = {b for b in bugs if b in ("no-residual", "post-ln-residual")}
        if outer and not wrap:
            raise ValueError("a residual bug needs the residual inside")
        bugs = {b: v for b, v in bugs.items() if b not in outer}
        out = [R.feed_forward(inner[0](t) if wrap == "pre" else t, *W, act=act, bugs=bugs) for t in (x, x1)]
        if not wrap:
            return out
        if wrap == "pre":  # Pre-LN inside: x + FFN(norm(x))
            return [y if "no-residual" in outer else (inner[0](t) if "post-ln-residual" in outer else t) + y
                    for t, y in zip((x, x1), out)]
        if "no-residual" in outer:
            return [inner[0](y) for y in out]
        if "post-ln-residual" in outer:
            return [inner[0](t) + y for t, y in zip((x, x1), out)]
        return [inner[0](t + y) for t, y in zip((x, x1), out)]

    def grads(bugs, choice):
        lp = [t for t in W if t is not None]
        wr = tuple(None if t is None else t.detach().clone().requires_grad_() for t in W)
        return grads_equal(mod(x).sum(), lp, ref(bugs, W=wr, **choice)[0].sum(), [t for t in wr if t is not None])

    if b1 is None and b2 is None:
        ctx.add("no-bias", f, f"{f.name}.__init__")
    choices = [{"act": a, "wrap": w} for w in ([False, True, "pre"] if len(inner) == 1 else [False])
               for a in ("relu", "gelu", "gelu-tanh", "silu")]
    space = {"ffn-no-activation": ["identity"]}
    if len(inner) == 1:  # its own `norm(x + FFN(x))`: the residual's mistakes are its own too
        space.update({"no-residual": ["none"], "post-ln-residual": ["norm(x) + FFN(x)"]})
    comp = settle(ctx, f, L, ref, space, choices, None, None, words,
                   grads if len(inner) != 1 and "stored in×out" not in words else None)
    if "ffn-no-activation" not in comp.ids and comp.status == "ok":
        act = next(c["act"] for c in choices if all_close(L, ref({}, **c)))
        if len(inner) == 1 and all_close(L, ref({}, act=act, wrap=True)):
            comp.detail += "; with its own norm(x + FFN(x)) inside"
        ctx.add("activation-gelu" if act.startswith("gelu") else "activation-relu", f, where(f)) \
            if act != "silu" else None
    return comp


def _check_swiglu(ctx, f, mod, W, words, x, x1, L):
    w1, b1, w3, b3, w2, b2 = W

    def ref(bugs, swap=False):
        a, c, ba, bc = (w3, w1, b3, b1) if swap else (w1, w3, b1, b3)
        return [R.swiglu(t, a, c, w2, bugs, ba, bc, b2) for t in (x, x1)]

    # which of the two is the gate: their names say (gate_proj / w1), else either is right
    choices = [{"swap": False}] if "(by names; SwiGLU)" in words else [{"swap": False}, {"swap": True}]
    return settle(ctx, f, L, ref, R.SWIGLU_VARIANTS, choices, None, None, words)


def _eps_of(mod) -> float | None:
    for name, v in vars(mod).items():
        if "eps" in name.lower() and isinstance(v, float):
            return v
    return None


def norm_params(mod: nn.Module, d: int):
    """(the (d,) parameters, γ, β) of a LayerNorm, by names (gamma / weight / a_2, beta / bias / b_2), else order."""
    params = [(n, p) for n, p in mod.named_parameters() if tuple(p.shape) == (d,)]
    gamma = beta = None
    for n, p in params:
        low = n.lower()
        if re.search(r"gamma|weight|a_2|alpha|scale|gain|^g$|^w$", low):
            gamma = p
        elif re.search(r"beta|bias|b_2|shift|^b$", low):
            beta = p
    if gamma is None and beta is None and len(params) == 2:
        gamma, beta = params[0][1], params[1][1]
    return params, gamma, beta


def _keeps_the_mean(mod, d: int, ctx: Ctx) -> bool:
    """Behaviour decides the kind: a LayerNorm (over any axis, with any eps) gives the same output when one
    constant is added to every input; an RMS norm, which removes no mean, does not."""
    x = ctx.randn(2, 5, d)
    with torch.no_grad():
        a, b = mod(x), mod(x + 2.5)
    return isinstance(a, torch.Tensor) and a.shape == b.shape and not torch.allclose(a, b, rtol=1e-4, atol=1e-6)


def check_layer_norm(ctx: Ctx, f: Found) -> Component:
    mod = ctx.build(f).double()
    randomize(mod, 3)
    d = ctx.sizes.d_model
    if _keeps_the_mean(mod, d, ctx):  # named a layer norm, computes an RMS norm: compared with RMSNorm
        comp = check_rms_norm(ctx, Found("rms_norm", f.name, f.obj, f.how))
        comp.kind = f.kind
        comp.detail = "an RMS norm by what it does (it removes no mean), whatever its name" + \
            (f"; {comp.detail}" if comp.detail else "")
        return comp
    params, gamma, beta = norm_params(mod, d)
    x = ctx.randn(3, 5, d) * 2 + 0.5
    x[1, 2] = x[1, 2] * 1e-3  # a row with a tiny variance: where the place of eps shows
    L = [mod(x)]
    eps_own = _eps_of(mod)
    choices = [{"eps": e} for e in dict.fromkeys([eps_own, 1e-5, 1e-6, 1e-12, 1e-8, 1e-9]) if e is not None]

    def ref(bugs, eps):
        return [R.layer_norm(x, gamma, beta, eps, bugs)]

    def grads(bugs, choice):  # d/dγ, d/dβ and d/dx
        G = ctx.randn(*x.shape)
        xl, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
        gb = [t for t in (gamma, beta) if t is not None]
        gr = [t.detach().clone().requires_grad_() for t in gb]
        it = iter(gr)
        g2, b2 = (next(it) if gamma is not None else None), (next(it) if beta is not None else None)
        return grads_equal((mod(xl) * G).sum(), gb + [xl], (R.layer_norm(xr, g2, b2, bugs=bugs, **choice) * G).sum(),
                           gr + [xr])

    words = ", ".join(f"{lbl}←{n}" for lbl, t in (("γ", gamma), ("β", beta)) for n, p in params if p is t)
    return settle(ctx, f, L, ref, R.LAYER_NORM_VARIANTS, choices, None, None, words or "no parameters", grads)


def check_rms_norm(ctx: Ctx, f: Found) -> Component:
    mod = ctx.build(f).double()
    randomize(mod, 3)
    d = ctx.sizes.d_model
    params = [(n, p) for n, p in mod.named_parameters() if tuple(p.shape) == (d,)]
    if len(params) > 1:
        raise CannotCheck(f"an RMSNorm has one gain of size {d}; found " + ", ".join(n for n, _ in params))
    weight = params[0][1] if params else None
    x = ctx.randn(3, 5, d) * 2 + 0.5
    x[1, 2] = x[1, 2] * 1e-3  # a row with a tiny mean square: where the place of eps shows
    L = [mod(x)]
    eps_own = _eps_of(mod)
    choices = [{"eps": e} for e in dict.fromkeys([eps_own, 1e-5, 1e-6, 1e-8, 1e-12]) if e is not None]

    def ref(bugs, eps):
        return [R.rms_norm(x, weight, eps, bugs)]

    return settle(ctx, f, L, ref, R.RMS_NORM_VARIANTS, choices, None, None,
                   f"w←{params[0][0]}" if params else "no parameters")


def check_positional_encoding(ctx: Ctx, f: Found) -> Component:
    mod = ctx.build(f)
    d, L_ = ctx.sizes.d_model, ctx.sizes.max_len
    table = None
    for name, b in mod.named_buffers():
        if b.numel() >= L_ * d and b.shape[-1] == d:
            table = ("buffer", name, b)
            break
    if table is None:
        for name, p in mod.named_parameters():
            if p.numel() >= L_ * d and p.shape[-1] == d:
                table = ("parameter", name, p)
                break
    if table is None:
        for name, v in vars(mod).items():
            if isinstance(v, torch.Tensor) and v.numel() >= L_ * d and v.shape[-1] == d:
                table = ("attribute", name, v)
                break
    if table is None and any(isinstance(m, nn.Embedding) for m in mod.modules()):
        table = ("embedding", "", None)
    comp = Component(f.kind, f.name, "ok", [], "")
    if table is None:
        raise CannotCheck(f"no table of {L_}×{d} found among its buffers, parameters or attributes")
    how, tname, _ = table
    comp.detail = f"table {tname} ({how})" if tname else "an nn.Embedding"
    if how in ("embedding",):
        ctx.add("pe-learned", f, f"{f.name}.__init__")
        return comp
    mod.double()
    T = 7
    # PyTorch's own tutorial keeps the table as (max_len, 1, d) and takes (T, B, d) inputs: sequence first
    seq_first = table[2] is not None and table[2].dim() == 3 and table[2].shape[0] >= L_ and table[2].shape[1] == 1
    shape = (T, 2, d) if seq_first else (2, T, d)
    zeros = torch.zeros(*shape, dtype=torch.float64)
    out = first_tensor(mod(zeros), ndim=3)
    pe = (out[:, 0] if seq_first else out[0]).double()  # (T, d)
    if seq_first:
        comp.detail += ", sequence first (T, B, d)"
    if how == "attribute":
        ctx.add("pe-not-buffer", f, f"{f.name}.__init__",
                f"self.{tname} is a plain tensor: use self.register_buffer({tname!r}, ...)")
        comp.status, comp.ids = "differs", ["pe-not-buffer"]
    elif how == "buffer" and tname not in mod.state_dict():
        pass  # persistent=False: rebuilt at construction, moves with .to(): fine
    if how == "parameter" and not close(pe, R.positional_table(T, d)) and not \
            close(pe, R.positional_table(T, d, "sin-cos-halves")):
        ctx.add("pe-learned", f, f"{f.name}.__init__")
        return comp
    x = ctx.randn(*shape)
    added = first_tensor(mod(x), ndim=3) - out
    if close(added, x * math.sqrt(d)):
        ctx.add("embed-scale", f, where(f))
    elif not close(added, x):
        ctx.add("unknown-difference", f, where(f), "forward(x) is not x + PE[:T]: " + departure(added, x))
        comp.status = "differs"
        comp.ids.append("unknown-difference")
        return comp
    if close(pe, R.positional_table(T, d)):
        return comp
    if close(pe, R.positional_table(T, d, "sin-cos-halves")):
        ctx.add("pe-sin-cos-halves", f, f"{f.name}.__init__")
        return comp
    sub = next((v for v in R.PE_VARIANTS[1:] if close(pe, R.positional_table(T, d, v))), None)
    ctx.add("pe-wrong-formula", f, f"{f.name}.__init__",
            f"your table matches: {sub}" if sub else departure(pe, R.positional_table(T, d), ("position", "dimension")))
    comp.status = "differs"
    comp.ids.append("pe-wrong-formula")
    return comp
