"""The comparisons: each learner component against our reference on the same weights and inputs.

For each component: build it (tiny sizes, dropout 0, eval), put float64 random weights in it, read
those weights into the reference (by shape and registration order, names as hints: the mapping is
reported), run both on the same random inputs (masked, with padded and fully padded rows, batch 1,
odd lengths), then search the reference's bug switches for the variant that equals the learner's
output. That variant's ids are the findings; no variant → `unknown-difference` with the first
position where the outputs part. Layers (encoder / decoder) are checked for their wiring with the
learner's own sublayers, so a bug inside a sublayer is reported once, where it is.
"""
from __future__ import annotations

import inspect
import itertools
import math
import re

import torch
from torch import nn

from . import masks as M
from . import reference as R
from .discover import CannotCheck, Found, Sizes, build, call, call_plan, first_tensor
from .report import Component, Report, finding

TOL = 1e-6


# --- comparing ------------------------------------------------------------------------------------

def close(a: torch.Tensor, b: torch.Tensor) -> bool:
    if tuple(a.shape) != tuple(b.shape):
        return False
    a, b = a.double(), b.double()
    na, nb = torch.isnan(a), torch.isnan(b)
    if not torch.equal(na, nb):
        return False
    a, b = a[~na], b[~nb]
    if a.numel() == 0:
        return True
    return bool((a - b).abs().max() <= TOL * (1 + b.abs().max()))


def departure(a: torch.Tensor, b: torch.Tensor, axes=("batch", "position", "feature")) -> str:
    """Where `a` (the learner's) first departs from `b` (ours), and by how much."""
    if tuple(a.shape) != tuple(b.shape):
        return f"output shape {tuple(a.shape)}, expected {tuple(b.shape)}"
    diff = (a.double() - b.double()).abs()
    diff = torch.where(torch.isnan(diff), torch.full_like(diff, float("inf")), diff)
    bad = (diff > TOL * (1 + b.double().abs().max())).nonzero()
    if len(bad) == 0:
        return "the gradients differ"
    idx = tuple(bad[0].tolist())
    names = axes[-len(idx):] if len(idx) <= len(axes) else [f"dim{i}" for i in range(len(idx))]
    where = ", ".join(f"{n} {i}" for n, i in zip(names, idx))
    return f"first difference at {where}: yours {a[idx].item():.6g}, reference {b[idx].item():.6g} " \
           f"(largest difference {diff.max().item():.3g})"


def all_close(learner, refs) -> bool:
    return len(learner) == len(refs) and all(close(x, y) for x, y in zip(learner, refs))


def variants(space: dict, max_bugs: int = 2):
    """{} first, then each bug alone, then pairs of different bugs (each with its sub-variants)."""
    singles = [(b, s) for b, subs in space.items() for s in subs]
    yield {}
    for b, s in singles:
        yield {b: s}
    if max_bugs >= 2:
        for (b1, s1), (b2, s2) in itertools.combinations(singles, 2):
            if b1 != b2:
                yield {b1: s1, b2: s2}


def search(learner, ref, space: dict, choices=({},), max_bugs: int = 2):
    """The first (bugs, choice) whose reference outputs equal the learner's; None when none does."""
    for bugs in variants(space, max_bugs):
        for choice in choices:
            try:
                outs = ref(bugs, **choice)
            except (RuntimeError, ValueError, IndexError):
                continue
            if all_close(learner, outs):
                return bugs, choice
    return None


# --- weights --------------------------------------------------------------------------------------

