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
from .discover import CannotCheck, Found, first_tensor, kind_of_class
from .report import Component


# --- the components -------------------------------------------------------------------------------

def check_scaled_dot_product(ctx: Ctx, f: Found) -> Component:
    obj = ctx.build(f) if inspect.isclass(f.obj) else f.obj
    caller = AttnCaller(obj, ctx.form, "attention")
    B, Tq, Tk = 3, 5, 7
    h, dk = ctx.sizes.heads, ctx.sizes.d_k  # the learner's (a module-level d_k may scale their scores)
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
    space["wrong-scale"] = ["d_k", "times √d_k", "√(keys' length)", "d_k^(1/4)"]
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


_ROPE_FN = re.compile(r"freq|rope|rotary|cis|sin_?cos|cos_?sin", re.I)


def rope_tables(ctx: Ctx, d_k: int):
    """(T -> {role: the learner's own rotary table for T positions}, where it came from), or (None, "")
    when their attention takes no table. Their function (`precompute_freqs_cis(dim, end)`, a cos/sin
    builder) is called with (d_k, T); without one, the standard tables are given and a mismatch is
    "cannot check", never a finding."""
    fns = [(n, o) for n, o in vars(ctx.module).items() if inspect.isfunction(o)
           and getattr(o, "__module__", None) == ctx.module.__name__ and _ROPE_FN.search(n)
           and not re.search(r"apply|rotate|reshape|broadcast", n, re.I)]

    def ours(T):
        inv = 1.0 / 10000 ** (torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)
        ang = torch.arange(T, dtype=torch.float64)[:, None] * inv  # (T, d_k/2)
        cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
        return {"freqs": (cos, sin) if pair else torch.polar(torch.ones_like(ang), ang), "cos": cos, "sin": sin}

    try:
        pair = bool(re.search(r"cos\s*,\s*sin\s*=", inspect.getsource(ctx.module)))
    except (OSError, TypeError):
        pair = False

    classes = [(n, o) for n, o in vars(ctx.module).items() if inspect.isclass(o) and issubclass(o, nn.Module)
               and getattr(o, "__module__", None) == ctx.module.__name__ and re.search(r"rotary|rope", n, re.I)]
    for name, cls in classes:  # HF style: RotaryEmbedding(dim, max_position_embeddings).forward(x, position_ids)
        try:
            rot = cls(d_k)
        except Exception:
            continue

        def theirs(T, rot=rot):
            x = torch.zeros(1, T, d_k, dtype=torch.float64)
            try:
                out = rot(x, torch.arange(T)[None])
            except TypeError:
                out = rot(x)
            if isinstance(out, (tuple, list)) and len(out) == 2:
                return {"freqs": tuple(t.double() for t in out), "cos": out[0].double(), "sin": out[1].double()}
            return {"freqs": out}
        try:
            theirs(5)
        except Exception:
            continue
        return theirs, f"your {name}({d_k})"
    for name, fn in fns:
        def theirs(T, fn=fn):
            out = fn(d_k, T)
            if isinstance(out, (tuple, list)) and len(out) == 2:
                return {"freqs": tuple(out), "cos": out[0], "sin": out[1]}
            return {"freqs": out}
        try:
            theirs(5)
        except Exception:
            continue
        return theirs, f"your {name}({d_k}, T)"
    return ours, "the standard table (your file has no function that builds it)"


def rope_theta(ctx: Ctx) -> float:
    """The rotary base θ the learner's code uses: a config field (`rope_theta`, `rope_base`), a module
    constant, or the default of their table function's `theta` / `base` parameter; else 10000."""
    for obj in (ctx.sizes.config, ctx.module):
        for n in ("rope_theta", "rope_base", "theta", "rotary_base", "base"):
            v = getattr(obj, n, None)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 1:
                return float(v)
    for n, o in vars(ctx.module).items():
        if inspect.isfunction(o) and _ROPE_FN.search(n):
            for p in inspect.signature(o).parameters.values():
                if re.search(r"theta|base", p.name) and isinstance(p.default, (int, float)) and p.default > 1:
                    return float(p.default)
    return 10000.0


