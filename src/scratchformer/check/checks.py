"""The comparisons: each learner component against our reference on the same weights and inputs.

For each component: build it (tiny sizes, dropout 0, eval), put float64 random weights in it, read
those weights into the reference (by shape and registration order, names as hints: the mapping is
reported), run both on the same random inputs (masked, with padded and fully padded rows, batch 1,
odd lengths), then search the reference's bug switches for the variant that equals the learner's
output. That variant's ids are the findings; no variant → `unknown-difference` with the first
position where the outputs part. Layers (encoder / decoder) are checked for their wiring with the
learner's own sublayers, so a bug inside a sublayer is reported once, where it is.

The shared harness is `compare.py`; the components are in `attention.py` (attention)
and `position_wise.py` (FFN, norm, positions); the layers that wire them and the mask form are here; the stacks (encoder, decoder, their final norm) in
`stacks.py`.
"""
from __future__ import annotations

import inspect
import re

import torch
from torch import nn

from . import masks as M
from . import reference as R
from .compare import AttnCaller, Ctx, all_close, departure, has_lazy, key_keep, randomize, where
from .discover import CannotCheck, Found, call, call_plan, first_tensor
from .report import Component


# --- layers: the wiring, with the learner's own sublayers -----------------------------------------

_ATTN_NAME = re.compile(r"attention|attn|mha|注意力", re.I)
_FFN_NAME = re.compile(r"feed|ffn|mlp|positionwise|前馈|swiglu", re.I)


def _is_norm(m: nn.Module) -> bool:
    n = type(m).__name__.lower()
    return isinstance(m, (nn.LayerNorm, getattr(nn, "RMSNorm", nn.LayerNorm))) or (
        ("norm" in n or "归一化" in n) and "add" not in n and "sublayer" not in n
        and any(p.dim() == 1 for p in m.parameters(recurse=False)))


def parts(layer: nn.Module, ctx: Ctx):
    """(attention modules, feed-forward module, norms) of a layer, in registration order."""
    attn, ffn, norms, taken = [], None, [], []
    cls_attn = ctx.found.get("attention")
    cls_ffn = ctx.found.get("feed_forward")
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
                              and isinstance(m, nn.Sequential)
                              or cls_ffn is not None and inspect.isclass(cls_ffn.obj) and isinstance(m, cls_ffn.obj)
                              or _sequential_ffn(m)):
            ffn = (name, m)
            taken.append(name)
        elif _is_norm(m):
            norms.append((name, m))
            taken.append(name)
    if ffn is None:
        ffn = _inline_ffn(layer)
    return attn, ffn, norms


def _sequential_ffn(m: nn.Module) -> bool:
    """An `nn.Sequential` that maps d -> wider -> d through Linears (a feed-forward by what it does, whatever
    the attribute is called: `ff`, `net`, `body`)."""
    if not isinstance(m, nn.Sequential):
        return False
    lin = [c for c in m if isinstance(c, nn.Linear)]
    return len(lin) >= 2 and lin[0].in_features == lin[-1].out_features and lin[0].out_features > lin[0].in_features


def _no_activation(ctx, f, comp: Component, ffn) -> Component:
    """A feed-forward that is a bare `nn.Sequential` of the layer (no class of its own, so no check of its
    own): Linears with nothing non-linear between them is `ffn-no-activation`."""
    m = ffn[1] if ffn is not None else None
    if comp.status == "ok" and ctx.found.get("feed_forward") is None and _sequential_ffn(m) and all(isinstance(c, (nn.Linear, nn.Dropout, nn.Identity)) for c in m):
        ctx.add("ffn-no-activation", f, where(f), f"{ffn[0]}: Linear layers with no activation between them")
        comp.status, comp.ids = "differs", ["ffn-no-activation"]
    return comp


def _inline_ffn(layer: nn.Module):
    """torch's own layers keep the feed-forward inline: linear1, activation, linear2 (no module of its own)."""
    l1, l2 = getattr(layer, "linear1", None), getattr(layer, "linear2", None)
    for name, m in layer.named_children():  # minGPT's `mlp = nn.ModuleDict(dict(c_fc, c_proj, act))`, called by a lambda
        if isinstance(m, nn.ModuleDict) and l1 is None:
            lins = [x for x in m.values() if isinstance(x, nn.Linear)]
            acts = [x for x in m.values() if not isinstance(x, nn.Linear)]
            if len(lins) == 2 and lins[0].out_features == lins[1].in_features and lins[0].in_features == lins[1].out_features \
                    and len(acts) <= 1:
                a, b = lins
                act_mod = acts[0] if acts else torch.nn.functional.gelu

                def ffn(y, a=a, b=b, act=act_mod):
                    return b(act(a(y)))
                ffn.no_activation = lambda y, a=a, b=b: b(a(y))
                return (f"{name} (a ModuleDict)", ffn)
    if not (isinstance(l1, nn.Linear) and isinstance(l2, nn.Linear) and l1.out_features == l2.in_features):
        return None
    try:
        src = inspect.getsource(type(layer).forward)
    except (OSError, TypeError):
        src = ""
    act = torch.nn.functional.gelu if "gelu" in src.lower() else torch.nn.functional.relu

    def ffn(y, act=act):
        return l2(act(l1(y)))
    ffn.no_activation = lambda y: l2(l1(y))  # the `ffn-no-activation` switch of an inline feed-forward
    return ("linear1, linear2", ffn)