def randomize(mod: nn.Module, seed: int) -> None:
    """Distinct float64 weights in every parameter: gains near 1, biases near 0 but not 0."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in mod.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype)
            if p.dim() == 1:
                last = name.rsplit(".", 1)[-1].lower()
                gain = last in ("weight", "gamma", "a_2", "alpha", "scale", "g", "gain") and "norm" in name.lower() \
                    or last in ("gamma", "a_2", "alpha", "gain")
                p.copy_(1 + 0.2 * r if gain else 0.2 * r)
            else:
                p.copy_(r / math.sqrt(p.shape[-1]))


def has_lazy(mod: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.lazy.LazyModuleMixin) and m.has_uninitialized_params() for m in mod.modules())


_HINTS = {
    "q": r"(w_?)?q(_?(proj|linear|lin|layer))?|query|queries|to_q|linear_?q|lin_?q|fc_?q|q_?fc",
    "k": r"(w_?)?k(_?(proj|linear|lin|layer))?|key|keys|to_k|linear_?k|lin_?k|fc_?k|k_?fc",
    "v": r"(w_?)?v(_?(proj|linear|lin|layer))?|value|values|to_v|linear_?v|lin_?v|fc_?v|v_?fc",
    "o": r"(w_?)?o(_?(proj|linear|lin|layer))?|out(_?(proj|linear|put|layer))?|dense|fc|fc_?o(ut)?|proj|linear_?o(ut)?|to_out|combine\w*",
}


def _role(path: str) -> str | None:
    last = path.rsplit(".", 1)[-1].lower()
    for role, pat in _HINTS.items():
        if re.fullmatch(pat, last):
            return role
    return None


def map_attention(mod: nn.Module, d: int):
    """{"q"|"k"|"v"|"o": (weight, bias | None)} from the learner's parameters, and the mapping in words."""
    params = list(mod.named_parameters())
    sq = [(n, p) for n, p in params if tuple(p.shape) == (d, d)]
    fused = [(n, p) for n, p in params if tuple(p.shape) == (3 * d, d)]
    biases = {n.rsplit(".", 1)[0]: p for n, p in params if p.dim() == 1 and n.endswith("bias")}
    if len(sq) == 1 and len(fused) == 1:
        (fn, fw), (on, ow) = fused[0], sq[0]
        fb = biases.get(fn.rsplit(".", 1)[0])
        ws = fw.chunk(3, 0)
        bs = fb.chunk(3, 0) if fb is not None else (None,) * 3
        w = {"q": (ws[0], bs[0]), "k": (ws[1], bs[1]), "v": (ws[2], bs[2]), "o": (ow, biases.get(on.rsplit(".", 1)[0]))}
        return w, f"W_Q,W_K,W_V←{fn} (3 rows blocks), W_O←{on}", [fw, ow]
    if len(sq) != 4:
        raise CannotCheck(f"expected 4 linear maps of {d}×{d} (W_Q, W_K, W_V, W_O), found {len(sq)}: "
                          + ", ".join(f"{n} {tuple(p.shape)}" for n, p in params[:8]))
    paths = [n.rsplit(".", 1)[0] if n.endswith(".weight") else n for n, _ in sq]
    roles = [_role(p) for p in paths]
    order = roles if sorted(r or "" for r in roles) == ["k", "o", "q", "v"] else ["q", "k", "v", "o"]
    w = {r: (p, biases.get(path)) for r, (n, p), path in zip(order, sq, paths)}
    how = "names" if order is roles else "registration order"
    words = ", ".join(f"W_{r.upper()}←{n}" for r, (n, _) in zip(order, sq))
    return w, f"{words} (by {how})", [p for _, p in sq]


def _detached(w):
    return {r: (a.detach().clone().requires_grad_(), None if b is None else b.detach().clone().requires_grad_())
            for r, (a, b) in w.items()}


def grads_equal(loss_learner, learner_params, loss_ref, ref_params) -> bool:
    gl = torch.autograd.grad(loss_learner, learner_params, allow_unused=True)
    gr = torch.autograd.grad(loss_ref, ref_params, allow_unused=True)
    return all(a is not None and b is not None and close(a, b) for a, b in zip(gl, gr))


# --- the context of one file ----------------------------------------------------------------------

