"""The attention components, each checked against the reference on the same weights and inputs:
scaled dot-product attention and multi-head attention (rotary tables, causality, dropout left on in
evaluation). The position-wise ones (feed-forward, norms, positional encoding) are in
`position_wise.py`; the layers that wire them in `checks.py`.
"""
from __future__ import annotations

import inspect
import re

import torch
from torch import nn

from . import reference as R
from .compare import (AttnCaller, Ctx, _detached, close, grads_equal, has_lazy, key_keep,
                      map_attention, randomize, search, settle, where)
from .discover import CannotCheck, Found, kind_of_class
from .report import Component




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
    return settle(ctx, f, L, ref, space, [{"fill": -1e9}, {"fill": float("-inf")}, {"fill": "add"}],
                   lambda: caller(q, k, v, keep)[2], lambda: R.scaled_dot_product(q, k, v, kb)[0][2], "")


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
    if not close(caller(xq, xk, xv, keep)[:2], L[0]):
        # in eval(), twice the same input, two outputs: something keeps dropping (a property, not a guess)
        ctx.add("attention-dropout-in-eval", f, where(f), "in eval(), the same input gave two different outputs: "
                "F.dropout(..., training=self.training)?")
        return Component(f.kind, f.name, "differs", ["attention-dropout-in-eval"], words)
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
        joined = "←" in words and ("rows blocks" in words or "per-head" in words or "stored in×out" in words
                                   or "block-diagonal" in words)
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
    comp = settle(ctx, f, L, ref, space, choices, masked_row,
                   lambda: R.multi_head(xq, xk, xv, w, h, kb, h_kv=h_kv)[2], words, grads)
    if own_mask and comp.status == "ok" and must_be_causal(ctx, f) \
            and search(L, ref, {}, [c for c in choices if c["causal"]]) is None:
        # a decoder-only model's attention that sees the future: the causal mask is missing
        ctx.add("no-causal-mask", f, where(f), "position i attends to positions after i")
        comp.status, comp.ids = "differs", ["no-causal-mask"]
    if comp.status == "ok" and dropout_in_eval(ctx, f, mod, lambda m: caller.__class__(m, ctx.form, "attention"),
                                               (xq, xk, xv, keep), caller):
        comp.status, comp.ids = "differs", ["attention-dropout-in-eval"]
    return comp


def must_be_causal(ctx: Ctx, f: Found) -> bool:
    """Is this attention wrong to read the future? Decided by its use where the learner's program ran: a class
    that is causal in any of its uses (a decoder's, while the encoder shares it) is not; one that reads the
    future in every use is, when their model is a decoder whose logits at t move with a later token (a
    property violated on their own inputs) and the file means it to be causal. Without a run: the words."""
    run = getattr(ctx, "run", None)
    used = run.causal_in_use(f.obj) if run else None
    if used is True:
        return False
    if used is False:
        return run.top_reads_future() is True and decoder_only(ctx, f)
    return decoder_only(ctx, f)


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
    is_dict = isinstance(cfg, dict)
    if cfg is not None:
        for n in list(cfg if is_dict else getattr(cfg, "__dict__", {})):
            v = cfg[n] if is_dict else getattr(cfg, n)
            if isinstance(n, str) and "drop" in n.lower() and isinstance(v, float):
                saved[n] = v
                if is_dict:
                    cfg[n] = 0.5
                else:
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
            if is_dict:
                cfg[n] = v
            else:
                setattr(cfg, n, v)
        for n, v in consts.items():
            setattr(ctx.module, n, v)
    if not close(a, dry) or not close(a, b):
        ctx.add("attention-dropout-in-eval", f, where(f), "built with dropout 0.5 and put in eval(), its output "
                "still changes from call to call: F.dropout(..., training=self.training)?")
        return True
    return False