def _layer_variants(n_sub: int):
    """(order, residual mask, extra bug) for Post-LN / Pre-LN, the residual taken after the norm, and each
    missing residual."""
    for order in ("post", "pre"):
        yield order, (True,) * n_sub, None
    for order in ("pre", "post"):
        for kind in ("normed", "normed-x"):
            for i in range(n_sub):
                res = tuple(kind if j == i else True for j in range(n_sub))
                yield order, res, ("post-ln-residual", i)
            yield order, (kind,) * n_sub, ("post-ln-residual", -1)
    for order in ("post", "pre"):
        for i in range(n_sub):
            res = tuple(j != i for j in range(n_sub))
            yield order, res, ("no-residual", i)
        yield order, (False,) * n_sub, ("no-residual", -1)


def _sub(order, norm, f, x, residual):
    """One sublayer: Post-LN `norm(x + f(x))`, Pre-LN `x + f(norm(x))`; residual False drops the `x +`,
    "normed" adds the normalised input instead (`y = norm(x); y + f(y)`, a Pre/Post-LN mix-up)."""
    if order == "inner":  # the sublayer holds its own residual and norm (`norm(x + f(x))` inside it)
        return f(x)
    if residual == "normed":   # y = norm(x); y + f(y)
        n = norm(x)
        return n + f(n)
    if residual == "normed-x":  # norm(x) + f(x)
        return norm(x) + f(x)
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
    inner = len(attn) == 1 and ffn is not None and _own_norms(attn + [ffn]) and not norms
    if inner:
        norms = [("", None), ("", None)]
    if len(attn) != 1 or ffn is None or len(norms) != 2:
        raise CannotCheck(f"expected one attention, one feed-forward and two norms inside, found "
                          f"{len(attn)} / {0 if ffn is None else 1} / {len(norms)}")
    A = AttnCaller(attn[0][1], ctx.form, "attention")
    mask_role = next((r for _, r, _ in plan if r in ("mask", "lens")), None)
    lay_form = A.form
    B, T = 3, 5
    x = ctx.randn(B, T, d)
    keep = key_keep(B, T)

    seq_first = any(r == "kpm" for _, r, _ in plan)

    def run(x, keep, ndim):
        if seq_first:  # torch's API: (T, B, d), key_padding_mask True = padding, no square mask
            out = call(layer, plan, {"x": x.transpose(0, 1), "kpm": ~keep})
            return first_tensor(out, shape=(x.shape[1], x.shape[0], x.shape[2])).transpose(0, 1)
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

    extra = []
    if hasattr(fmod, "no_activation"):  # inline linear1/linear2: the activation's absence is a switch here
        def ref_noact(order, res, bug):
            def one(x, keep):
                a = lambda y: A(y, y, y, keep)  # noqa: E731
                return _sub(order, n2, fmod.no_activation, _sub(order, n1, a, x, res[0]), res[1])
            return [one(x, keep)[:2], one(x1, keep1)]
        extra = [(o, (True, True), ("ffn-no-activation", 0, "no activation between linear1 and linear2"))
                 for o in ("post", "pre")]

    def ref_any(order, res, bug=None):
        if bug is not None:
            return ref_noact(order, res, bug)
        return [ref_one(x, keep, order, res)[:2], ref_one(x1, keep1, order, res)]

    return _no_activation(ctx, f, _layer_settle(ctx, f, L, ref_any,
                         2, ["attention", "feed-forward"],
                         f"{attn[0][0]}, {ffn[0]}" + ("" if inner else f", {norms[0][0]}, {norms[1][0]}")
                         + " (your own sublayers)", extra, inner), ffn)


def _own_norms(subs) -> bool:
    """Every sublayer module holds a norm of its own (the nlp-tutorial's `norm(x + f(x))` inside each)."""
    return all(isinstance(m, nn.Module) and any(_is_norm(c) for c in m.modules() if c is not m) for _, m in subs)