class Ctx:
    def __init__(self, module, form: M.MaskForm, sizes: Sizes, found: list[Found], report: Report):
        self.module, self.form, self.sizes, self.report = module, form, sizes, report
        self.found = {f.kind: f for f in found}
        self.gen = torch.Generator().manual_seed(0)

    def randn(self, *shape):
        return torch.randn(*shape, generator=self.gen, dtype=torch.float64)

    def build(self, f: Found) -> nn.Module:
        torch.manual_seed(0)
        mod = build(f, self.sizes, self.found)
        return mod.eval()

    def add(self, id: str, f: Found, where: str, detail: str = ""):
        self.report.findings.append(finding(id, f.kind, where, detail))


def where(f: Found, method: str = "forward") -> str:
    return f"{f.name}.{method}" if inspect.isclass(f.obj) else f"{f.name}()"


def key_keep(B: int, S: int) -> torch.Tensor:
    """(B, S) bool: row 0 all tokens, row 1 ends in 3 pads, row 2 (if any) all padding."""
    keep = torch.ones(B, S, dtype=torch.bool)
    if B > 1:
        keep[1, S - 3:] = False
    if B > 2:
        keep[2] = False
    return keep


class AttnCaller:
    """Calls an attention module (or function) by its own parameter names, with a mask in the learner's form."""

    def __init__(self, fn, form: M.MaskForm, kind: str = "attention"):
        self.torch_mha = isinstance(fn, nn.MultiheadAttention)
        if self.torch_mha:  # torch's own, inside a learner's layer: its masks say True = blocked
            self.fn, self.plan, self.self_only, self.mask_role, self.mask_required = fn, [], False, "mask", False
            learner_said = form.source.startswith(("your function", "your line", "--mask"))
            self.form = form if learner_said else M.MaskForm("pad", torch.bool, 2, "nn.MultiheadAttention's key_padding_mask",
                                                              "nn.MultiheadAttention 的 key_padding_mask")
            self.ndim = self.form.ndim or 2
            return
        self.fn, self.plan = fn, call_plan(fn.forward if isinstance(fn, nn.Module) else fn, kind)
        roles = {r for _, r, _ in self.plan}
        self.self_only = "q" not in roles and "x" in roles
        if not self.self_only and not {"q", "k", "v"} <= roles:
            raise CannotCheck("forward takes neither (query, key, value, ...) nor (x, ...)")
        self.mask_role = "lens" if "lens" in roles else "mask" if "mask" in roles else None
        self.mask_required = any(req for _, r, req in self.plan if r == self.mask_role)
        self.form = M.MaskForm("lens", torch.long, None, form.source, form.source_zh) \
            if self.mask_role == "lens" and form.kind != "lens" else form
        self.ndim = form.ndim

    def __call__(self, q, k, v, keep=None, square=False, out_shape=None):
        if self.torch_mha:
            return self._torch(q, k, v, keep, square)
        vals = {"q": q, "k": k, "v": v, "x": q}
        if self.mask_role is not None:
            if keep is None and self.mask_required:
                keep = torch.ones(q.shape[0], k.shape[-2], dtype=torch.bool)
            if keep is not None:
                m = self.form.square(keep, self.ndim) if square else self.form.keys(keep, self.ndim)
                vals[self.mask_role] = m.to(q.dtype) if m.is_floating_point() else m
        return first_tensor(call(self.fn, self.plan, vals), shape=out_shape or tuple(q.shape))

    def _torch(self, q, k, v, keep, square):
        kpm = am = None
        if keep is not None and square:
            am = ~keep[0]  # (T, T), True = blocked
        elif keep is not None:
            kpm = ~keep  # (B, S), True = padding
        if not self.fn.batch_first:
            q, k, v = (t.transpose(0, 1) for t in (q, k, v))  # (T, B, d)
        out = self.fn(q, k, v, key_padding_mask=kpm, attn_mask=am, need_weights=False)[0]
        return out if self.fn.batch_first else out.transpose(0, 1)

    def settle(self, q, k, v, keep):
        """Find the mask rank the learner's code accepts ((B,1,1,S) or (B,1,S)), trying theirs first."""
        if self.torch_mha:
            return
        if self.mask_role is None or self.form.kind == "lens":
            self(q, k, v, keep)
            return
        errors = []
        for nd in dict.fromkeys([self.form.ndim, 4, 3, 2]):
            if nd is None:
                continue
            self.ndim = nd
            try:
                self(q, k, v, keep)
                return
            except NotImplementedError:
                raise  # a skeleton's TODO, whatever the mask
            except Exception as e:  # the learner's code: any error means "not this rank"
                errors.append(f"{type(e).__name__}: {e}")
        raise CannotCheck(f"no mask shape worked ({errors[0] if errors else '?'})")


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


