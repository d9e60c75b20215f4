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
The whole-model properties on their own inputs are in `properties.py`.
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
from .report import Component
from .facts import safe_copy

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


def attention_classes(run, module, found_names: set) -> list[Found]:
    """Their classes that their run shows to be an attention, whatever the name (DuoTouZhuYiLi, Mixer): called
    again with the arguments of its first call, its own forward computes probabilities over keys (a softmax whose
    last two sizes are the query's and the keys' lengths, or `scaled_dot_product_attention`), and returns the
    query's shape; it holds linear maps and no attention class of theirs below it."""
    from .facts import recall

    out = []
    if not run:
        return out
    classes = {cls for cls in vars(module).values() if inspect.isclass(cls) and issubclass(cls, nn.Module)
               and cls.__module__ == module.__name__}
    for name, cls in vars(module).items():
        if not inspect.isclass(cls) or cls not in classes or name in found_names:
            continue
        s = run.representative(cls)
        if s is None or not s.calls:
            continue
        seqs = [v for v in s.calls[0].args.values() if isinstance(v, torch.Tensor) and v.is_floating_point()
                and v.dim() == 3 and not bool(((v == 0) | (v <= -1e4)).all())]
        if not seqs or not any(isinstance(m, nn.Linear) for m in s.obj.modules()):
            continue
        if any(type(m) in classes and type(m) is not cls for m in s.obj.modules()):
            continue  # it holds classes of theirs: a layer or a model, not the attention itself
        lengths = {v.shape[1] for v in seqs}
        probs = _probabilities(s.obj, s.calls[0].args, recall)
        if probs and any(p[-1] in lengths and p[-2] in lengths for p in probs) \
                and s.calls[0].out_shape == tuple(seqs[0].shape):
            out.append(Found("attention", name, cls, "what it computes in your run"))
    return out


def layer_classes(run, module, found: list) -> list[Found]:
    """Their classes that their run shows to be a Transformer layer, whatever the name (JieMaCeng): called with
    one (B, T, d) sequence (and masks), returning that shape, holding exactly one attention and one
    feed-forward block found before, one or two norms, and nothing else with weights. A decoder-only block
    when that attention is causal in use, else an encoder layer."""
    out = []
    if not run:
        return out
    kinds = {f.obj: f.kind for f in found if inspect.isclass(f.obj)}
    names = {f.name for f in found}
    for name, cls in vars(module).items():
        if not (inspect.isclass(cls) and issubclass(cls, nn.Module) and cls.__module__ == module.__name__) \
                or name in names:
            continue
        s = run.representative(cls)
        seq = _one_seq_call(s, only=False) if s is not None else None
        if seq is None or s.calls[0].out_shape != tuple(seq.shape):
            continue
        parts = [m for m in s.obj.children()]
        att = [m for m in parts if kinds.get(type(m)) == "attention"]
        ffn = [m for m in parts if kinds.get(type(m)) == "feed_forward"]
        norms = [m for m in parts if m in _norms(s.obj)]
        rest = [m for m in parts if m not in att + ffn + norms and any(True for _ in m.parameters())]
        if len(att) == 1 and len(ffn) == 1 and 1 <= len(norms) <= 2 and not rest:
            causal = run.causal_in_use(type(att[0]))
            out.append(Found("block" if causal else "encoder_layer", name, cls, "its parts in your run"))
    return out


def positional_classes(run, module, found_names: set) -> list[Found]:
    """Their classes that their run shows to add a positional table, whatever the name (WeiZhiBianMa): called
    with one (B, T, d) sequence and nothing else, holding no parameters, and in eval adding the same (T, d)
    values to any input (out(x) - x does not depend on x)."""
    from .facts import recall

    out = []
    if not run:
        return out
    for name, cls in vars(module).items():
        if not (inspect.isclass(cls) and issubclass(cls, nn.Module) and cls.__module__ == module.__name__) \
                or name in found_names:
            continue
        s = run.representative(cls)
        seq = _one_seq_call(s) if s is not None else None
        if seq is None or any(True for _ in s.obj.parameters()):
            continue
        key = next(k for k, v in s.calls[0].args.items() if v is seq or isinstance(v, torch.Tensor) and v.dim() == 3)
        try:
            was = s.obj.training
            s.obj.eval()
            with torch.no_grad():
                a = recall(s.obj, {**s.calls[0].args, key: seq})
                b = recall(s.obj, {**s.calls[0].args, key: torch.zeros_like(seq)})
            s.obj.train(was)
        except Exception:  # noqa: BLE001
            continue
        if isinstance(a, torch.Tensor) and a.shape == seq.shape and bool((b != 0).any()) \
                and torch.allclose(a - seq, b, atol=1e-5):
            out.append(Found("positional_encoding", name, cls, "what it adds in your run"))
    return out


def _probabilities(mod: nn.Module, args: dict, recall) -> list:
    """The (…, Tq, Tk) probabilities `mod` computes when called again with `args` (a softmax over the last axis,
    or those `scaled_dot_product_attention` computes); [] when it raises."""
    from torch.overrides import TorchFunctionMode
    import torch.nn.functional as F

    seen = []

    class Spy(TorchFunctionMode):
        def __torch_function__(self, func, types, a=(), kw=None):
            kw = kw or {}
            res = func(*a, **kw)
            if func in (torch.softmax, F.softmax, torch.Tensor.softmax) and isinstance(res, torch.Tensor) \
                    and res.dim() >= 3 and kw.get("dim", a[1] if len(a) > 1 else None) in (-1, res.dim() - 1):
                seen.append(res.shape)
            elif func is F.scaled_dot_product_attention and len(a) >= 2:
                seen.append(a[0].shape[:-1] + a[1].shape[-2:-1])
            return res
    try:
        was = mod.training
        mod.eval()
        with torch.no_grad(), Spy():
            recall(mod, args)
        mod.train(was)
    except Exception:  # noqa: BLE001 - their forward on their own arguments, called again
        return []
    return seen


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
    from .facts import recall
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
    from .facts import recall
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
            if not after:  # no norm after it: its residual cannot be read here, so the layer is not called right
                raise CannotCheck(f"nothing after its {seen[i][0]} shows how the sum is taken")
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


def _functional_mask_kind(ctx, m: torch.Tensor) -> str | None:
    """How their functional code's mask marks the padding, read against the token ids their program passed
    (the padding id a module constant names, else the one their batches show)."""
    from .facts import _read_mask, _token_ids, padding_value
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


