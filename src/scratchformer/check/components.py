"""The components, each checked against the reference on the same weights and inputs: scaled
dot-product attention, multi-head attention, the feed-forward block, layer norm and the positional
encoding (the layers that wire them are in `checks.py`).
"""
from __future__ import annotations

import inspect
import math
import re

import torch
from torch import nn

from . import reference as R
from .compare import (AttnCaller, Ctx, _detached, all_close, close, departure, grads_equal, has_lazy, key_keep,
                      map_attention, randomize, search, where)
from .discover import CannotCheck, Found, first_tensor
from .report import Component


# --- the components -------------------------------------------------------------------------------

def check_scaled_dot_product(ctx: Ctx, f: Found) -> Component:
    obj = ctx.build(f) if inspect.isclass(f.obj) else f.obj
    caller = AttnCaller(obj, ctx.form, "attention")
    B, h, Tq, Tk, dk = 3, 4, 5, 7, 6
    lens = caller.form.kind == "lens"
    shape = (B, Tq, dk) if lens else (B, h, Tq, dk)
    kshape = (B, Tk, dk) if lens else (B, h, Tk, dk)
    q, k, v = ctx.randn(*shape), ctx.randn(*kshape), ctx.randn(*kshape)
    keep = key_keep(B, Tk)
    caller.settle(q, k, v, keep)
    L = [caller(q, k, v, keep)[:2], caller(q[:1, ..., :3, :], k[:1, ..., :3, :], v[:1, ..., :3, :])]
    kb = keep[:, None, :] if lens else keep[:, None, None, :]

    def ref(bugs, fill=-1e9):
        return [R.scaled_dot_product(q, k, v, kb, bugs, fill=fill)[0][:2],
                R.scaled_dot_product(q[:1, ..., :3, :], k[:1, ..., :3, :], v[:1, ..., :3, :], None, bugs)[0]]

    space = {b: s for b, s in R.ATTENTION_VARIANTS.items() if b in R.SDPA_BUGS}
    space["wrong-scale"] = ["d_k"]
    return _settle(ctx, f, L, ref, space, [{"fill": -1e9}, {"fill": float("-inf")}, {"fill": "add"}],
                   lambda: caller(q, k, v, keep)[2], lambda: R.scaled_dot_product(q, k, v, kb)[0][2], "")


def _settle(ctx, f, L, ref, space, choices, masked_row, uniform_row, detail, grad_check=None):
    """Search the variants; add the findings; check the fully masked row and (if it matches) the gradients."""
    hit = search(L, ref, space, choices)
    comp = Component(f.kind, f.name, "ok", [], detail)
    if hit is None:
        first = ref({}, **choices[0])
        bad = next((i for i, (a, b) in enumerate(zip(L, first)) if not close(a, b)), 0)
        ctx.add("unknown-difference", f, where(f), departure(L[bad], first[bad]))
        comp.status, comp.ids = "differs", ["unknown-difference"]
        return comp
    bugs, choice = hit
    for b, sub in bugs.items():
        ctx.add(b, f, where(f), f"matches the reference with this mistake: {sub}" if sub not in ("none", "zero", "inverted") else "")
    if bugs:
        comp.status, comp.ids = "differs", list(bugs)
    if masked_row is not None and not {"mask-inverted", "mask-fill-zero"} & set(bugs):  # the fill is known then
        try:
            row = masked_row()
        except Exception:
            row = None
        if row is not None and torch.isnan(row).any():
            ctx.add("all-masked-nan", f, where(f), "a batch row that is all padding came out NaN")
            ctx.add("mask-fill-inf", f, where(f))
        elif row is not None and close(row, uniform_row()):
            ctx.add("mask-fill-1e9", f, where(f))
    if grad_check is not None and not bugs:
        try:
            same = grad_check(bugs, choice)
        except Exception as e:  # a graph the learner cut (detach, no_grad, numpy)
            same, detail = False, f"backward failed: {type(e).__name__}: {e}"
        if not same:
            ctx.add("unknown-difference", f, where(f), "the outputs match, but the gradients of the weights differ "
                    "(a .detach(), .data or numpy step in forward?)")
            comp.status, comp.ids = "differs", ["unknown-difference"]
    return comp