# --- layers: the wiring, with the learner's own sublayers -----------------------------------------

_ATTN_NAME = re.compile(r"attention|attn|mha", re.I)
_FFN_NAME = re.compile(r"feed|ffn|mlp|positionwise", re.I)


def _is_norm(m: nn.Module) -> bool:
    n = type(m).__name__.lower()
    return isinstance(m, nn.LayerNorm) or ("norm" in n and "add" not in n and "sublayer" not in n
                                          and any(p.dim() == 1 for p in m.parameters(recurse=False)))


def parts(layer: nn.Module, ctx: Ctx):
    """(attention modules, feed-forward module, norms) of a layer, in registration order."""
    attn, ffn, norms, taken = [], None, [], []
    cls_attn = ctx.found.get("attention")
    for name, m in layer.named_modules():
        if m is layer or any(name.startswith(t + ".") for t in taken):
            continue
        tn = type(m).__name__
        if (cls_attn is not None and inspect.isclass(cls_attn.obj) and isinstance(m, cls_attn.obj)) or \
                isinstance(m, nn.MultiheadAttention) or (_ATTN_NAME.search(tn) and "sublayer" not in tn.lower()
                 and "dotproduct" not in tn.lower().replace("_", "") and "scaled" not in tn.lower()):
            attn.append((name, m))
            taken.append(name)
        elif ffn is None and (_FFN_NAME.search(tn) or _FFN_NAME.search(name.rsplit(".", 1)[-1])
                              and isinstance(m, nn.Sequential)):
            ffn = (name, m)
            taken.append(name)
        elif _is_norm(m):
            norms.append((name, m))
            taken.append(name)
    return attn, ffn, norms


def _layer_variants(n_sub: int):
    """(order, residual mask, extra bug) for Post-LN / Pre-LN and each missing residual."""
    for order in ("post", "pre"):
        yield order, (True,) * n_sub, None
    for order in ("post", "pre"):
        for i in range(n_sub):
            res = tuple(j != i for j in range(n_sub))
            yield order, res, ("no-residual", i)
        yield order, (False,) * n_sub, ("no-residual", -1)


def _sub(order, norm, f, x, residual):
    if order == "post":
        y = f(x)
        return norm(x + y) if residual else norm(y)
    y = f(norm(x))
    return x + y if residual else y