def _layer_settle(ctx, f, L, ref, n_sub, sub_names, words, extra=(), inner=False):
    """`inner`: the sublayers hold their own residual and norm; the layer only chains them."""
    comp = Component(f.kind, f.name, "ok", [], words)
    variants = [("inner", (True,) * n_sub, None)] + [("inner",) + tuple(e[1:]) for e in extra] if inner \
        else list(_layer_variants(n_sub)) + list(extra)
    for order, res, bug in variants:
        try:
            outs = ref(order, res) if bug is None or bug[0] in ("no-residual", "post-ln-residual") \
                else ref(order, res, bug)
        except (RuntimeError, ValueError, IndexError, CannotCheck):
            continue
        if all_close(L, outs):
            if order != "inner" and not (bug is not None and bug[0] == "post-ln-residual" and bug[1] < 0):
                ctx.add("post-ln" if order == "post" else "pre-ln", f, where(f))
            if bug is not None:
                if bug[0] in ("no-residual", "post-ln-residual"):
                    which = "every sublayer" if bug[1] < 0 else f"the {sub_names[bug[1]]} sublayer"
                    ctx.add(bug[0], f, where(f), f"no x + ... around {which}" if bug[0] == "no-residual" else
                            f"{which}: the residual adds norm(x), not x")
                else:
                    ctx.add(bug[0], f, where(f), bug[2] if len(bug) > 2 else "")
                comp.status, comp.ids = "differs", [bug[0]]
            return comp
    first = ref("inner" if inner else "post", (True,) * n_sub)
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
    inner = len(attn) == 2 and ffn is not None and _own_norms(attn + [ffn]) and not norms
    if inner:
        norms = [("", None)] * 3
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
        if any(r == "kpm" for _, r, _ in plan):  # torch's API, sequence first, True = hidden
            vals = {"x": x.transpose(0, 1), "m": mem.transpose(0, 1), "kpm": ~src_keep, "tgt_mask": ~tgt_keep[0]}
            out = first_tensor(call(layer, plan, vals), shape=(x.shape[1], x.shape[0], x.shape[2]))
            return out.transpose(0, 1)
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
    return _no_activation(ctx, f, _layer_settle(ctx, f, L, ref, 3, ["self-attention", "cross-attention", "feed-forward"],
                         f"{attn[0][0]} (self), {attn[1][0]} (cross), {ffn[0]}"
                         + "".join(", " + n for n, _ in norms if n) + " (your own sublayers)", extra, inner), ffn)