def check_attention(ctx: Ctx, f: Found) -> Component:
    mod = ctx.build(f)
    caller = AttnCaller(mod, ctx.form, "attention")
    d, h = ctx.sizes.d_model, ctx.sizes.heads
    B, Tq = 3, 5
    Tk = Tq if caller.self_only else 7
    xq = ctx.randn(B, Tq, d)
    xk = xq if caller.self_only else ctx.randn(B, Tk, d)
    xv = xq if caller.self_only else ctx.randn(B, Tk, d)
    keep = key_keep(B, Tk)
    if has_lazy(mod):
        caller.settle(xq.float(), xk.float(), xv.float(), keep)
    mod.double()
    randomize(mod, 1)
    caller.settle(xq, xk, xv, keep)
    w, words, _ = map_attention(mod, d)
    x1 = ctx.randn(1, 3, d)
    L = [caller(xq, xk, xv, keep)[:2], caller(x1, x1, x1)]
    kb = keep[:, None, None, :]

    def ref(bugs, fill=-1e9, w=w):
        return [R.multi_head(xq, xk, xv, w, h, kb, bugs, fill=fill)[:2], R.multi_head(x1, x1, x1, w, h, None, bugs)]

    def grads(bugs, choice):
        """d(loss)/d(weights) and d(loss)/d(inputs), on the rows with something to attend to (a NaN
        row would spoil every gradient). A fused W_QKV is compared through the inputs only."""
        G = ctx.randn(2, Tq, d)
        wr = _detached(w)
        fused = words.startswith("W_Q,W_K,W_V←")
        lp = [] if fused else [t for pair in w.values() for t in pair if t is not None]
        rp = [] if fused else [t for pair in wr.values() for t in pair if t is not None]
        ins_l = [t[:2].clone().requires_grad_() for t in (xq, xk, xv)]
        ins_r = [t[:2].clone().requires_grad_() for t in (xq, xk, xv)]
        if caller.self_only:
            ins_l[1] = ins_l[2] = ins_l[0]
            ins_r[1] = ins_r[2] = ins_r[0]
        out_ref = R.multi_head(*ins_r, wr, h, kb[:2], bugs, **choice)
        n = 1 if caller.self_only else 3
        return grads_equal((caller(*ins_l, keep[:2]) * G).sum(), lp + ins_l[:n], (out_ref * G).sum(), rp + ins_r[:n])

    if all(b is None for _, b in w.values()):
        ctx.add("no-bias", f, f"{f.name}.__init__")
    return _settle(ctx, f, L, ref, R.ATTENTION_VARIANTS, [{"fill": -1e9}, {"fill": float("-inf")}, {"fill": "add"}],
                   lambda: caller(xq, xk, xv, keep)[2], lambda: R.multi_head(xq, xk, xv, w, h, kb)[2], words, grads)


def _ffn_module(ctx, f):
    mod = ctx.build(f)
    x = ctx.randn(3, 5, ctx.sizes.d_model)
    if has_lazy(mod):
        mod(x.float())
    return mod.double(), x


def ffn_params(mod: nn.Module, d: int, dff: int):
    """((W₁, b₁, W₂, b₂), the mapping in words) of a feed-forward block, by shape (d→d_ff, d_ff→d)."""
    params = list(mod.named_parameters())
    w1 = [(n, p) for n, p in params if tuple(p.shape) == (dff, d)]
    w2 = [(n, p) for n, p in params if tuple(p.shape) == (d, dff)]
    if len(w1) != 1 or len(w2) != 1:
        raise CannotCheck(f"expected one Linear {d}→{dff} and one {dff}→{d}, found "
                          + ", ".join(f"{n} {tuple(p.shape)}" for n, p in params))
    b1 = next((p for n, p in params if tuple(p.shape) == (dff,)), None)
    b2 = next((p for n, p in params if tuple(p.shape) == (d,)), None)
    return (w1[0][1], b1, w2[0][1], b2), f"W_1←{w1[0][0]}, W_2←{w2[0][0]} (by shape)"


def check_feed_forward(ctx: Ctx, f: Found) -> Component:
    mod, x = _ffn_module(ctx, f)
    randomize(mod, 2)
    d = ctx.sizes.d_model
    W, words = ffn_params(mod, d, ctx.sizes.d_ff)
    b1, b2 = W[1], W[3]
    x1 = ctx.randn(1, 3, d)
    L = [mod(x), mod(x1)]

    def ref(bugs, act="relu", W=W):
        return [R.feed_forward(x, *W, act=act, bugs=bugs), R.feed_forward(x1, *W, act=act, bugs=bugs)]

    def grads(bugs, choice):
        lp = [t for t in W if t is not None]
        wr = tuple(None if t is None else t.detach().clone().requires_grad_() for t in W)
        return grads_equal(mod(x).sum(), lp, ref(bugs, W=wr, **choice)[0].sum(), [t for t in wr if t is not None])

    if b1 is None and b2 is None:
        ctx.add("no-bias", f, f"{f.name}.__init__")
    choices = [{"act": "relu"}, {"act": "gelu"}, {"act": "gelu-tanh"}]
    comp = _settle(ctx, f, L, ref, {"ffn-no-activation": ["identity"]}, choices, None, None, words, grads)
    if "ffn-no-activation" not in comp.ids and comp.status == "ok":
        act = next(c["act"] for c in choices if all_close(L, ref({}, **c)))
        ctx.add("activation-gelu" if act.startswith("gelu") else "activation-relu", f, where(f))
    return comp


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


def check_layer_norm(ctx: Ctx, f: Found) -> Component:
    mod = ctx.build(f).double()
    randomize(mod, 3)
    d = ctx.sizes.d_model
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
    return _settle(ctx, f, L, ref, R.LAYER_NORM_VARIANTS, choices, None, None, words or "no parameters", grads)


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