def check_encoder_layer(ctx: Ctx, f: Found) -> Component:
    layer = ctx.build(f)
    d = ctx.sizes.d_model
    plan = call_plan(layer.forward, "encoder_layer")
    attn, ffn, norms = parts(layer, ctx)
    if len(attn) != 1 or ffn is None or len(norms) != 2:
        raise CannotCheck(f"expected one attention, one feed-forward and two norms inside, found "
                          f"{len(attn)} / {0 if ffn is None else 1} / {len(norms)}")
    A = AttnCaller(attn[0][1], ctx.form, "attention")
    mask_role = next((r for _, r, _ in plan if r in ("mask", "lens")), None)
    lay_form = A.form
    B, T = 3, 5
    x = ctx.randn(B, T, d)
    keep = key_keep(B, T)

    def run(x, keep, ndim):
        vals = {"x": x}
        if mask_role is not None:
            vals[mask_role] = lay_form.keys(keep, ndim)
        return first_tensor(call(layer, plan, vals), shape=tuple(x.shape))

    if has_lazy(layer):
        A.settle(x.float(), x.float(), x.float(), keep)
        run(x.float(), keep, A.ndim)
    layer.double()
    randomize(layer, 4)
    A.settle(x, x, x, keep)
    x1, keep1 = ctx.randn(1, 3, d), torch.ones(1, 3, dtype=torch.bool)
    L = [run(x, keep, A.ndim)[:2], run(x1, keep1, A.ndim)]
    fmod, n1, n2 = ffn[1], norms[0][1], norms[1][1]

    def ref_one(x, keep, order, res):
        a = lambda y: A(y, y, y, keep)  # noqa: E731
        y = _sub(order, n1, a, x, res[0])
        return _sub(order, n2, fmod, y, res[1])

    return _layer_settle(ctx, f, L, lambda order, res: [ref_one(x, keep, order, res)[:2], ref_one(x1, keep1, order, res)],
                         2, ["attention", "feed-forward"],
                         f"{attn[0][0]}, {ffn[0]}, {norms[0][0]}, {norms[1][0]} (your own sublayers)")


def _layer_settle(ctx, f, L, ref, n_sub, sub_names, words, extra=()):
    comp = Component(f.kind, f.name, "ok", [], words)
    for order, res, bug in list(_layer_variants(n_sub)) + list(extra):
        try:
            outs = ref(order, res) if bug is None or bug[0] == "no-residual" else ref(order, res, bug)
        except (RuntimeError, ValueError, IndexError, CannotCheck):
            continue
        if all_close(L, outs):
            ctx.add("post-ln" if order == "post" else "pre-ln", f, where(f))
            if bug is not None:
                if bug[0] == "no-residual":
                    which = "every sublayer" if bug[1] < 0 else f"the {sub_names[bug[1]]} sublayer"
                    ctx.add("no-residual", f, where(f), f"no x + ... around {which}")
                else:
                    ctx.add(bug[0], f, where(f), bug[2] if len(bug) > 2 else "")
                comp.status, comp.ids = "differs", [bug[0]]
            return comp
    first = ref("post", (True,) * n_sub)
    ctx.add("unknown-difference", f, where(f), "neither Post-LN nor Pre-LN wiring of your own sublayers: "
            + departure(L[0], first[0]))
    comp.status, comp.ids = "differs", ["unknown-difference"]
    return comp


