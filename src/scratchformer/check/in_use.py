"""The checks that stand on the learner's own run (`watch.py`): components found by what their program does
with them, called with the arguments their program gave them.

- **add & norm** (`add_norm`): a module of theirs that their program calls with two sequences and that holds
  one norm (and at most one linear map): HF BERT's `BertSelfOutput` / `BertOutput` (`LN(dense(h) + x)`), d2l's
  `AddNorm(X, Y)`. Compared with `norm(f(a) + r)` on their own shapes; `no-residual` when the sum is missing.
- **functional components**: `ffn(params, x)`, `layer_norm(params, x)`, `mha(params, x, n_heads, mask)`:
  functions of their file that their program called with a dict (or list) of weight tensors and a sequence.
  Each weight's role comes from its shape and its name as a hint, and whether it is stored (in, out) or
  (out, in) from which of the two reproduces the reference; nothing that does not reproduce under any
  mapping is called a bug.
- **whole-model properties** on their own input: a decoder that reads the future (`no-causal-mask`, wherever its
  mask is built), an additive mask their model builds that hides the real tokens (`mask-inverted`).
"""
from __future__ import annotations

import copy
import inspect
import re

import torch
from torch import nn

from . import reference as R
from .compare import close, settle
from .discover import CannotCheck, Found
from .report import Component, finding
from .watch import safe_copy

# --- add & norm -----------------------------------------------------------------------------------------


def _norms(mod: nn.Module) -> list:
    return [m for m in mod.modules() if m is not mod and (isinstance(m, (nn.LayerNorm, nn.RMSNorm))
                                                          or re.search(r"norm", type(m).__name__, re.I))]


def add_norm_classes(run, module, found_names: set) -> list[Found]:
    """Their classes that their run shows to be an add & norm: called with two (B, T, ·) float tensors,
    holding one norm, at most one linear map and nothing else with weights."""
    out = []
    if not run:
        return out
    for name, cls in vars(module).items():
        if not (inspect.isclass(cls) and issubclass(cls, nn.Module) and cls.__module__ == module.__name__) \
                or name in found_names:
            continue
        s = run.representative(cls)
        if s is None or not s.calls:
            continue
        seqs = [v for v in s.calls[0].args.values() if isinstance(v, torch.Tensor) and v.is_floating_point()
                and v.dim() == 3]
        if len(seqs) != 2 or seqs[0].shape[:2] != seqs[1].shape[:2]:
            continue
        norms = _norms(s.obj)
        linears = [m for m in s.obj.modules() if isinstance(m, nn.Linear)]
        weighted = [m for m in s.obj.modules() if m is not s.obj and any(True for _ in m.parameters(recurse=False))
                    and not isinstance(m, (nn.Linear, nn.LayerNorm, nn.RMSNorm)) and m not in norms]
        if len(norms) == 1 and len(linears) <= 1 and not weighted:
            out.append(Found("add_norm", name, cls, "your run"))
    return out


def _one_seq_call(s, only: bool = True) -> torch.Tensor | None:
    """The one (B, T, d) float sequence of its first call (`only`: and no other tensor given)."""
    if not s.calls:
        return None
    tensors = [v for v in s.calls[0].args.values() if isinstance(v, torch.Tensor)]
    seqs = [v for v in tensors if v.is_floating_point() and v.dim() == 3
            and not bool(((v == 0) | (v <= -1e4)).all())]  # an additive mask is not a sequence
    if len(seqs) != 1 or only and len(tensors) != 1:
        return None
    return seqs[0]


def _seq_name(args: dict, like: torch.Tensor) -> str | None:
    return next((n for n, v in args.items() if isinstance(v, torch.Tensor) and v.is_floating_point()
                 and v.shape == like.shape and torch.equal(v, like)), None)


def ffn_classes(run, module, found_names: set) -> list[Found]:
    """Their classes that their run shows to be a feed-forward block, whatever the name (T5DenseActDense):
    called with one (B, T, d) tensor, giving (B, T, d), holding two linear maps d→h→d and nothing else with
    weights."""
    out = []
    for name, cls in vars(module).items():
        if not (inspect.isclass(cls) and issubclass(cls, nn.Module) and cls.__module__ == module.__name__) \
                or name in found_names:
            continue
        s = run.representative(cls) if run else None
        if s is None or _one_seq_call(s) is None:
            continue
        d = _one_seq_call(s).shape[-1]
        lin = [m for m in s.obj.modules() if isinstance(m, nn.Linear)]
        other = [m for m in s.obj.modules() if m is not s.obj and not isinstance(m, nn.Linear)
                 and any(True for _ in m.parameters(recurse=False))]
        if len(lin) == 2 and not other and lin[0].in_features == d and lin[1].out_features == d \
                and lin[0].out_features == lin[1].in_features and s.calls[0].out_shape == tuple(_one_seq_call(s).shape):
            out.append(Found("feed_forward", name, cls, "its shapes in your run"))
    return out


def residual_classes(run, module, found_names: set, ffn_names: set) -> list[Found]:
    """Their classes that wrap one feed-forward block of theirs with one norm and the residual (T5LayerFF,
    a SublayerConnection around the FFN): called with one sequence, holding exactly those two."""
    out = []
    for name, cls in vars(module).items():
        if not (inspect.isclass(cls) and issubclass(cls, nn.Module) and cls.__module__ == module.__name__) \
                or name in found_names:
            continue
        s = run.representative(cls) if run else None
        if s is None or _one_seq_call(s, only=False) is None:
            continue
        kids = [m for m in s.obj.children() if any(True for _ in m.parameters())]
        norms = [m for m in kids if m in _norms(s.obj)]
        subs = [m for m in kids if type(m).__name__ in ffn_names and run.representative(type(m)) is not None]
        if len(kids) == 2 and len(norms) == 1 and len(subs) == 1:
            out.append(Found("add_norm", name, cls, "your run"))
    return out


