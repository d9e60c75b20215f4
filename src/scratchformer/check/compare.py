"""What every comparison of `checks.py`, `attention.py` and `position_wise.py` shares: closeness at TOL and where two
outputs part, the search over the reference's bug switches, weights put into a learner's module and
read into the reference, and the context of one checked file (`Ctx`: sizes, random inputs, the
mask form, the findings so far).
"""
from __future__ import annotations

import inspect
import itertools
import math
import re

import torch
from torch import nn

from . import masks as M
from .discover import CannotCheck, Found, build, call, call_plan, first_tensor
from .sizes import Sizes
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
    "q": r"(w_?)?q(_?(proj|linear|lin|layer|w))?|query|queries|to_?q|to_?(query|queries)|linear_?q|lin_?q|fc_?q|q_?fc|wq|query_proj|查询",
    "k": r"(w_?)?k(_?(proj|linear|lin|layer|w))?|key|keys|to_?k|to_?(key|keys)|linear_?k|lin_?k|fc_?k|k_?fc|wk|key_proj|键",
    "v": r"(w_?)?v(_?(proj|linear|lin|layer|w))?|value|values|to_?v|to_?(value|values)|linear_?v|lin_?v|fc_?v|v_?fc|wv|value_proj|值",
    "o": r"(w_?)?o(_?(proj|linear|lin|layer))?|out(_?(proj|linear|put|layer))?|dense|fc|fc_?o(ut)?|proj|linear_?o(ut)?|to_out|combine\w*|wo|c_proj|o_w|输出",
}


def _role(path: str) -> str | None:
    last = path.rsplit(".", 1)[-1].lower()
    for role, pat in _HINTS.items():
        if re.fullmatch(pat, last):
            return role
    return None


def _applied_as_x_at_w(m: nn.Module, w: torch.Tensor, b) -> bool | None:
    """Behaviour decides how a 2-D weight is stored: True when the module computes x @ W + b (GPT-2's
    Conv1D: W stored (in, out)), False when F.linear(x, W, b) (stored (out, in)), None when neither."""
    g = torch.Generator().manual_seed(5)
    for rows, as_x_at_w in ((w.shape[0], True), (w.shape[1], False)):
        x = torch.randn(2, 3, rows, generator=g, dtype=w.dtype)
        try:
            with torch.no_grad():
                y = m(x)
        except Exception:
            continue
        want = x @ w + (b if b is not None else 0) if as_x_at_w else torch.nn.functional.linear(x, w, b)
        if not isinstance(y, torch.Tensor) or y.shape != want.shape:
            continue
        F_ = torch.nn.functional  # a dense layer that applies its activation itself (Keras' Dense(activation=...))
        for act in (lambda t: t, F_.relu, F_.gelu, lambda t: F_.gelu(t, approximate="tanh"), F_.silu):
            if torch.allclose(y, act(want), rtol=1e-6, atol=1e-8):
                return as_x_at_w
    return None


def linear_params(mod: nn.Module):
    """The module's parameters with every 2-D weight as (out, in), as nn.Linear stores it: a leaf module of
    the learner's that computes x @ W + b (GPT-2's Conv1D) gives its weight transposed (a view of theirs,
    found by what the module does, not by its name). Returns (named parameters, the names transposed)."""
    params = list(mod.named_parameters())
    flipped = set()
    for mname, m in mod.named_modules():
        if isinstance(m, (nn.Linear, nn.Embedding, nn.LayerNorm)) or any(True for _ in m.children()):
            continue
        own = list(m.named_parameters(recurse=False))
        mats = [(n, p) for n, p in own if p.dim() == 2]
        vecs = [(n, p) for n, p in own if p.dim() == 1]
        if len(mats) != 1 or len(vecs) > 1:  # a dense layer of theirs: one matrix (weight, kernel, W), one bias
            continue
        (wn, w), b = mats[0], (vecs[0][1] if vecs else None)
        if b is not None and b.shape[0] not in (w.shape[0], w.shape[1]):
            continue
        if _applied_as_x_at_w(m, w, b):
            flipped.add(f"{mname}.{wn}" if mname else wn)
    if flipped:
        params = [(n, p.t() if n in flipped else p) for n, p in params]
    return params, flipped