def check_decoder_layer(ctx: Ctx, f: Found) -> Component:
    layer = ctx.build(f)
    d = ctx.sizes.d_model
    plan = call_plan(layer.forward, "decoder_layer")
    roles = {r for _, r, _ in plan}
    d2l_state = "m" not in roles and "state" in roles  # d2l: forward(X, state), state = [enc_outputs, enc_valid_lens, cache]
    if "m" not in roles and not d2l_state:
        raise CannotCheck("forward takes no encoder output (memory / enc_output, or d2l's state)")
    attn, ffn, norms = parts(layer, ctx)
    if len(attn) != 2 or ffn is None or len(norms) != 3:
        raise CannotCheck(f"expected two attentions, one feed-forward and three norms inside, found "
                          f"{len(attn)} / {0 if ffn is None else 1} / {len(norms)}")
    A1, A2 = AttnCaller(attn[0][1], ctx.form), AttnCaller(attn[1][1], ctx.form)
    B, T = 3, 5
    S = T  # memory as long as the target, so that reading K/V from the decoder runs and can be named
    x, mem = ctx.randn(B, T, d), ctx.randn(B, S, d)
    src_keep = key_keep(B, S)
    src_keep[2] = True  # no fully padded source here
    tgt_keep = R.causal_keep(T)[None].expand(B, T, T)

    def run(x, mem, src_keep, tgt_keep):
        if d2l_state:
            # d2l builds its causal valid lengths only in training mode (in eval it expects one step at a
            # time): train mode with dropout 0 is the full-sequence forward
            layer.train()
            try:
                out = layer(x, [mem, A2.form.keys(src_keep), [None] * 8])
            finally:
                layer.eval()
            return first_tensor(out, shape=tuple(x.shape))
        vals = {"x": x, "m": mem, "src_mask": A2.form.keys(src_keep, A2.ndim),
                "tgt_mask": A1.form.square(tgt_keep, A1.ndim)}
        return first_tensor(call(layer, plan, vals), shape=tuple(x.shape))

    if has_lazy(layer):
        A1.settle(x.float(), x.float(), x.float(), src_keep)
        A2.settle(x.float(), mem.float(), mem.float(), src_keep)
        run(x.float(), mem.float(), src_keep, tgt_keep)
    layer.double()
    randomize(layer, 5)
    A1.settle(x, x, x, src_keep)
    A2.settle(x, mem, mem, src_keep)
    L = [run(x, mem, src_keep, tgt_keep)]
    fmod, (n1, n2, n3) = ffn[1], (n[1] for n in norms)

    def ref(order, res, bug=None):
        kv_from_decoder = bug is not None and bug[0] == "cross-attention-kv"
        causal = None if bug is not None and bug[0] == "no-causal-mask" else tgt_keep
        a1 = lambda y: A1(y, y, y, causal, square=causal is not None)  # noqa: E731
        y = _sub(order, n1, a1, x, res[0])
        a2 = (lambda z: A2(z, z, z, src_keep)) if kv_from_decoder else (lambda z: A2(z, mem, mem, src_keep))  # noqa: E731
        z = _sub(order, n2, a2, y, res[1])
        return [_sub(order, n3, fmod, z, res[2])]

    extra = [(o, (True,) * 3, (b, 0, detail)) for o in ("post", "pre") for b, detail in
             (("cross-attention-kv", "the second attention gets (x, x, x) instead of (x, memory, memory)"),
              ("no-causal-mask", "the self-attention ignores tgt_mask"))]
    return _layer_settle(ctx, f, L, ref, 3, ["self-attention", "cross-attention", "feed-forward"],
                         f"{attn[0][0]} (self), {attn[1][0]} (cross), {ffn[0]}, "
                         + ", ".join(n for n, _ in norms) + " (your own sublayers)", extra)


def check_causal_mask(ctx: Ctx, f: Found) -> Component:
    T = 6
    out = f.obj(T)
    if not isinstance(out, torch.Tensor):
        raise CannotCheck(f"{f.name}({T}) did not return a tensor")
    m = out.reshape(-1, T, T)[0] != 0  # (T, T)
    comp = Component(f.kind, f.name, "ok", [], f"{f.name}({T}) -> {tuple(out.shape)} {out.dtype}".replace("torch.", ""))
    ones = torch.ones(T, T, dtype=torch.bool)
    if torch.equal(m, ones.tril()):
        polarity = "keep"
    elif torch.equal(m, ones.triu(1)):
        polarity = "pad"
    else:
        wrong = {"the diagonal is masked (a position cannot see itself)": [ones.tril(-1), ones.triu(0)],
                 "the next position is visible (off by one)": [ones.tril(1), ones.triu(2)],
                 "nothing is masked": [ones, ~ones], "the past is masked instead of the future": [ones.triu(), ones.tril(-1)]}
        what = next((k for k, ms in wrong.items() if any(torch.equal(m, x) for x in ms)), None)
        ctx.add("no-causal-mask" if what else "unknown-difference", f, where(f),
                what or f"not a causal mask: {m.int().tolist()}")
        comp.status, comp.ids = "differs", ["no-causal-mask" if what else "unknown-difference"]
        return comp
    if ctx.form.kind in ("keep", "pad") and polarity != ctx.form.kind and not ctx.form.source.startswith("the tutorials"):
        ctx.add("mask-inverted", f, where(f), f"it marks {'the visible' if polarity == 'keep' else 'the hidden'} "
                f"positions with 1/True, but your padding masks ({ctx.form.source}) mark "
                f"{'padding' if ctx.form.kind == 'pad' else 'tokens'} with 1/True")
        comp.status, comp.ids = "differs", ["mask-inverted"]
    return comp