def check_residual(ctx, f: Found) -> Component:
    s = ctx.run.representative(f.obj)
    mod = safe_copy(s.obj).double().eval()
    norm = _norms(mod)[0] if _norms(mod) else None
    kids = [m for m in mod.children() if any(True for _ in m.parameters())]
    sub = next(m for m in kids if m is not norm)
    for p in mod.parameters():
        with torch.no_grad():
            p.add_(0.1 * ctx.randn(*p.shape))
    from .watch import recall
    seq = _one_seq_call(s, only=False)
    x = ctx.randn(*seq.shape)
    outer = {n: (v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
             for n, v in s.calls[0].args.items()}
    outer[_seq_name(s.calls[0].args, seq)] = x
    got = recall(mod, outer)
    L = [got[0] if isinstance(got, (tuple, list)) else got]
    inner_s = ctx.run.representative(type(sub))
    inner_seq = _one_seq_call(inner_s, only=False)
    inner = {n: (v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
             for n, v in inner_s.calls[0].args.items()}
    inner_name = _seq_name(inner_s.calls[0].args, inner_seq)
    if inner_name is None or inner_seq.shape != seq.shape:
        raise CannotCheck("its sublayer was called on another shape")

    def run_sub(t):
        y = recall(sub, {**inner, inner_name: t})
        return y[0] if isinstance(y, (tuple, list)) else y

    def ref(bugs, pre):
        if pre:
            y = run_sub(norm(x))
            return [y if "no-residual" in bugs else norm(x) + y if "post-ln-residual" in bugs else x + y]
        y = run_sub(x)
        return [norm(y) if "no-residual" in bugs else norm(x + y)]
    words = f"x + {type(sub).__name__}(norm(x)) or norm(x + {type(sub).__name__}(x)) (a residual around your sublayer)"
    comp = settle(ctx, f, L, ref, {"no-residual": ["none"], "post-ln-residual": ["norm(x) + f"]},
                  [{"pre": True}, {"pre": False}], None, None, words)
    return comp


def check_add_norm(ctx, f: Found) -> Component:
    s = ctx.run.representative(f.obj)
    mod = safe_copy(s.obj).double().eval()
    names = [n for n, v in s.calls[0].args.items() if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim() == 3]
    a_name, r_name = names
    a = ctx.randn(*s.calls[0].args[a_name].shape)
    r = ctx.randn(*s.calls[0].args[r_name].shape)
    norm = _norms(mod)[0]
    lin = next((m for m in mod.modules() if isinstance(m, nn.Linear)), None)
    for p in mod.parameters():  # weights away from their defaults: a norm's gain of 1 hides nothing, ours shows
        with torch.no_grad():
            p.add_(0.1 * ctx.randn(*p.shape))
    args = dict(s.calls[0].args)
    args[a_name], args[r_name] = a, r
    from .watch import recall
    L = [recall(mod, args)]
    if not isinstance(L[0], torch.Tensor):
        raise CannotCheck("its output is not a tensor")

    def ref(bugs, swap=False):
        x, res = (r, a) if swap else (a, r)
        fx = lin(x) if lin is not None else x
        if fx.shape != res.shape:
            raise ValueError("shapes")
        if "no-residual" in bugs:
            return [norm(fx)]
        if "post-ln-residual" in bugs:
            return [norm(res) + fx]
        return [norm(fx + res)]

    words = f"norm({'W·' if lin is not None else ''}{a_name} + {r_name}) (add & norm, found by your run)"
    space = {"no-residual": ["none"], "post-ln-residual": ["norm(x) + f"]}
    return settle(ctx, f, L, ref, space, [{"swap": False}, {"swap": True}], None, None, words)


# --- functional components --------------------------------------------------------------------------------

_PE_FN = re.compile(r"posit|pos_?enc|sinusoid|位置编码", re.I)
_LAYER_FN = re.compile(r"encoder_?layer|decoder_?layer|block|^layer$|transformer_?layer|编码器层|编码层", re.I)
_FN_KIND = [("layer_norm", re.compile(r"layer_?norm|^ln\d*$|_ln$|^norm$|层归一化", re.I)),
            ("rms_norm", re.compile(r"rms_?norm", re.I)),
            ("feed_forward", re.compile(r"ffn|feed_?forward|mlp|前馈", re.I)),
            ("attention", re.compile(r"attention|attn|^mha$|self_attn|注意力", re.I))]


def _weights(v) -> dict:
    """{name: tensor} of a params argument: a dict (nested one level), a list/tuple of tensors, or a module
    (an nn.ModuleDict of layers: their parameters by name, Linear weights as (out, in))."""
    if isinstance(v, nn.Module):
        return dict(v.named_parameters())
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if isinstance(x, torch.Tensor):
                out[str(k)] = x
            elif isinstance(x, dict):
                out.update({f"{k}.{k2}": x2 for k2, x2 in x.items() if isinstance(x2, torch.Tensor)})
        return out
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, torch.Tensor) for x in v):
        return {str(i): x for i, x in enumerate(v)}
    return {}


def functional_components(run, module, found_names: set) -> list[Found]:
    out = []
    if not run or run.watch is None:
        return out
    for name, calls in run.watch.functions.items():
        fn = vars(module).get(name)
        if not inspect.isfunction(fn) or name in found_names or not calls:
            continue
        ints = [v for v in calls[0].args.values() if isinstance(v, int) and not isinstance(v, bool)]
        if _PE_FN.search(name) and len(ints) >= 2 and len(calls[0].args) == len(ints):
            out.append(Found("positional_encoding", name, fn, "your run"))  # positional_encoding(max_len, d_model)
            continue
        kind = "encoder_layer" if _LAYER_FN.search(name) else next((k for k, pat in _FN_KIND if pat.search(name)), None)
        args = calls[0].args
        has_w = any(_weights(v) for v in args.values())
        has_x = any(isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim() == 3 for v in args.values())
        if kind and has_w and has_x:
            out.append(Found(kind, name, fn, "your run"))
    return out