def map_attention(mod: nn.Module, d: int, h: int | None = None):
    """({"q"|"k"|"v"|"o": (weight, bias | None)}, the mapping in words, the weights, h_kv) from the
    learner's parameters: one fused W_QKV (3d×d), per-head query/key/value Linears (the GPT video's
    `Head`), four d×d maps, or W_K, W_V with fewer rows (grouped-query attention, h_kv K/V heads)."""
    w, words, mats, h_kv = _map_attention(mod, d, h)
    return w, words, mats, h_kv


def _map_attention(mod: nn.Module, d: int, h: int | None = None):
    params, flipped = linear_params(mod)
    if flipped:  # stored (in, out) and applied as x @ W: compared through the inputs' gradients only
        w, words, mats, h_kv = _map_linear_layout(mod, params, d, h)
        return w, words + f" (stored in×out: {', '.join(sorted(flipped))}, applied as x @ W)", mats, h_kv
    return _map_linear_layout(mod, params, d, h)


def _map_linear_layout(mod, params, d: int, h: int | None):
    mats = [(n, p) for n, p in params if p.dim() == 2]
    sq = [(n, p) for n, p in mats if tuple(p.shape) == (d, d)]
    fused = [(n, p) for n, p in mats if tuple(p.shape) == (3 * d, d)]
    biases = {n.rsplit(".", 1)[0]: p for n, p in params if p.dim() == 1 and n.endswith("bias")}
    kv = [(n, p) for n, p in mats if p.shape[1] == d and p.shape[0] % 2 == 0 and p.shape[0] != d
          and (h is None or (p.shape[0] // 2) % (d // h) == 0) and p.shape[0] // 2 <= d]
    if len(sq) == 2 and len(kv) == 1 and len(mats) == 3:
        # W_Q alone, W_K|W_V fused (to_q, to_kv: the row halves are K then V), W_O: roles of the two d×d by names
        by = {_role(n.rsplit(".", 1)[0]): (n, p) for n, p in sq}
        if {"q", "o"} <= set(by):
            (kn, kw_), kb = kv[0], biases.get(kv[0][0].rsplit(".", 1)[0])
            ks, vs = kw_.chunk(2, 0)
            kbs = kb.chunk(2, 0) if kb is not None else (None, None)
            w = {"q": (by["q"][1], biases.get(by["q"][0].rsplit(".", 1)[0])), "k": (ks, kbs[0]), "v": (vs, kbs[1]),
                 "o": (by["o"][1], biases.get(by["o"][0].rsplit(".", 1)[0]))}
            r = ks.shape[0]
            h_kv = r // (d // h) if h and r < d else None  # fewer K/V heads: multi-query or grouped-query
            return w, f"W_Q←{by['q'][0]}, W_K,W_V←{kn} (2 rows blocks" + (f"; {h_kv} K/V heads" if h_kv else "") + \
                f"), W_O←{by['o'][0]}", [p for _, p in mats], h_kv
    if h and d % h == 0 and len(sq) == 1:
        dk = d // h
        small = [(n, p) for n, p in mats if tuple(p.shape) == (dk, dk)]
        roles = {_role(n.rsplit(".", 1)[0]): (n, p) for n, p in small}
        if len(small) == 3 and set(roles) == {"q", "k", "v"} and dk != d:
            # one d_k×d_k map shared by every head (applied to each head's slice): W = diag(W_h, ..., W_h)
            w = {}
            for r in "qkv":
                n, p = roles[r]
                bias = biases.get(n.rsplit(".", 1)[0])
                w[r] = (torch.block_diag(*[p] * h), None if bias is None else bias.repeat(h))
            on, ow = sq[0]
            w["o"] = (ow, biases.get(on.rsplit(".", 1)[0]))
            words = ", ".join(f"W_{r.upper()}←{roles[r][0]}" for r in "qkv") + \
                f" (one map shared by every head: block-diagonal), W_O←{on}"
            return w, words, [p for _, p in small] + [ow], None
    if len(sq) == 1 and len(fused) == 1:
        (fn, fw), (on, ow) = fused[0], sq[0]
        fb = biases.get(fn.rsplit(".", 1)[0])
        ws = fw.chunk(3, 0)
        bs = fb.chunk(3, 0) if fb is not None else (None,) * 3
        w = {"q": (ws[0], bs[0]), "k": (ws[1], bs[1]), "v": (ws[2], bs[2]), "o": (ow, biases.get(on.rsplit(".", 1)[0]))}
        return w, f"W_Q,W_K,W_V←{fn} (3 rows blocks), W_O←{on}", [fw, ow], None
    if len(sq) == 1 and len(mats) == 2 and h is not None:
        (fn, fw) = next((n, p) for n, p in mats if p is not sq[0][1])
        r = (fw.shape[0] - d) // 2
        if fw.shape[1] == d and fw.shape[0] > d and (fw.shape[0] - d) % 2 == 0 and r % (d // h) == 0 and r < d:
            # one fused W_QKV for grouped-query attention: rows d (Q), then h_kv·d_k (K), h_kv·d_k (V)
            fb = biases.get(fn.rsplit(".", 1)[0])
            ws = fw.split([d, r, r], 0)
            bs = fb.split([d, r, r], 0) if fb is not None else (None,) * 3
            on, ow = sq[0]
            w = {"q": (ws[0], bs[0]), "k": (ws[1], bs[1]), "v": (ws[2], bs[2]), "o": (ow, biases.get(on.rsplit(".", 1)[0]))}
            return w, f"W_Q,W_K,W_V←{fn} (rows {d}, {r}, {r}: 3 rows blocks), W_O←{on}", [fw, ow], r // (d // h)
    narrow = [(n, p) for n, p in mats if p.shape[1] == d and p.shape[0] < d and d % p.shape[0] == 0]
    if len(sq) == 1 and narrow and h is not None:
        # per-head modules: heads.0.query (d_k, d), heads.0.key, ...: concatenated head by head
        per = {r: [] for r in "qkv"}
        for n, p in narrow:
            r = _role(n.rsplit(".", 1)[0])
            if r in per:
                per[r].append((n, p))
        rows = {r: sum(p.shape[0] for _, p in ps) for r, ps in per.items()}
        if all(rows[r] == d for r in "qkv") and len(per["q"]) > 1:
            w = {}
            for r in "qkv":
                bs = [biases.get(n.rsplit(".", 1)[0]) for n, _ in per[r]]
                w[r] = (torch.cat([p for _, p in per[r]], 0),
                        None if any(b is None for b in bs) else torch.cat(bs, 0))
            on, ow = sq[0]
            w["o"] = (ow, biases.get(on.rsplit(".", 1)[0]))
            words = (f"W_Q←{len(per['q'])} heads' {per['q'][0][0].split('.')[-2]}, W_K←…{per['k'][0][0].split('.')[-2]}, "
                     f"W_V←…{per['v'][0][0].split('.')[-2]} (per-head modules, concatenated), W_O←{on}")
            return w, words, [p for _, p in narrow] + [ow], None
    if len(sq) == 2 and len(narrow) == 2 and h is not None and narrow[0][1].shape == narrow[1][1].shape:
        # grouped-query attention: W_Q and W_O are d×d, W_K and W_V (h_kv·d_k)×d
        by = {_role(n.rsplit(".", 1)[0]): (n, p) for n, p in sq + narrow}
        if set(by) == {"q", "k", "v", "o"} and tuple(by["q"][1].shape) == (d, d):
            w = {r: (p, biases.get(n.rsplit(".", 1)[0])) for r, (n, p) in by.items()}
            h_kv = narrow[0][1].shape[0] // (d // h)
            words = ", ".join(f"W_{r.upper()}←{by[r][0]}" for r in "qkvo") + f" (by names; {h_kv} K/V heads)"
            return w, words, [p for _, p in sq + narrow], h_kv
    if len(sq) == 3 and len(mats) == 3 and {_role(n.rsplit(".", 1)[0]) for n, _ in sq} == {"q", "k", "v"}:
        # HF BERT's self-attention: Q, K, V here, W_O in the next module (BertSelfOutput): W_O = I
        by = {_role(n.rsplit(".", 1)[0]): (n, p) for n, p in sq}
        w = {r: (p, biases.get(n.rsplit(".", 1)[0])) for r, (n, p) in by.items()}
        w["o"] = (torch.eye(d, dtype=sq[0][1].dtype), None)
        words = ", ".join(f"W_{r.upper()}←{by[r][0]}" for r in "qkv") + " (by names), no W_O here (identity)"
        return w, words, [p for _, p in sq], None
    if not sq and len(mats) == 4 and h is not None:
        # heads of their own width (r = h·d_head ≠ d, e.g. every head as wide as d_model): W_Q, W_K, W_V
        # (r, d) and W_O (d, r), found by names, else in registration order
        r = mats[0][1].shape[0] if mats[0][1].shape[1] == d else mats[0][1].shape[1]
        ins = [(n, p) for n, p in mats if tuple(p.shape) == (r, d)]
        outs = [(n, p) for n, p in mats if tuple(p.shape) == (d, r)]
        if r % h == 0 and len(ins) == 3 and len(outs) == 1:
            paths = [n.rsplit(".", 1)[0] for n, _ in ins]
            roles = [_role(pa) for pa in paths]
            order = roles if sorted(x or "" for x in roles) == ["k", "q", "v"] else ["q", "k", "v"]
            w = {ro: (p, biases.get(pa)) for ro, (n, p), pa in zip(order, ins, paths)}
            w["o"] = (outs[0][1], biases.get(outs[0][0].rsplit(".", 1)[0]))
            words = ", ".join(f"W_{ro.upper()}←{n}" for ro, (n, _) in zip(order, ins)) + f", W_O←{outs[0][0]}"
            how = "names" if order is roles else "registration order"
            return w, f"{words} (by {how}; {h} heads of width {r // h})", [p for _, p in mats], None
    if len(sq) != 4:
        raise CannotCheck(f"expected 4 linear maps of {d}×{d} (W_Q, W_K, W_V, W_O), a fused {3 * d}×{d} W_QKV, "
                          f"or per-head maps; found " + ", ".join(f"{n} {tuple(p.shape)}" for n, p in params[:8]))
    paths = [n.rsplit(".", 1)[0] if "." in n else n for n, _ in sq]
    roles = [_role(p) for p in paths]
    order = roles if sorted(r or "" for r in roles) == ["k", "o", "q", "v"] else ["q", "k", "v", "o"]
    w = {r: (p, biases.get(path)) for r, (n, p), path in zip(order, sq, paths)}
    how = "names" if order is roles else "registration order"
    words = ", ".join(f"W_{r.upper()}←{n}" for r, (n, _) in zip(order, sq))
    return w, f"{words} (by {how})", [p for _, p in sq], None


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


def _torch_like(fn) -> bool:
    """A learner's attention written to nn.MultiheadAttention's API: forward(query, key, value,
    attn_mask, key_padding_mask), sequence first unless it says batch_first, True = hidden."""
    if not isinstance(fn, nn.Module):
        return False
    try:
        names = list(inspect.signature(fn.forward).parameters)
    except (TypeError, ValueError):
        return False
    return "key_padding_mask" in names and "attn_mask" in names


class AttnCaller:
    """Calls an attention module (or function) by its own parameter names, with a mask in the learner's form."""

    def __init__(self, fn, form: M.MaskForm, kind: str = "attention"):
        self.torch_mha = isinstance(fn, nn.MultiheadAttention) or _torch_like(fn)
        self.extra = None
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
        self.extra = None  # T -> {role: value}: rotary tables, start_pos (set by the attention check)
        self.mask_required = any(req for _, r, req in self.plan if r == self.mask_role)
        self.form = M.MaskForm("lens", torch.long, None, form.source, form.source_zh) \
            if self.mask_role == "lens" and form.kind != "lens" else form
        if self.mask_role == "mask" and form.kind != "add":
            try:  # its own code adds the mask to the scores (HF's extended mask): that is what it takes
                own = M.from_style(inspect.getsource(type(fn) if isinstance(fn, nn.Module) else fn))
            except (OSError, TypeError):
                own = None
            if own is not None and own.kind == "add":
                self.form = own
        self.ndim = form.ndim
        if self.mask_role == "mask" and isinstance(fn, nn.Module):
            from . import discover
            theirs = discover.RUN.mask_form(type(fn))  # the mask their own model passed to this class
            if theirs is not None:
                self.form, self.ndim = theirs, theirs.ndim

    def __call__(self, q, k, v, keep=None, square=False, out_shape=None):
        if self.torch_mha:
            return self._torch(q, k, v, keep, square)
        vals = {"q": q, "k": k, "v": v, "x": q}
        if self.extra is not None:
            vals.update(self.extra(q.shape[-2]))
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
            if getattr(self, "square_additive", False):  # their code adds it to the scores: 0 / −∞
                am = torch.zeros(am.shape, dtype=q.dtype).masked_fill(am, float("-inf"))
        elif keep is not None:
            kpm = ~keep  # (B, S), True = padding
        first = not getattr(self.fn, "batch_first", False) and not self._batch_first_in_run()
        if first:
            q, k, v = (t.transpose(0, 1) for t in (q, k, v))  # (T, B, d)
        if isinstance(self.fn, nn.MultiheadAttention):
            out = self.fn(q, k, v, key_padding_mask=kpm, attn_mask=am, need_weights=False)[0]
        else:  # the learner's own, written to torch's API
            out = first_tensor(self.fn(q, k, v, key_padding_mask=kpm, attn_mask=am), ndim=3)
        return out.transpose(0, 1) if first else out

    def _batch_first_in_run(self) -> bool:
        """Their own program called it batch first: the key padding mask it passed is (B, S) with B the query's
        first dimension (not its second)."""
        from . import discover
        args = discover.RUN.call_args(type(self.fn)) if isinstance(self.fn, nn.Module) else {}
        q = next((v for n, v in args.items() if isinstance(v, torch.Tensor) and v.dim() == 3), None)
        kpm = next((v for n, v in args.items() if "key_padding" in n and isinstance(v, torch.Tensor)), None)
        if q is not None and kpm is not None and kpm.dim() == 2 and q.shape[0] != q.shape[1]:
            return kpm.shape[0] == q.shape[0]
        try:  # B == T in their run: their own unpacking says which comes first (`B, T, D = query.shape`)
            src = inspect.getsource(type(self.fn).forward)
        except (OSError, TypeError):
            return False
        return bool(re.search(r"^\s*(b|bs|batch\w*|n)\s*,\s*\w+\s*(,\s*\w+\s*)?=\s*(query|q|x)\.(shape|size\(\))",
                              src, re.I | re.M))

    def settle(self, q, k, v, keep):
        """Find the mask rank and type the learner's code accepts ((B,1,1,S), (B,1,S), (B,S); their
        int / bool / additive float), trying theirs first."""
        if self.torch_mha:
            return
        if self.mask_role is None or self.form.kind == "lens":
            self(q, k, v, keep)
            return
        errors = []
        forms = [self.form]
        if self.form.kind in ("keep", "pad"):
            forms += [M.MaskForm(self.form.kind, torch.bool, self.form.ndim, self.form.source, self.form.source_zh),
                      M.MaskForm("add", torch.float64, self.form.ndim, "an additive float mask (the one your code takes)",
                                 "加性浮点掩码（你的代码接受的）")]
        first = self.form
        for form in forms:
            self.form = form
            for nd in dict.fromkeys([first.ndim, 4, 3, 2]):
                if nd is None:
                    continue
                self.ndim = nd
                try:
                    self(q, k, v, keep)
                    return
                except NotImplementedError:
                    raise  # a skeleton's TODO, whatever the mask
                except Exception as e:  # the learner's code: any error means "not this rank / type"
                    errors.append(f"{type(e).__name__}: {e}")
        self.form = first
        raise CannotCheck(f"no mask shape worked ({errors[0] if errors else '?'})")


def settle(ctx, f, L, ref, space, choices, masked_row, uniform_row, detail, grad_check=None):
    """A component's verdict: search the variants (`search`); add the findings; check the fully masked row and (if it matches) the gradients."""
    hit = search(L, ref, space, choices)
    comp = Component(f.kind, f.name, "ok", [], detail)
    if hit is None:
        first = ref({}, **choices[0])
        bad = next((i for i, (a, b) in enumerate(zip(L, first)) if not close(a, b)), 0)
        ctx.add("unknown-difference", f, where(f), departure(L[bad], first[bad]))
        comp.status, comp.ids = "differs", ["unknown-difference"]
        return comp
    bugs, choice = hit
    if set(bugs) == {"mask-inverted", "mask-fill-zero"}:
        # a 0 fill is certain; which way the mask points rests on our reading of the convention: one bug
        bugs = {"mask-fill-zero": "zero (with the mask read the other way round)"}
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