def check_encoder(ctx: Ctx, f: Found) -> Component:
    enc = ctx.build(f)
    d = ctx.sizes.d_model
    plan = call_plan(enc.forward, "encoder")
    tokens_in = any(isinstance(m, nn.Embedding) for m in enc.modules())
    mask_role = next((r for _, r, _ in plan if r in ("mask", "lens")), None)
    if not tokens_in and mask_role is None:
        raise CannotCheck("an encoder over vectors needs a mask argument to be checked")
    enc.double()
    randomize(enc, 6)
    if tokens_in:
        inputs = torch.randint(1, ctx.sizes.vocab, (2, 7), generator=ctx.gen)
        inputs[1, 4:] = 0
    else:
        inputs = ctx.randn(2, 7, d)
    keep = torch.ones(2, 7, dtype=torch.bool)
    keep[1, 4:] = False
    ndims = [None]

    def run(x, keep):
        vals = {"x": x}
        if mask_role is not None:
            vals[mask_role] = ctx.form.keys(keep, ndims[0])
        return first_tensor(call(enc, plan, vals), ndim=3)

    for nd in dict.fromkeys([ctx.form.ndim, 4, 3]):
        ndims[0] = nd
        try:
            full = run(inputs, keep)
            break
        except NotImplementedError:
            raise
        except Exception as e:  # the learner's code: this mask rank is not theirs
            err = e
    else:
        raise CannotCheck(f"no mask shape worked ({type(err).__name__}: {err})")
    alone = run(inputs[1:, :4], keep[1:, :4])
    comp = Component(f.kind, f.name, "ok", [], "padding invariance: a padded row equals the same row unpadded")
    if not close(full[1:, :4], alone):
        if any(x.severity == "bug" for x in ctx.report.findings):
            comp.status, comp.detail = "skipped", "its padding test means nothing while the bugs above are there"
            return comp
        ctx.add("mask-inverted" if mask_role is None else "unknown-difference", f, where(f),
                "the real tokens' outputs change when padding is added: the padding is not masked "
                "(is the mask built the wrong way round?) " + departure(full[1:, :4], alone))
        comp.status, comp.ids = "differs", [ctx.report.findings[-1].id]
    return comp


CHECKS = {"scaled_dot_product": check_scaled_dot_product, "attention": check_attention,
          "feed_forward": check_feed_forward, "layer_norm": check_layer_norm,
          "positional_encoding": check_positional_encoding, "encoder_layer": check_encoder_layer,
          "decoder_layer": check_decoder_layer, "causal_mask": check_causal_mask, "encoder": check_encoder}


def mask_form(module, source: str, found: list[Found], helpers: dict, convention: str | None) -> M.MaskForm:
    if convention:
        return M.flag(convention)
    for fn in helpers.get("pad_mask", []):
        form = M.from_function(fn)
        if form is not None:
            return form
    form = M.from_text(source)
    if form is not None:
        return form
    for f in found:
        if f.kind in ("attention", "scaled_dot_product"):
            try:
                form = M.from_style(inspect.getsource(f.obj))
            except (OSError, TypeError):
                form = None
            if form is not None:
                return form
    return M.MaskForm()


def _their_line(exc: BaseException, module) -> str:
    """The learner's last line on the way to an exception: ` (at file.py:12: code)`, or ''."""
    import os
    import traceback

    mine = os.path.abspath(getattr(module, "__file__", "") or "")
    frames = [fr for fr in traceback.extract_tb(exc.__traceback__) if os.path.abspath(fr.filename) == mine]
    if not frames:
        return ""
    fr = frames[-1]
    return f" (at {os.path.basename(mine)}:{fr.lineno}: {(fr.line or '').strip()})"