def _call_theirs(fn, args: dict, x_name: str, x, params_name: str, params):
    a = dict(args)
    a[x_name] = x
    a[params_name] = params
    return fn(**a)


def _split_args(args: dict):
    pname = next(n for n, v in args.items() if _weights(v))
    xname = next(n for n, v in args.items() if isinstance(v, torch.Tensor) and v.is_floating_point() and v.dim() == 3)
    return pname, xname


def _double_params(v):
    if isinstance(v, nn.Module):
        return copy.deepcopy(v).double().eval()
    if isinstance(v, dict):
        return {k: _double_params(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(_double_params(x) for x in v)
    if isinstance(v, torch.Tensor) and v.is_floating_point():
        return v.detach().double() + 0.0
    return v


def _randomized(v, ctx, gains: bool):
    """Their weights replaced by distinct random ones of the same shapes (gains near 1, biases near 0)."""
    if isinstance(v, nn.Module):
        from .compare import randomize
        randomize(v, 11)
        return v
    if isinstance(v, dict):
        return {k: _randomized(x, ctx, gains or bool(re.search(r"gamma|weight|scale|gain|^g$|^w$|a_2", str(k))))
                for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return type(v)(_randomized(x, ctx, gains) for x in v)
    if isinstance(v, torch.Tensor) and v.is_floating_point():
        r = ctx.randn(*v.shape)
        if v.dim() == 1:
            return 1 + 0.2 * r if gains else 0.2 * r
        return r / v.shape[-1] ** 0.5
    return v


def _functional_table(ctx, f: Found) -> Component:
    """Their table function called as their program called it: (max_len, d) against the paper's formula."""
    args = ctx.run.watch.functions[f.name][0].args
    try:
        src = inspect.getsource(ctx.module)
    except (OSError, TypeError):
        src = ""
    if re.search(r"rotary|\brope\b|rotate_half|freqs|_cis\b", src, re.I):
        raise CannotCheck("a rotary file: this table is not the paper's additive sinusoid")
    out = f.obj(**args)
    single = getattr(out, "dtype", None) in (torch.float32, torch.float16, torch.bfloat16) or \
        str(getattr(out, "dtype", "")) in ("float32", "float16")
    t = torch.as_tensor(out).double() if not isinstance(out, torch.Tensor) else out.double()

    def close(a, b):  # a table their code computed in float32: sin of angles up to max_len is good to ~1e-5
        return a.shape == b.shape and bool(torch.allclose(a, b, rtol=0, atol=1e-4 if single else 1e-7))
    while t.dim() > 2 and t.shape[0] == 1:
        t = t[0]
    if t.dim() != 2:
        raise CannotCheck(f"{f.name}(...) gave shape {tuple(t.shape)}, not (positions, d_model)")
    T, d = t.shape
    comp = Component(f.kind, f.name, "ok", [], "your table function, called as your program calls it")
    if close(t, R.positional_table(T, d)):
        return comp
    if close(t, R.positional_table(T, d, "sin-cos-halves")):
        ctx.add("pe-sin-cos-halves", f, f"{f.name}()")
        return comp
    sub = next((v for v in R.PE_VARIANTS[1:] if close(t, R.positional_table(T, d, v))), None)
    if sub is None and not bool(((t.abs() <= 1 + 1e-6)).all()):
        raise CannotCheck(f"{f.name}(...) is not a sinusoid table (values beyond ±1)")
    ctx.add("pe-wrong-formula", f, f"{f.name}()", f"your table matches: {sub}" if sub else
            "not PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(p / 10000^(2i/d))")
    comp.status, comp.ids = "differs", ["pe-wrong-formula"]
    return comp


def check_functional(ctx, f: Found) -> Component:
    if f.kind == "positional_encoding":
        return _functional_table(ctx, f)
    calls = ctx.run.watch.functions[f.name]
    args = calls[0].args
    pname, xname = _split_args(args)
    params = _randomized(_double_params(args[pname]), ctx, False)
    W = _weights(params)
    shape = args[xname].shape
    x = ctx.randn(*shape) * 2 + 0.5
    x[min(1, shape[0] - 1), 0] *= 1e-3  # a row with a tiny variance: where eps sits shows
    rest = {n: (v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v) for n, v in args.items()}
    L = [_call_theirs(f.obj, rest, xname, x, pname, params)]
    if isinstance(L[0], (tuple, list)):
        L = [L[0][0]]
    if not isinstance(L[0], torch.Tensor):
        raise CannotCheck("its output is not a tensor")
    d = shape[-1]
    if f.kind == "encoder_layer":
        return _functional_layer(ctx, f, rest, xname, x, pname, params)
    if f.kind in ("layer_norm", "rms_norm"):
        return _functional_norm(ctx, f, L, x, W, d)
    if f.kind == "feed_forward":
        return _functional_ffn(ctx, f, L, x, W, d)
    return _functional_attention(ctx, f, L, x, W, d, rest, xname, pname, params)


def _functional_layer(ctx, f, rest, xname, x, pname, params) -> Component:
    """Their layer function run on our input with every call of their own (checked) sublayer functions
    recorded: the wiring is read from the values, a sublayer at a time. After S(u) = s, Post-LN feeds
    norm(u + s) on; Pre-LN (u = norm(r)) carries r + s. `s` alone carried on is `no-residual`; norm(r) + s
    (the normalised input added back) is `post-ln-residual`."""
    module = ctx.module
    kinds = {g.name: g.kind for g in ctx.found.values()
             if inspect.isfunction(g.obj) and g.kind in ("attention", "feed_forward", "layer_norm", "rms_norm")}
    for name in list(ctx.run.watch.functions):
        k = next((k for k, pat in _FN_KIND if pat.search(name)), None)
        if k and name not in kinds and inspect.isfunction(vars(module).get(name)):
            kinds[name] = k
    if not any(k in ("attention", "feed_forward") for k in kinds.values()) and not isinstance(params, nn.Module):
        raise CannotCheck("its sublayers are not functions of your file that the check could follow")
    seen = []
    saved = {n: vars(module)[n] for n in kinds}

    inside = [0]  # > 0 while one of their spied sublayer functions runs

    def spy(name, fn):
        def wrapped(*a, **kw):
            inside[0] += 1
            try:
                out = fn(*a, **kw)
            finally:
                inside[0] -= 1
            xin = next((v for v in list(a) + list(kw.values()) if isinstance(v, torch.Tensor)
                        and v.is_floating_point() and v.dim() == 3), None)
            seen.append((kinds[name], xin, out if isinstance(out, torch.Tensor) else None))
            return out
        return wrapped
    hooks = []
    pending = {}  # a d→h Linear whose h→d partner has not come yet: the two are one feed-forward sublayer

    def on_norm(m, inp, out):
        if isinstance(inp[0], torch.Tensor) and inp[0].dim() == 3:
            seen.append(("layer_norm", inp[0], out))

    def on_linear(m, inp, out):
        """Two Linears their layer calls itself (outside its attention), d→h then h→d: one feed-forward."""
        if inside[0]:
            return
        d = x.shape[-1]
        if "in" not in pending and m.in_features == d:
            pending["in"] = inp[0]
        elif "in" in pending and m.out_features == d:
            seen.append(("feed_forward", pending.pop("in"), out))

    if isinstance(params, nn.Module):  # their layers held in a ModuleDict: norms and d→h→d pairs followed too
        for m in params.modules():
            if m is not params and (isinstance(m, (nn.LayerNorm, nn.RMSNorm)) or re.search(r"norm", type(m).__name__, re.I)):
                hooks.append(m.register_forward_hook(on_norm))
            elif isinstance(m, nn.Linear):
                hooks.append(m.register_forward_hook(on_linear))
    try:
        for n, fn in saved.items():
            setattr(module, n, spy(n, fn))
        out = _call_theirs(f.obj, rest, xname, x, pname, params)
    finally:
        for n, fn in saved.items():
            setattr(module, n, fn)
        for h in hooks:
            h.remove()
    out = out[0] if isinstance(out, (tuple, list)) else out
    comp = Component(f.kind, f.name, "ok", [], "the wiring followed through your own sublayer functions")
    norms = [(i, u, y) for i, (k, u, y) in enumerate(seen) if k in ("layer_norm", "rms_norm")]
    subs = [(i, u, y) for i, (k, u, y) in enumerate(seen) if k in ("attention", "feed_forward")]
    if not subs or any(u is None or y is None for _, u, y in seen):
        raise CannotCheck("its sublayers' inputs and outputs could not be followed")
    pre_ln = seen[0][0] in ("layer_norm", "rms_norm")  # Pre-LN starts with a norm, Post-LN with a sublayer
    for i, u, sout in subs:
        before = [(j, nu, ny) for j, nu, ny in norms if j < i]
        after = [(j, nu, ny) for j, nu, ny in norms if j > i]
        nxt_sub = next((su for j, su, _ in subs if j > i), None)
        if pre_ln:
            if not before:
                raise CannotCheck("a Pre-LN sublayer without its norm")
            r = before[-1][1]
            z = after[0][1] if after else nxt_sub if nxt_sub is not None else out
            if close(z, r + sout):
                continue
            bug = "no-residual" if close(z, sout) else "post-ln-residual" if close(z, u + sout) else None
        else:
            if not after:
                continue
            z = after[0][1]
            if close(z, u + sout):
                continue
            bug = "no-residual" if close(z, sout) else None
        if bug is None:
            raise CannotCheck(f"the value after its {seen[i][0]} is neither norm(x + sublayer) nor x + sublayer(norm(x))")
        ctx.add(bug, f, f"{f.name}()", f"after its {seen[i][0].replace('_', ' ')}, the sum with the sublayer's "
                f"input is {'missing' if bug == 'no-residual' else 'taken with the normalised input'}")
        comp.status, comp.ids = "differs", comp.ids + [bug]
    if comp.status == "ok":
        ctx.add("pre-ln" if pre_ln else "post-ln", f, f"{f.name}()")
    return comp


def _gain_bias(W: dict, d: int):
    ones = [(n, t) for n, t in W.items() if t.dim() == 1 and t.shape[0] == d]
    gamma = next((t for n, t in ones if re.search(r"gamma|weight|scale|gain|(^|\.)g$|(^|\.)w$|a_2", n)), None)
    beta = next((t for n, t in ones if re.search(r"beta|bias|shift|(^|\.)b$|b_2", n)), None)
    if gamma is None and beta is None and len(ones) == 2:
        gamma, beta = ones[0][1], ones[1][1]
    return gamma, beta


def _functional_norm(ctx, f, L, x, W, d):
    gamma, beta = _gain_bias(W, d)
    eps = [1e-5, 1e-6, 1e-12, 1e-8]
    if f.kind == "rms_norm" or beta is None and _no_mean(L[0], x):
        def ref(bugs, eps):
            return [R.rms_norm(x, gamma, eps, bugs)]
        return settle(ctx, f, L, ref, R.RMS_NORM_VARIANTS, [{"eps": e} for e in eps], None, None,
                      "an RMS norm by what it does; w←" + ("its gain" if gamma is not None else "none"))

    def ref(bugs, eps):
        return [R.layer_norm(x, gamma, beta, eps, bugs)]
    return settle(ctx, f, L, ref, R.LAYER_NORM_VARIANTS, [{"eps": e} for e in eps], None, None,
                  "γ, β from your params by name (functional)")


def _no_mean(y, x) -> bool:
    return not torch.allclose(y.mean(-1), torch.zeros_like(y.mean(-1)), atol=1e-3)


def _functional_ffn(ctx, f, L, x, W, d):
    mats = [(n, t) for n, t in W.items() if t.dim() == 2]
    if len(mats) != 2:
        raise CannotCheck(f"expected two weight matrices in {f.name}'s params, found {len(mats)}")
    (n1, a), (n2, b) = mats
    if re.search(r"2|out|down|proj", n1) and not re.search(r"2|out|down|proj", n2):
        (n1, a), (n2, b) = (n2, b), (n1, a)
    vecs = {n: t for n, t in W.items() if t.dim() == 1}

    def bias_for(n, size):
        stem = re.sub(r"(\.|_)?(w|weight|kernel)$", "", n.lower())
        cand = [t for k, t in vecs.items() if t.shape[0] == size and re.sub(r"(\.|_)?(b|bias)$", "", k.lower()) == stem]
        if not cand and len(vecs) <= 2:
            cand = [t for t in vecs.values() if t.shape[0] == size]
        return cand[0] if len(cand) == 1 else None

    choices = []
    for layout in ("x@W", "linear"):
        w1 = a.t() if layout == "x@W" else a
        w2 = b.t() if layout == "x@W" else b
        if w1.shape[1] != d or w2.shape[0] != d or w1.shape[0] != w2.shape[1]:
            continue
        for act in ("relu", "gelu", "gelu-tanh", "silu"):
            choices.append({"W": (w1, bias_for(n1, w1.shape[0]), w2, bias_for(n2, d)), "act": act, "layout": layout})
    if not choices:
        raise CannotCheck(f"{f.name}'s two matrices do not chain d→d_ff→d")

    def ref(bugs, W, act, layout):
        return [R.feed_forward(x, *W, act=act, bugs=bugs)]
    return settle(ctx, f, L, ref, {"ffn-no-activation": ["identity"]}, choices, None, None,
                  f"W_1←{n1}, W_2←{n2} (functional; stored as your product uses them)")


def _functional_attention(ctx, f, L, x, W, d, rest, xname, pname, params):
    h = next((v for n, v in rest.items() if isinstance(v, int) and not isinstance(v, bool)
              and re.search(r"head|^h$|nh", n)), None) or ctx.sizes.heads
    if d % h:
        raise CannotCheck(f"{d} is not a multiple of {h} heads")
    mats = [(n, t) for n, t in W.items() if t.dim() == 2]
    role = {}
    pats = (("q", r"^(w_?)?q(_?(proj|w))?$|quer"), ("k", r"^(w_?)?k(_?(proj|w))?$|(^|_)keys?($|_)"),
            ("v", r"^(w_?)?v(_?(proj|w))?$|value"), ("o", r"^(w_?)?o(_?(proj|w))?$|out|dense|proj"))
    for n, t in mats:
        parts = [p for p in n.lower().split(".") if p not in ("w", "weight", "kernel")]
        last = parts[-1] if parts else n.lower()
        r = next((r for r, pat in pats if re.search(pat, last)), None)
        if r is not None and r not in role:
            role[r] = (n, t)
    if set(role) != {"q", "k", "v", "o"} or any(t.shape != (d, d) for _, t in role.values()):
        raise CannotCheck(f"{f.name}: W_Q, W_K, W_V, W_O not found by name among {[n for n, _ in mats]}")
    vecs = {n: t for n, t in W.items() if t.dim() == 1 and t.shape[0] == d}
    mask = next(((n, v) for n, v in rest.items() if "mask" in n.lower() and isinstance(v, torch.Tensor)), None)
    keep = None
    if mask is not None:
        m = mask[1]
        kind = _functional_mask_kind(ctx, m) or ctx.form.kind
        keep = (m == 0) if kind == "pad" else (m > -1e4) if m.is_floating_point() and kind == "add" else m.bool()
        while keep.dim() < 4:
            keep = keep.unsqueeze(1)

    def bias(n):
        stem = re.sub(r"(\.|_)?(w|weight|kernel)$", "", n.lower())
        return next((t for k, t in vecs.items() if re.sub(r"(\.|_)?(b|bias)$", "", k.lower()) == stem
                     and k.lower() != stem), None)

    choices = []
    for layout in ("x@W", "linear"):
        w = {r: ((t.t() if layout == "x@W" else t), bias(n)) for r, (n, t) in role.items()}
        for fill in (-1e9, float("-inf")):
            choices.append({"w": w, "fill": fill})

    def ref(bugs, w, fill):
        return [R.multi_head(x, x, x, w, h, keep, bugs, fill=fill)]
    space = dict(R.ATTENTION_VARIANTS)
    return settle(ctx, f, L, ref, space, choices, None, None,
                  ", ".join(f"W_{r.upper()}←{n}" for r, (n, _) in sorted(role.items())) + " (functional, by names)")


# --- whole-model properties on their own input ------------------------------------------------------------

def run_properties(report, facts, source: str) -> None:
    """Each property on its own: one that cannot be read on their run (a model that cannot be copied or called
    again) is left out, never a crash of the check."""
    try:
        _run_properties(report, facts, source)
    except Exception:
        return


def _run_properties(report, facts, source: str) -> None:
    """A decoder that reads the future on their own input (`no-causal-mask`), wherever its mask is built; an
    additive mask their model builds that hides the real tokens and keeps the padding (`mask-inverted`)."""
    if not facts:
        return
    top = facts.watch.top()
    if top is None:
        return
    name = type(top.obj).__name__

    def add(id_, detail):
        report.findings.append(finding(id_, "model", f"{name}.forward", detail))
        try:
            report.findings[-1].line = inspect.getsourcelines(type(top.obj).forward)[1]
        except (OSError, TypeError):
            pass
        comp = next((c for c in report.components if c.name == name), None)
        if comp is None:
            report.components.append(Component("model", name, "differs", [id_], "the whole model on your own input"))
        else:
            comp.status, comp.ids = "differs", comp.ids + [id_]

    attention_bug = any(c.kind in ("attention", "scaled_dot_product") and set(c.ids) - {"unknown-difference"}
                        for c in report.components)
    deaf = facts.ignores_its_input()
    if deaf is not None and not report.bug_ids():
        if deaf:
            add("cross-attention-kv", f"on your own input, changing the input did not change the output at all: "
                                      f"`{deaf}` reads the model's own states, not the input")
        else:
            add("unknown-difference", "on your own input, changing the input did not change the output at all")
    if facts.decoder_ignores_source() and "cross-attention-kv" not in report.ids():
        add("cross-attention-kv", "on your own input, changing the source did not change the decoder's output at "
                                  "all: its cross-attention reads the decoder's own states, not the memory")
        attention_bug = True  # attending to its own states also reads the future: that is this bug, not the mask
    attention_bug = attention_bug or "cross-attention-kv" in report.ids()
    if "no-causal-mask" not in report.ids() and not attention_bug:  # an attention bug already explains it
        got = facts.decoder_reads_future(source)
        # the id needs its cause seen: an attention checked equal to ours cannot be what mixes the positions
        checked = any(c.kind in ("attention", "scaled_dot_product") and c.status == "ok" for c in report.components)
        if got and got[0] and got[2] in ("all", "one ahead") and checked:
            add("no-causal-mask", f"on your own input, changing the last token of `{got[1]}` changed the outputs at "
                                  + ("every earlier position" if got[2] == "all" else "the position just before it")
                                  + ": the decoder reads the future")
        elif got and got[0]:
            add("unknown-difference", f"on your own input, changing the last token of `{got[1]}` changed the outputs at "
                                      f"some earlier positions (not all, not just the one before: positions mixed?): "
                                      f"the decoder reads the future")
    if "attention-dropout-in-eval" not in report.ids():
        wet = dropping_in_eval(facts)
        if wet is not None and re.search(r"attention|attn|注意力", wet, re.I):
            name_ = wet
            comp = next((c for c in report.components if c.name == name_), None)
            report.findings.append(finding("attention-dropout-in-eval", "attention", f"{name_}.forward",
                                           "put in eval(), the same input from your own run gave two different "
                                           "outputs: F.dropout(..., training=self.training)?"))
            if comp is None:
                report.components.append(Component("attention", name_, "differs", ["attention-dropout-in-eval"], ""))
            else:
                comp.status, comp.ids = "differs", [i for i in comp.ids if i != "unknown-difference"] + ["attention-dropout-in-eval"]
                comp.detail = ""
                report.findings = [x for x in report.findings if not (x.id == "unknown-difference"
                                                                      and x.where.startswith(name_ + "."))]
    for id_, detail in loss_in_their_loop(facts):
        if id_ not in report.ids():
            add(id_, detail)
    for id_, who, detail in square_masks_in_use(facts):
        if id_ not in report.ids():
            report.findings.append(finding(id_, "decoder_layer", f"{who}.forward", detail))
            comp = next((c for c in report.components if c.name == who), None)
            if comp is None:
                report.components.append(Component("decoder_layer", who, "differs", [id_], "the mask your model passed it"))
            else:
                comp.status, comp.ids = "differs", [i for i in comp.ids if i != "unknown-difference"] + [id_]
    if not {"missing-final-norm", "extra-final-norm"} & set(report.ids()):
        got = final_norm_in_use(report, facts)
        if got is not None:
            add(*got)
    loss = lm_loss_property(facts)
    if loss is not None:
        for id_, detail in loss:
            if id_ not in report.ids():
                add(id_, detail)
    inverted = facts.inverted_masks()
    if inverted and "mask-inverted" not in report.ids():
        add("mask-inverted", f"the additive mask your model passed to {inverted} for your own padded input is 0 on the "
                             f"padding and large negative on the real tokens: it hides the words and keeps the padding")


def lm_loss_property(facts):
    """Their model's own loss on their own first call (ids, targets), against cross-entropy computed from its
    logits: shifted by one unless their data already is (targets[:, :-1] == ids[:, 1:]), padding left out
    when their targets hold the padding id. [(id, detail)] for what differs, [] when it matches, None
    when the run cannot tell (no loss, no targets, or no variant reproduces it)."""
    import torch.nn.functional as F
    top = facts.watch.top()
    if top is None or not top.calls:
        return None
    args = dict(top.calls[0].args)
    from .watch import _TARGET, _token_ids
    inputs = [(n, v) for n, v in args.items() if _token_ids(n, v)]
    targets_ = [(n, v) for n, v in args.items() if _TARGET.search(n) and isinstance(v, torch.Tensor) and v.dim() == 2
                and not v.is_floating_point()]
    if len(inputs) != 1 or len(targets_) != 1:
        return None
    (_, ids), (tname, targets) = inputs[0], targets_[0]
    if ids.shape != targets.shape or ids.shape[1] < 2:
        return None
    try:
        mod = safe_copy(top.obj).eval()
        from .watch import recall
        with torch.no_grad():
            out = recall(mod, args)
    except Exception:
        return None
    if not isinstance(out, (tuple, list)):
        return None
    logits = next((t for t in out if isinstance(t, torch.Tensor) and t.dim() == 3 and t.shape[:2] == ids.shape), None)
    loss = next((t for t in out if isinstance(t, torch.Tensor) and t.dim() == 0), None)
    if logits is None or loss is None:
        return None
    if torch.equal(targets, ids):
        shift_expected = True
    elif torch.equal(targets[:, :-1], ids[:, 1:]):
        shift_expected = False
    else:
        return None
    pads = [p for p in facts.pad_ids(declared=True) if bool((targets == p).any())]
    pad = pads[0] if pads else None

    def ce(shift, ignore):
        lg, tg = (logits[:, :-1], targets[:, 1:]) if shift else (logits, targets)
        kw = {"ignore_index": pad} if ignore and pad is not None else {}
        return F.cross_entropy(lg.reshape(-1, lg.shape[-1]).float(), tg.reshape(-1), **kw)

    def same(a, b):
        return bool(torch.allclose(a.float(), b.float(), rtol=1e-4, atol=1e-5))
    right = ce(shift_expected, True)
    if same(loss, right):
        return []
    found = []
    for shift in (shift_expected, not shift_expected):
        for ignore in ((True, False) if pad is not None else (True,)):
            if (shift, ignore) == (shift_expected, True) or not same(loss, ce(shift, ignore)):
                continue
            if shift != shift_expected and shift_expected:
                found.append(("target-not-shifted", f"its loss equals cross-entropy of logits[t] against targets[t] "
                                                    f"(`{tname}` is your input itself): position t must predict t+1"))
            if not ignore:
                found.append(("loss-on-padding", f"its loss equals cross-entropy with the padding id {pad} counted: "
                                                 f"leave it out with ignore_index={pad}"))
            return found or None
    return None


def dropping_in_eval(facts) -> str | None:
    """The innermost class of theirs whose instance, put in eval(), gives two outputs for the same input of
    their own run (dropout left on): its name, else None."""
    from .watch import _same_output, recall
    w = facts.watch
    seen = [s for s in facts.seen if s.calls]
    depth = {id(s.obj): sum(id(m) in w.instances for m in s.obj.modules()) for s in seen}
    done = set()
    module, drops = getattr(facts, "module", None), getattr(facts, "dropout_constants", {})
    saved = {n: vars(module)[n] for n in drops} if module is not None else {}
    try:  # their module-level rates as they wrote them (the checks run with 0)
        for n, v in drops.items():
            setattr(module, n, v)
        return _first_wet(seen, depth, done, recall, _same_output)
    finally:
        for n, v in saved.items():
            setattr(module, n, v)


def _first_wet(seen, depth, done, recall, _same_output):
    for s in sorted(seen, key=lambda s: depth[id(s.obj)]):
        if type(s.obj) in done:
            continue
        done.add(type(s.obj))
        try:
            mod = safe_copy(s.obj).eval()
            with torch.no_grad():
                torch.manual_seed(1)
                a = recall(mod, s.calls[0].args)
                torch.manual_seed(2)
                b = recall(mod, s.calls[0].args)
        except Exception:
            continue
        if not _same_output(a, b) and (isinstance(a, torch.Tensor) or isinstance(a, (tuple, list))):
            return type(s.obj).__name__
    return None


def loss_in_their_loop(facts) -> list:
    """F.cross_entropy as their own training step called it: its target is the model's own decoder input
    (not shifted by one), or it counts the padding id their data pads with (no ignore_index for it)."""
    from .watch import _token_ids, padding_value
    w = facts.watch
    top = w.top()
    if not w.losses or top is None or not top.calls:
        return []
    seqs = [v for n, v in top.calls[0].args.items() if _token_ids(n, v)]
    if not seqs:
        return []
    dec = seqs[-1]  # the decoder's (or the language model's) input
    out = []
    call = w.losses[0]
    target = call.get("target")
    if not isinstance(target, torch.Tensor) or target.is_floating_point():
        return []
    from .watch import causal_intent
    try:
        source = inspect.getsource(facts.module) if getattr(facts, "module", None) is not None else ""
    except (OSError, TypeError):
        source = ""
    predicts_next = len(seqs) >= 2 or causal_intent(source)  # an autoencoder's target is its input, rightly
    if predicts_next and target.numel() == dec.numel() and torch.equal(target.reshape(dec.shape), dec):
        out.append(("target-not-shifted", "the loss your training step computes takes the model's own input as "
                                          "the target: position t must predict token t+1"))
    if target.numel() != dec.numel() and target.numel() != dec.shape[0] * (dec.shape[1] - 1):
        return out  # not a loss per token (a classifier's labels): padding is not its question
    declared = facts.pad_ids(declared=True)
    batches = seqs + ([target.reshape(dec.shape)] if target.numel() == dec.numel() else [])
    pad = declared[0] if declared else padding_value(batches)
    ignore = call.get("ignore_index")
    data = [target] + seqs + [v for v in vars(facts.module).values() if isinstance(v, torch.Tensor) and v.dim() == 2
                              and not v.is_floating_point()] if getattr(facts, "module", None) is not None else [target]
    padded = pad is not None and any(bool((t == pad).any()) for t in data)  # their data has padding, this batch or not
    if ignore is not None and bool((target == ignore).any()):
        padded = False  # they left the padding out through the labels themselves (-100 where the padding was)
    if pad is not None and call.get("reduction", "mean") == "mean" and ignore != pad and padded:
        out.append(("loss-on-padding", f"the loss your training step computes counts the padding id {pad} "
                                       f"(ignore_index={ignore}): leave it out with ignore_index={pad}"))
    return out


def square_masks_in_use(facts) -> list:
    """The causal masks their model passed its layers for their own input, read as they are: the diagonal
    hidden (a position cannot see itself), or a later position visible, is `no-causal-mask`."""
    w = facts.watch
    out = []
    seen_cls = set()
    for s in sorted(facts.seen, key=lambda s: s.calls[0].order if s.calls else 1 << 30):
        if not s.calls or type(s.obj) in seen_cls:
            continue
        for n, m in s.calls[0].args.items():
            if not isinstance(m, torch.Tensor) or "mask" not in n.lower() or m.dim() < 2 or m.shape[-1] != m.shape[-2] \
                    or m.shape[-1] < 3:
                continue
            rows = m.reshape(-1, m.shape[-2], m.shape[-1])
            if all(torch.equal(r[0:1].expand_as(r), r) for r in rows):
                continue  # the same row for every query: a padding mask, not a triangle
            hidden = _hidden(m, s, facts)
            if hidden is None:
                continue
            T = m.shape[-1]
            hid = hidden.reshape(-1, T, T)
            upper = torch.ones(T, T, dtype=torch.bool).triu(1)
            diag_hidden = ahead_seen = False
            for h0 in hid:
                real = ~h0.all(0)  # a padding column is hidden from every row: leave it out
                pairs = upper & real[None, :] & real[:, None]
                if bool((h0.diagonal() & real).any()):
                    diag_hidden = True
                if bool((~h0 & pairs).any()):
                    ahead_seen = True
            if diag_hidden and not ahead_seen:
                out.append(("no-causal-mask", type(s.obj).__name__, "the causal mask your model passed it hides the "
                            "diagonal too: a position cannot see itself (triu with k=0 where k=1 was meant?)"))
            seen_cls.add(type(s.obj))
            break
    return out[:1]


def _hidden(m: torch.Tensor, s, facts):
    """The mask as True = hidden: read from its own padding columns where it has them (hidden in every row), else
    from the convention their run showed."""
    if m.is_floating_point():
        if bool(((m == 0) | (m <= -1e4)).all()):
            return m <= -1e4
        return None
    b = m.bool()
    lower = torch.ones(m.shape[-1], m.shape[-1], dtype=torch.bool).tril(-1)
    vals = b.reshape(-1, m.shape[-1], m.shape[-1])[:, lower]
    if bool(vals.all()):
        return ~b  # the strict lower triangle is True: True = may attend
    if not bool(vals.any()):
        return b   # the strict lower triangle is False: True = hidden
    return None


def _functional_mask_kind(ctx, m: torch.Tensor) -> str | None:
    """How their functional code's mask marks the padding, read against the token ids their program passed
    (the padding id a module constant names, else the one their batches show)."""
    from .watch import _read_mask, _token_ids, padding_value
    ids = [v for calls in ctx.run.watch.functions.values() for c in calls for n, v in c.args.items() if _token_ids(n, v)]
    if not ids:
        return None
    t = ids[0]
    named = [v for n, v in vars(ctx.module).items() if re.fullmatch(r"pad\w*|PAD\w*", n) and isinstance(v, int)
             and not isinstance(v, bool)]
    pad = named[0] if named else padding_value([t])
    if pad is None or m.shape[0] != t.shape[0] or m.shape[-1] != t.shape[-1]:
        return None
    P = t == pad
    if not P.any() or P.all():
        return None
    got = _read_mask(m, P, t.shape[0], t.shape[1])
    return None if got is None else ("add" if got[0] == "add-inverted" else got[0])


def final_norm_in_use(report, facts):
    """The end of their stack as their own model runs it: after Pre-LN layers the last layer's output must go
    through one norm before the head (`missing-final-norm` when no norm of the model outside the layers
    receives it); after Post-LN layers, none (`extra-final-norm` when one does). (id, detail) or None."""
    from .watch import recall
    if any(x.severity == "bug" and x.component in ("layer_norm", "rms_norm") for x in report.findings):
        return None
    top = facts.watch.top()
    module = getattr(facts, "module", None)
    if top is None or not top.calls or module is None:
        return None
    order = {x.id for x in report.findings if x.component in ("block", "encoder_layer") and x.id in ("pre-ln", "post-ln")}
    if len(order) != 1:
        return None
    layer_names = {c.name for c in report.components if c.kind in ("block", "encoder_layer") and c.status == "ok"}
    classes = [getattr(module, n, None) for n in layer_names]
    classes = tuple(c for c in classes if isinstance(c, type))
    if not classes:
        return None
    mod = safe_copy(top.obj).eval()
    layers = [m for m in mod.modules() if isinstance(m, classes)]
    if len(layers) < 1:
        return None
    inside = {id(m) for layer in layers for m in layer.modules()}
    norms = [m for m in mod.modules() if id(m) not in inside and m is not mod
             and (isinstance(m, (nn.LayerNorm, nn.RMSNorm)) or re.search(r"norm", type(m).__name__, re.I))
             and not any(True for _ in m.children())]
    last, fed = [], []
    hooks = [layers[-1].register_forward_hook(lambda m, i, o: last.append(o[0] if isinstance(o, (tuple, list)) else o))]
    hooks += [n.register_forward_hook(lambda m, i, o: fed.append(i[0])) for n in norms]
    try:
        with torch.no_grad():
            recall(mod, top.calls[0].args)
    except Exception:
        return None
    finally:
        for h in hooks:
            h.remove()
    if not last or not isinstance(last[-1], torch.Tensor):
        return None
    h_last = last[-1]
    normed = any(isinstance(t, torch.Tensor) and t.shape == h_last.shape and torch.allclose(t, h_last) for t in fed)
    twice = sum(isinstance(t, torch.Tensor) and t.shape == h_last.shape for t in fed) >= 2 and normed
    if "pre-ln" in order and not normed:
        return ("missing-final-norm", "Pre-LN layers, and on your own input the last layer's output reaches the head "
                                      "without a norm")
    if "post-ln" in order and normed:
        return ("extra-final-norm", "Post-LN layers already end in a norm; on your own input the model normalises "
                                    "the last layer's output again")
    if "pre-ln" in order and twice:
        return None
    return None