def block_runner(ctx: Ctx, block: nn.Module, flip: bool = False, no_mask: bool = False):
    """A function (block, h) -> the block's output, called the way a model calls it: `(x)`,
    `(x, freqs_cis[, mask])`, `(x, start_pos, freqs_cis, mask)` with the learner's own rotary tables."""
    from .attention import rope_tables

    plan = call_plan(block.forward, "block")
    roles = {r for _, r, _ in plan}
    attn, _, _ = parts(block, ctx)
    A = AttnCaller(attn[0][1], ctx.form, "attention") if attn else None
    tables = None
    if {"freqs", "cos", "sin"} & (roles | ({r for _, r, _ in A.plan} if A and not A.torch_mha else set())):
        tables, _ = rope_tables(ctx, ctx.sizes.d_model // ctx.sizes.heads)
    # a mask the block requires is given (LLaMA's `mask`); an optional one is left to its default, as
    # the learner's own model calls it (HF style: attention_mask=None, the causal triangle inside)
    mask_role = next((r for _, r, req in plan if r in ("mask", "lens") and req), None)
    plan = [(n, r, req) for n, r, req in plan if req or r not in ("mask", "lens")]
    if A is not None and A.mask_role is not None and not A.torch_mha:
        try:
            p = next(block.parameters())
            xs = torch.zeros(1, 3, ctx.sizes.d_model, dtype=p.dtype)
            A.extra = tables
            A.settle(xs, xs, xs, torch.ones(1, 3, dtype=torch.bool))
        except Exception:
            pass

    def run(b, x):
        vals = {"x": x}
        if tables is not None:
            vals.update(tables(x.shape[1]))
        if mask_role is not None and no_mask:
            vals[mask_role] = None  # the model hands its blocks no mask (the bug switch)
        elif mask_role is not None and A is not None and A.torch_mha:
            vals[mask_role] = ~R.causal_keep(x.shape[1]) if not flip else R.causal_keep(x.shape[1])
        elif mask_role is not None:
            form = A.form if A is not None else ctx.form
            if flip and form.kind in ("keep", "pad"):  # the model's own mask in the other polarity
                form = M.MaskForm("pad" if form.kind == "keep" else "keep", form.dtype, form.ndim)
            vals[mask_role] = form.square(R.causal_keep(x.shape[1])[None], (A.ndim if A else None) or 4)
        return first_tensor(call(b, plan, vals), shape=tuple(x.shape))
    run.takes_mask = mask_role is not None
    return run


def check_block(ctx: Ctx, f: Found) -> Component:
    """A decoder-only block (GPT, LLaMA): causal self-attention and a feed-forward, each with its norm,
    checked for its wiring with the learner's own sublayers; called as they call it: `(x)`,
    `(x, freqs_cis[, mask])`, `(x, start_pos, freqs_cis, mask)`."""
    from .attention import rope_tables

    layer = ctx.build(f)
    d, h = ctx.sizes.d_model, ctx.sizes.heads
    plan = call_plan(layer.forward, "block")
    roles = {r for _, r, _ in plan}
    if "m" in roles:
        return check_decoder_layer(ctx, f)
    attn, ffn, norms = parts(layer, ctx)
    if len(attn) != 1 or ffn is None or len(norms) != 2:
        raise CannotCheck(f"expected one attention, one feed-forward and two norms inside, found "
                          f"{len(attn)} / {0 if ffn is None else 1} / {len(norms)}")
    A = AttnCaller(attn[0][1], ctx.form, "attention")
    if {"freqs", "cos", "sin"} & ({r for _, r, _ in A.plan} | roles):
        tables, _ = rope_tables(ctx, d // h)
    else:
        tables = None
    A.extra = tables
    mask_role = next((r for _, r, req in plan if r in ("mask", "lens") and req), None)  # optional: its default
    plan = [(n, r, req) for n, r, req in plan if req or r not in ("mask", "lens")]
    B, T = 3, 5
    x = ctx.randn(B, T, d)
    causal = R.causal_keep(T)[None]  # (1, T, T)

    def run(x):
        vals = {"x": x}
        if tables is not None:
            vals.update(tables(x.shape[1]))
        if mask_role is not None and A.torch_mha:  # nn.MultiheadAttention inside: (T, T), True = hidden
            vals[mask_role] = ~R.causal_keep(x.shape[1])
        elif mask_role is not None:
            vals[mask_role] = A.form.square(R.causal_keep(x.shape[1])[None], A.ndim or 4)
        return first_tensor(call(layer, plan, vals), shape=tuple(x.shape))

    give = A.mask_role is not None and mask_role is not None  # the block hands its mask on

    def sub_attn(y, drop_mask=False):
        return A(y, y, y, R.causal_keep(y.shape[1])[None] if give and not drop_mask else None, square=True)

    if has_lazy(layer):
        run(x.float())
    layer.double()
    randomize(layer, 4)
    if A.mask_role is not None and not A.torch_mha and mask_role is not None:
        A.settle(x, x, x, torch.ones(B, T, dtype=torch.bool))  # the mask type their attention takes
    if A.mask_role is not None:
        A.ndim = A.ndim or 4
    x1 = ctx.randn(1, 3, d)
    L = [run(x), run(x1)]
    fmod, n1, n2 = ffn[1], norms[0][1], norms[1][1]

    def ref_one(x, order, res, drop_mask=False):
        y = _sub(order, n1, lambda z: sub_attn(z, drop_mask), x, res[0])
        return _sub(order, n2, fmod, y, res[1])

    def ref(order, res, bug=None):
        drop = bug is not None and bug[0] == "no-causal-mask"
        return [ref_one(x, order, res, drop), ref_one(x1, order, res, drop)]

    # the block is handed the causal mask and never passes it on to its attention
    extra = [(o, (True, True), ("no-causal-mask", 0, "the attention never gets the block's causal mask"))
             for o in ("post", "pre")] if give else []
    return _no_activation(ctx, f, _layer_settle(ctx, f, L, ref, 2, ["attention", "feed-forward"],
                         f"{attn[0][0]}, {ffn[0]}, {norms[0][0]}, {norms[1][0]} (your own sublayers)", extra), ffn)


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


def mask_form(module, source: str, found: list[Found], helpers: dict, convention: str | None,
              run=None) -> M.MaskForm:
    if convention:
        return M.flag(convention)
    form = run.mask_form() if run else None  # the masks their own model built for their own padded input
    if form is not None:
        return form
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
    """The learner's last line on the way to an exception: ` (at file.py:12: code)`, or ''; the code is
    left out when it only repeats the message (a `raise NotImplementedError("TODO ...")` line): a TODO
    hint is printed once."""
    import os
    import traceback

    mine = os.path.abspath(getattr(module, "__file__", "") or "")
    frames = [fr for fr in traceback.extract_tb(exc.__traceback__) if os.path.abspath(fr.filename) == mine]
    if not frames:
        return ""
    fr = frames[-1]
    code = (fr.line or "").strip()
    if str(exc) and str(exc)[:40] in code:
        return f" (at {os.path.basename(mine)}:{fr.lineno})"
    return f" (at {os.path.basename(mine)}:{fr.lineno}: {code})"