def _whole_attention(ctx: Ctx, f: Found, mod: nn.Module):
    """HF BERT splits attention in two: Q, K, V in one class (no W_O), W_O with its residual and norm in
    the next. Where the found class has no output map and another attention class of the file builds it,
    that whole (BertAttention) is what is checked, W_O and `norm(x + ...)` included."""
    d = ctx.sizes.d_model
    if has_lazy(mod) or not inspect.isclass(f.obj):  # d2l's LazyLinear: no shapes yet, and never split so
        return None
    mats = [p for p in mod.parameters() if p.dim() == 2]
    if len(mats) != 3 or any(tuple(p.shape) != (d, d) for p in mats):
        return None
    for name, cls in vars(ctx.module).items():
        if not (inspect.isclass(cls) and issubclass(cls, nn.Module) and cls is not f.obj
                and getattr(cls, "__module__", None) == ctx.module.__name__ and kind_of_class(name) == "attention"):
            continue
        try:
            src = inspect.getsource(cls.__init__)
        except (OSError, TypeError):
            continue
        if re.search(rf"\b{re.escape(f.name)}\(", src):
            return Found("attention", name, cls, f.how)
    return None


def check_attention(ctx: Ctx, f: Found) -> Component:
    mod = ctx.build(f)
    whole = _whole_attention(ctx, f, mod)
    if whole is not None:
        try:
            mod, f = ctx.build(whole), whole
        except CannotCheck:
            pass
    caller = AttnCaller(mod, ctx.form, "attention")
    d, h = ctx.sizes.d_model, ctx.sizes.heads
    roles = {r for _, r, _ in caller.plan}
    rotary = bool(roles & {"freqs", "cos", "sin"})
    table_from = ""
    if rotary:
        caller.extra, table_from = rope_tables(ctx, d // h)
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
    try:
        caller.settle(xq, xk, xv, keep)
    except Exception as e:
        if table_from.startswith("the standard"):
            raise CannotCheck(f"its rotary positions need the table your model builds ({type(e).__name__}: {e}); "
                              "put the table's code in a function precompute_freqs_cis(dim, end)") from None
        raise
    w, words, _, h_kv = map_attention(mod, d, h)
    if not rotary and re.search(r"rotary|rope|rotate_half|freqs|view_as_complex", _source(f)):
        rotary, table_from = True, "inside your attention"
    x1 = ctx.randn(1, 3, d)
    L = [caller(xq, xk, xv, keep)[:2], caller(x1, x1, x1)]
    # torch's API takes a square `attn_mask` beside the key padding mask: probe it too (causal, True = blocked)
    square = caller.torch_mha and not caller.self_only
    if square:
        # bool (torch's own, True = blocked) or additive float (0 / −∞): the form their code reads is the one
        # that gives the bug-free numbers; neither: probed as bool, so a mistake in it is named
        cz = R.causal_keep(Tq)[None]
        want = [R.multi_head(xq, xq, xq, w, h, cz, fill=fl, h_kv=h_kv) for fl in (-1e9, float("-inf"))]
        outs = {}
        for additive in (False, True):
            caller.square_additive = additive
            try:
                outs[additive] = caller(xq, xq, xq, cz, square=True)
            except Exception:
                continue
        pick = next((a for a, o in outs.items() if any(close(o, wv) for wv in want)), False if False in outs else None)
        if pick is None:
            square = False
        else:
            caller.square_additive = pick
            L.append(outs[pick])
    kb = keep[:, None, None, :] if caller.mask_role is not None else torch.ones(B, 1, 1, Tk, dtype=torch.bool)
    causal_choices = [False, True] if caller.self_only else [False]
    pairings = ["interleaved", "half"] if rotary else [None]

    own_mask = caller.self_only and not caller.mask_required  # a causal triangle of its own, if any

    def triangle(T, bugs):
        """The causal keep (1, 1, T, T), as written or with the mask bug `bugs` names."""
        ones = torch.ones(T, T, dtype=torch.bool)
        sub = bugs.get("no-causal-mask") if own_mask else None
        if own_mask and bugs.get("mask-inverted") == "causal inverted":
            return ones.triu(1)[None, None]
        if own_mask and bugs.get("mask-inverted") == "causal inverted, diagonal kept":  # tril ↔ triu swapped
            return ones.triu()[None, None]
        return (ones.tril(-1) if sub == "diagonal hidden" else ones.tril(1) if sub == "one ahead visible"
                else ones.tril())[None, None]

    theta = rope_theta(ctx) if rotary else 10000.0

    # the residual and its norm inside the module, one LayerNorm of width d in it: Post-LN
    # `norm(x + attention(x))` (wrap True, the nlp-tutorial's) or Pre-LN `x + attention(norm(x))` ("pre")
    inner = [m for m in mod.modules() if isinstance(m, nn.LayerNorm) and tuple(m.normalized_shape) == (d,)]

    def normed(t, wrap):
        return inner[0](t) if wrap == "pre" else t

    def wrapped(q, y, bugs, wrap=True):
        if wrap == "pre":
            return y if "no-residual" in bugs else inner[0](q) + y if "post-ln-residual" in bugs else q + y
        if "no-residual" in bugs:
            return inner[0](y)
        if "post-ln-residual" in bugs:
            return inner[0](q) + y
        return inner[0](q + y)

    def ref(bugs, fill=-1e9, w=w, causal=False, rope=None, wrap=False):
        if own_mask and ("no-causal-mask" in bugs or str(bugs.get("mask-inverted")).startswith("causal inverted")) \
                and not causal:
            raise ValueError("a triangle bug needs the triangle")
        if not wrap and ({"no-residual", "post-ln-residual"} & set(bugs)):
            raise ValueError("a residual bug needs the residual inside")
        c5 = triangle(Tq, bugs) if causal else True
        c3 = triangle(3, bugs) if causal else None
        outer = {b: v for b, v in bugs.items() if b in ("no-residual", "post-ln-residual")}
        bugs_all = bugs
        bugs = {b: v for b, v in bugs.items() if not (own_mask and (b == "no-causal-mask" or str(v).startswith("causal inverted")))
                and b not in outer and not str(v).startswith("attn_mask ")}
        n1 = normed(x1, wrap)
        out = [R.multi_head(normed(xq, wrap), normed(xk, wrap), normed(xv, wrap), w, h, kb & c5, bugs, fill=fill,
                            rope_pairing=rope, h_kv=h_kv, rope_theta=theta)[:2],
               R.multi_head(n1, n1, n1, w, h, c3, bugs, fill=fill, rope_pairing=rope, h_kv=h_kv, rope_theta=theta)]
        if square:  # the square mask's own mistakes apply to it alone
            sq_bugs = {b: v for b, v in bugs.items() if b not in ("mask-inverted", "mask-fill-zero")}
            sq_bugs.update({b: v[len("attn_mask "):] for b, v in bugs_all.items() if str(v).startswith("attn_mask ")})
            nq = normed(xq, wrap)
            out.append(R.multi_head(nq, nq, nq, w, h, R.causal_keep(Tq)[None], sq_bugs, fill=fill, h_kv=h_kv))
        if not wrap:
            return out
        return [wrapped(q, y, outer, wrap) for q, y in zip((xq[:2], x1, xq), out)]

    def grads(bugs, choice):
        """d(loss)/d(weights) and d(loss)/d(inputs), on the rows with something to attend to (a NaN
        row would spoil every gradient). A fused or per-head W_QKV is compared through the inputs only."""
        G = ctx.randn(2, Tq, d)
        wr = _detached(w)
        joined = "←" in words and ("3 rows blocks" in words or "per-head" in words)
        pairs = [] if joined else [(a, b) for pl, pr in zip(w.values(), wr.values()) for a, b in zip(pl, pr)
                                   if a is not None and a.requires_grad]  # W_O = I (BERT's) is not theirs
        lp, rp = [a for a, _ in pairs], [b for _, b in pairs]
        ins_l = [t[:2].clone().requires_grad_() for t in (xq, xk, xv)]
        ins_r = [t[:2].clone().requires_grad_() for t in (xq, xk, xv)]
        if caller.self_only:
            ins_l[1] = ins_l[2] = ins_l[0]
            ins_r[1] = ins_r[2] = ins_r[0]
        c5 = R.causal_keep(Tq)[None, None] if choice.get("causal") else True
        wrap = choice.get("wrap")
        out_ref = R.multi_head(*[normed(t, wrap) for t in ins_r], wr, h, kb[:2] & c5, bugs, fill=choice["fill"],
                               rope_pairing=choice.get("rope"), h_kv=h_kv, rope_theta=theta)
        if wrap:
            out_ref = wrapped(ins_r[0], out_ref, {}, wrap)
        n = 1 if caller.self_only else 3
        return grads_equal((caller(*ins_l, keep[:2]) * G).sum(), lp + ins_l[:n], (out_ref * G).sum(), rp + ins_r[:n])

    if all(b is None for _, b in w.values()):
        ctx.add("no-bias", f, f"{f.name}.__init__")
    space = dict(R.ATTENTION_VARIANTS)
    if own_mask:
        space["mask-inverted"] = (["inverted"] if caller.mask_role is not None else []) + \
            ["causal inverted", "causal inverted, diagonal kept"]
        space["no-causal-mask"] = ["diagonal hidden", "one ahead visible"]
        space.pop("mask-fill-zero")
        space["mask-fill-zero"] = ["zero"]
    if square:  # the square attn_mask read the other way round, or filled with 0, the padding mask right
        space["mask-inverted"] = space["mask-inverted"] + ["attn_mask inverted"]
        space["mask-fill-zero"] = space["mask-fill-zero"] + ["attn_mask zero"]
    if caller.torch_mha and not getattr(mod, "batch_first", False):  # sequence first: its own head mistakes
        space["heads-not-transposed"] = space["heads-not-transposed"] + [R.SEQ_FIRST_SPLIT]
        space["heads-merge-order"] = space["heads-merge-order"] + R.SEQ_FIRST_MERGE
    if rotary:
        space.update(R.ROPE_VARIANTS)
    if h_kv is not None and h_kv < h:
        space.update(R.GQA_VARIANTS)
    wraps = [False, True, "pre"] if len(inner) == 1 else [False]
    if len(inner) == 1:
        space["no-residual"] = ["none"]
        space["post-ln-residual"] = ["norm(x) + attention"]
    choices = [{"fill": fl, "causal": c, "rope": r, "wrap": wr} for wr in wraps for c in causal_choices
               for r in pairings for fl in (-1e9, float("-inf"), "add")]
    if table_from:
        words += f"; rotary positions from {table_from}" + (f", θ = {theta:g}" if theta != 10000.0 else "")
    if any(c for c in causal_choices):
        words += "; causal"
    if table_from.startswith("the standard") and search(L, ref, {}, choices) is None:
        raise CannotCheck("its rotary positions need the table your model builds; put the table's code in a "
                          "function precompute_freqs_cis(dim, end) (or a cos/sin builder) so the check can call it")
    masked_row = (lambda: caller(xq, xk, xv, keep)[2]) if caller.mask_role is not None and not rotary else None
    comp = _settle(ctx, f, L, ref, space, choices, masked_row,
                   lambda: R.multi_head(xq, xk, xv, w, h, kb, h_kv=h_kv)[2], words, grads)
    if own_mask and comp.status == "ok" and decoder_only(ctx, f) \
            and search(L, ref, {}, [c for c in choices if c["causal"]]) is None:
        # a decoder-only model's attention that sees the future: the causal mask is missing
        ctx.add("no-causal-mask", f, where(f), "position i attends to positions after i")
        comp.status, comp.ids = "differs", ["no-causal-mask"]
    if comp.status == "ok" and dropout_in_eval(ctx, f, mod, lambda m: caller.__class__(m, ctx.form, "attention"),
                                               (xq, xk, xv, keep), caller):
        comp.status, comp.ids = "differs", ["attention-dropout-in-eval"]
    return comp


def decoder_only(ctx: Ctx, f: Found) -> bool:
    """Is this attention a decoder-only model's? Its name says causal / masked, or the file builds a
    causal triangle somewhere (a `tril` buffer, `is_causal=True`, a look-ahead mask): then it must be causal."""
    import inspect as _i
    try:
        src = _i.getsource(ctx.module)
    except (OSError, TypeError):
        src = _source(f)
    return bool(re.search(r"causal|masked|因果", f.name, re.I)) \
        or bool(re.search(r"\btril\b|\btriu\b|is_causal\s*=\s*True|causal|look_?ahead|subsequent", src))


def _source(f: Found) -> str:
    try:
        return inspect.getsource(f.obj)
    except (OSError, TypeError):
        return ""


def dropout_in_eval(ctx: Ctx, f: Found, mod, make_caller, inputs, caller) -> bool:
    """Built with dropout 0.5 and put in eval, the component must give what it gives with dropout 0:
    `F.dropout(w, p)` without `training=self.training` keeps dropping at inference (`attention-dropout-in-eval`)."""
    from .discover import build
    sizes = ctx.sizes
    cfg = sizes.config
    saved = {}
    if cfg is not None:
        for n in list(vars(cfg)):
            if "drop" in n.lower() and isinstance(getattr(cfg, n), float):
                saved[n] = getattr(cfg, n)
                setattr(cfg, n, 0.5)
    consts = {n: v for n, v in sizes.consts.items() if "drop" in n.lower()}
    for n in consts:
        setattr(ctx.module, n, 0.5)
    try:
        torch.manual_seed(0)
        wet = build(f, sizes, ctx.found, dropout=0.5).double().eval()
        wet.load_state_dict(mod.state_dict())
        c2 = make_caller(wet)
        c2.extra, c2.ndim, c2.form = caller.extra, caller.ndim, caller.form
        q, k, v, keep = inputs
        torch.manual_seed(1)
        a = c2(q, k, v, keep)[:2]
        torch.manual_seed(2)
        b = c2(q, k, v, keep)[:2]
        dry = caller(q, k, v, keep)[:2]
    except Exception:
        return False  # the probe could not be built this way: no finding either way
    finally:
        for n, v in saved.items():
            setattr(cfg, n, v)
        for n, v in consts.items():
            setattr(ctx.module, n, v)
    if not close(a, dry) or not close(a, b):
        ctx.add("attention-dropout-in-eval", f, where(f), "built with dropout 0.5 and put in eval(), its output "
                "still changes from call to call: F.dropout(..., training=self.training)?")
        return True
    return False


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
    params = list(mod.named_parameters())
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
    return (w1[0][1], b1, w2[0][1], b2), f"W_1←{w1[0][0]}, W_2←{w2[0][0]} (by shape)"


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
    comp = _settle(ctx, f, L, ref, space, choices, None, None, words,
                   grads if len(inner) != 1 else None)
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
    return _settle(ctx, f, L, ref, R.SWIGLU_VARIANTS, choices, None, None, words)


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

    return _settle(ctx, f, L, ref, R.RMS_NORM_VARIANTS, choices, None, None,
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
