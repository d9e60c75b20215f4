"""Finding the learner's components by the names and shapes the tutorials use, building them, calling them.

Nothing has to be renamed: a class is recognised by its name as the tutorials write it
(`MultiHeadAttention`, `MultiHeadedAttention`, `PositionWiseFFN`, `EncoderLayer`, ...), built by
filling its constructor's parameters by name (`d_model` / `num_hiddens` / `size`, `n_heads` / `h`,
`d_ff` / `dff` / `ffn_num_hiddens`, dropout 0, ...), and called by its forward's parameter names
(`(query, key, value, mask)`, `(x, mask)`, the Keras port's `(v, k, q, mask)`, d2l's `valid_lens`).
What the names cannot tell, `--map KIND=Name` or a comment line `# check: KIND` above the class says.
"""
from __future__ import annotations

import dataclasses
import inspect
import re
from dataclasses import dataclass, field

import torch
from torch import nn

from . import KINDS
from .sizes import _CONFIG_PARAM, _D_MODEL, SIZE_NAMES, Sizes, _global_size


class _NoRun:
    """What the checks know of the learner's own run when there was none (the in-process API, a file
    without a demo): nothing; every question answers None."""

    def representative(self, cls):
        return None

    def ctor(self, cls):
        return None

    def call_args(self, cls):
        return {}

    def causal_in_use(self, cls):
        return None

    def mask_form(self, cls=None):
        return None

    def raised_in(self, name):
        return None

    def __bool__(self):
        return False


# the facts of the learner's own run for the file being checked (`watch.RunFacts`), set by run.check_loaded
# for one check and put back after it; the child process checks one file
RUN = _NoRun()


def set_run(facts) -> object:
    global RUN
    old, RUN = RUN, facts if facts is not None else _NoRun()
    return old


class Fixed:
    """A forward argument their own program passes as a plain value (`scale=0.125`, `causal=True`): given the
    same way when the check calls it."""
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __repr__(self):
        return f"Fixed({self.value!r})"


@dataclass
class Found:
    kind: str
    name: str
    obj: object  # a class or a function
    how: str     # "name" | "--map" | "comment"


class CannotCheck(Exception):
    """This component cannot be built or called; the message says why (the component is skipped)."""


_CAUSAL = re.compile(r"subsequent|causal|look_?ahead|future|square|tril|no_?peek|triangular")


# Chinese names as the Chinese courses write them (多头注意力, 前馈网络, 编码器层, ...)
_ZH = [("解码器层", "decoder_layer"), ("解码层", "decoder_layer"), ("编码器层", "encoder_layer"), ("编码层", "encoder_layer"),
       ("解码器块", "block"), ("注意力", "attention"), ("前馈", "feed_forward"), ("均方根", "rms_norm"),
       ("层归一化", "layer_norm"), ("归一化", "layer_norm"), ("位置编码", "positional_encoding"),
       ("编码器", "encoder"), ("块", "block")]


def kind_of_class(name: str) -> str | None:
    for word, kind in _ZH:
        if word in name:
            if kind == "attention" and ("缩放" in name or "点积" in name):
                return "scaled_dot_product"
            return kind
    n = name.lower().replace("_", "")
    if "sublayer" in n or "addnorm" in n or "residual" in n:
        return None
    if re.search(r"decoder(layer|block)|decblock|declayer", n):
        return "decoder_layer"
    if re.search(r"encoder(layer|block)|encblock|enclayer", n):
        return "encoder_layer"
    if re.search(r"feedfo?r?ward|ffn|mlp|positionwise|swiglu", n):
        return "feed_forward"
    if "posit" in n or n in ("pe", "posenc"):
        return "positional_encoding"
    if "rmsnorm" in n:
        return "rms_norm"
    if "attention" in n or "attn" in n or n == "mha":
        if "additive" in n or "bahdanau" in n:
            return None
        if "dotproduct" in n or "scaled" in n:
            return "scaled_dot_product"
        return "attention"
    if "layernorm" in n or n in ("norm", "ln"):
        return "layer_norm"
    if n in ("encoder", "transformerencoder", "encoderstack"):
        return "encoder"
    if n in ("decoder", "transformerdecoder", "decoderstack"):
        return "decoder"
    if re.fullmatch(r"\w*block|transformerlayer|gptlayer|llamadecoderlayer|decoderonlylayer|layer", n) \
            and not re.search(r"embed|head|norm|output|input|conv|patch", n):
        return "block"
    if re.search(r"gpt|llama|languagemodel|decoderonly|causallm|^transformer$|^(tiny|mini|nano|simple|my)?(lm|model)$|模型", n) \
            and not re.search(r"rotary|rope|embed|norm|config|(?<!lm)head|mlp|cache", n):
        return "model"  # a decoder-only language model, if its structure says so (else dropped, see model.py)
    return None


def kind_of_function(name: str, fn) -> str | None:
    n = name.lower()
    if "mask" in n and _CAUSAL.search(n) or n.startswith("subsequent"):
        return "causal_mask"
    if "mask" in n:
        return "pad_mask"  # a helper: it tells the mask convention, it is not checked itself
    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None
    if "attention" in n and len(names) >= 3 and {_ROLE.get(p.lower()) for p in names[:3]} == {"q", "k", "v"}:
        return "scaled_dot_product"  # (q, k, v, ...) by name: a plotting helper `show_attention(w, ...)` is not one
    if re.search(r"feed_?forward|ffn", n):
        return "feed_forward"
    return None


def comment_map(source: str) -> dict[str, str]:
    """`# check: attention` on the line right above `class X` / `def X` maps X to that kind."""
    out = {}
    for m in re.finditer(r"^#\s*check:\s*(\w+)\s*\n(?:\s*@.*\n)*\s*(?:class|def)\s+(\w+)", source, re.M):
        out[m.group(1)] = m.group(2)
    return out


def discover(module, mapping: dict | None = None, source: str = "") -> tuple[list[Found], dict]:
    """The components in `module` (its own classes and functions only, not what it imported).

    Returns (components in KINDS order, helpers {"pad_mask": [functions]})."""
    found: dict[str, Found] = {}
    helpers: dict[str, list] = {"pad_mask": []}
    own = [(n, o) for n, o in vars(module).items()
           if (inspect.isclass(o) or inspect.isfunction(o)) and getattr(o, "__module__", None) == module.__name__]
    for name, obj in own:
        if inspect.isclass(obj):
            kind = kind_of_class(name) if issubclass(obj, nn.Module) else None
        else:
            kind = kind_of_function(name, obj)
        if kind == "pad_mask":
            helpers["pad_mask"].append(obj)
        elif kind is not None and (kind not in found or kind == "model"):  # the model: the last one defined
            found[kind] = Found(kind, name, obj, "name")
        elif kind == "attention" and re.search(r"head$", found[kind].name, re.I) and not re.search(r"head$", name, re.I):
            found[kind] = Found(kind, name, obj, "name")  # one head (AttentionHead) is a part: the whole wins
        elif kind is not None and inspect.isclass(obj) and not inspect.isclass(found[kind].obj):
            found[kind] = Found(kind, name, obj, "name")  # a module class beats a factory function
    for how, m in (("comment", comment_map(source)), ("--map", mapping or {})):
        for kind, name in m.items():
            if kind not in KINDS:
                raise ValueError(f"--map {kind}={name}: {kind!r} is not a component kind; use one of {', '.join(KINDS)}")
            obj = getattr(module, name, None)
            if obj is None:
                raise ValueError(f"--map {kind}={name}: the file defines no {name!r}")
            found[kind] = Found(kind, name, obj, how)
    for kind in ("decoder_layer", "encoder_layer"):
        f = found.get(kind)
        if f is not None and f.how == "name" and "block" not in found and inspect.isclass(f.obj):
            try:
                roles = {role_of(p, kind) for p in inspect.signature(f.obj.forward).parameters}
            except (TypeError, ValueError):
                continue
            if kind == "decoder_layer" and not roles & {"m", "state"} or roles & {"freqs", "cos", "sin", "start_pos"}:
                # a decoder layer without an encoder's output is a decoder-only block (GPT, LLaMA)
                found["block"] = Found("block", f.name, f.obj, "name")
                del found[kind]
    return [found[k] for k in KINDS if k in found], helpers


# --- building: constructor parameters filled by name ---------------------------------------------

_MODULE_ARGS = {"self_attn": "attention", "src_attn": "attention", "cross_attn": "attention", "attn": "attention",
                "attention": "attention", "mha": "attention", "self_attention": "attention",
                "enc_attn": "attention", "enc_dec_attn": "attention", "cross_attention": "attention",
                "feed_forward": "feed_forward", "ffn": "feed_forward", "ff": "feed_forward", "mlp": "feed_forward",
                "pff": "feed_forward", "pos_ffn": "feed_forward", "layer": "LAYER", "block": "LAYER",
                "encoder_layer": "encoder_layer", "decoder_layer": "decoder_layer"}
_LAYERS = {"n_layer", "n_layers", "num_layers", "nlayers", "n", "num_blks", "depth", "layers", "n_blocks",
           "num_blocks", "num_layer", "nlayer", "n_block"}
_MISSING = object()


def arg_value(name: str, kind: str, sizes: Sizes, build_part, default=_MISSING):
    n = name.lower()
    if n in _MODULE_ARGS:
        part = _MODULE_ARGS[n]
        if part == "LAYER":
            part = "decoder_layer" if kind in ("decoder_layer", "decoder") or "dec" in n else "encoder_layer"
        return build_part(part)
    if n == "ffn_num_outputs":
        return sizes.d_model
    if n in ("head_size", "head_dim", "d_head", "d_k", "dk", "dim_head", "head_dimension", "hs", "d_v"):
        return sizes.d_k
    if n in SIZE_NAMES["kv_heads"]:
        return sizes.kv_heads
    if "head" in n or n in ("h", "nhead"):
        return sizes.heads
    if "ff" in n or "feedforward" in n or n in ("d_inner", "inner_dim", "mlp_dim") or n in SIZE_NAMES["d_ff"]:
        return sizes.d_ff
    for size in ("d_model", "max_len", "vocab", "layers"):
        if n in SIZE_NAMES[size] and not n.isascii():
            return getattr(sizes, size)
    if "drop" in n or n in ("rate", "p", "pdrop", "attn_pdrop"):
        return 0.0
    if "vocab" in n or n in ("ntoken", "num_embeddings", "n_tokens", "num_tokens"):
        return sizes.vocab
    if "max" in n or n in ("n_position", "seq_len", "position", "n_positions", "context", "block_size", "length"):
        return sizes.max_len
    if n in _LAYERS:
        return sizes.layers
    if "pad" in n:
        return 0
    if n in ("i", "idx", "layer_idx", "index", "block_index", "layer_id", "layer_index", "block_idx"):
        return 0
    if n in _D_MODEL:
        return sizes.d_model
    if n in ("hidden_dim", "d_hidden"):
        return sizes.d_ff if kind == "feed_forward" else sizes.d_model
    return default


def build(found: Found, sizes: Sizes, all_found: dict[str, Found], dropout: float = 0.0):
    """An instance of the learner's class (or what their factory function returns), their sizes, dropout 0
    (or `dropout`, to see whether it still drops in eval)."""
    def build_part(kind):
        if kind not in all_found:
            raise CannotCheck(f"{found.name} needs a {kind} module and the file has none that was found")
        return build(all_found[kind], sizes, all_found, dropout)

    obj = found.obj
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        raise CannotCheck(f"cannot read the parameters of {found.name}") from None
    seen = RUN.ctor(obj) if inspect.isclass(obj) else None
    if seen is not None:  # built as their own program built it: their arguments, dropout set to ours
        mod = _rebuild(obj, sig, seen, dropout)
        if mod is not None:
            return mod
    kwargs = {}
    cfg = sizes.config
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name == "self":
            continue
        default = p.default if p.default is not p.empty else _MISSING
        ann = p.annotation if inspect.isclass(p.annotation) else None
        if cfg is not None and (ann is not None and isinstance(cfg, ann)
                                or _CONFIG_PARAM.fullmatch(p.name) and default in (_MISSING, None)):
            kwargs[p.name] = cfg  # GPTConfig / ModelArgs: the learner's own, dropout 0
            continue
        if cfg is not None and hasattr(cfg, p.name) and default is _MISSING:
            v = getattr(cfg, p.name)  # a field of their config by the same name (hidden_dim, multiple_of)
            kwargs[p.name] = dropout if "drop" in p.name.lower() and isinstance(v, float) else v
            continue
        if (getattr(obj, "__name__", ""), p.name) in sizes.flags and "drop" not in p.name.lower():
            kwargs[p.name] = sizes.flags[(obj.__name__, p.name)]  # a switch their model always sets (mask=True)
            continue
        if p.name.lower() == "bias" and default is _MISSING:
            kwargs[p.name] = bool(getattr(cfg, "bias", True))
            continue
        if p.name.lower() == "bias" or "eps" in p.name.lower() and default is not _MISSING:
            continue
        if default is _MISSING and p.name in sizes.consts and not _MODULE_ARGS.get(p.name.lower()):
            v = sizes.consts[p.name]  # their own module-level constant by the same name
            kwargs[p.name] = dropout if "drop" in p.name.lower() else v
            continue
        if default is not _MISSING and not _global_size(p.name) and "drop" not in p.name.lower() \
                and p.name.lower() not in _MODULE_ARGS and not ("eps" in p.name.lower()):
            continue  # their own default (hidden=128, multiple_of=256): the learner's size
        v = arg_value(p.name, found.kind, sizes, build_part, default)
        if v is _MISSING and (getattr(obj, "__name__", ""), p.name) in sizes.passed:
            v = getattr(sizes, sizes.passed[(obj.__name__, p.name)])  # the size its call sites pass it
        if dropout and ("drop" in p.name.lower() or p.name.lower() in ("rate", "p", "pdrop", "attn_pdrop")):
            v = dropout
        if v is _MISSING:
            v = _constant_like(p.name, sizes.consts)
        if v is _MISSING and re.search(r"class|label|n_out|num_out|target", p.name, re.I):
            v = 3  # a classifier head's width: any small number checks the body
        if v is _MISSING:
            if "eps" in p.name.lower():
                v = 1e-6
            else:
                raise CannotCheck(f"{found.name}(...): no value known for the parameter {p.name!r}; "
                                  f"write it with a default")
        kwargs[p.name] = v
    mod = obj(**kwargs)
    if not isinstance(mod, nn.Module):
        raise CannotCheck(f"{found.name}(...) did not give a torch.nn.Module")
    return mod


def _constant_like(name: str, consts: dict):
    """Their module constant that names this parameter (`hid` <- HID_DIM, `heads` <- N_HEADS), else _MISSING."""
    n = name.lower().replace("_", "")
    if len(n) < 2:
        return _MISSING
    hits = [(k, v) for k, v in consts.items() if isinstance(v, int) and not isinstance(v, bool) and v > 0
            and (k.lower().replace("_", "").startswith(n) or k.lower().replace("_", "").endswith(n))]
    if not hits:
        return _MISSING
    return min(hits, key=lambda kv: len(kv[0]))[1]


def _rebuild(cls, sig, ctor: dict, dropout: float):
    """`cls` built again from the arguments their program passed it: parts (modules) copied, dropout
    rates (numbers named like dropout, and nn.Dropout inside copied parts) set to `dropout`."""
    import copy

    def adapt(name, v):
        if "drop" in name.lower() and isinstance(v, float):
            return dropout
        if isinstance(v, nn.Module):
            from .facts import safe_copy
            m = safe_copy(v)
            for sub in m.modules():
                if isinstance(sub, nn.Dropout):
                    sub.p = dropout
            return m
        if isinstance(v, torch.Tensor):
            return v.clone()
        if isinstance(v, (dict, list, tuple)) or hasattr(v, "__dict__") and not isinstance(v, type):
            try:
                v = copy.deepcopy(v)
            except Exception:
                return v
            if isinstance(v, dict):
                for k, x in list(v.items()):
                    if isinstance(k, str) and "drop" in k.lower() and isinstance(x, float):
                        v[k] = dropout
            elif hasattr(v, "__dict__"):
                for k, x in list(vars(v).items()):
                    if "drop" in k.lower() and isinstance(x, float):
                        try:
                            setattr(v, k, dropout)
                        except Exception:
                            pass
        return v

    pos, kw = [], {}
    params = list(sig.parameters.values())
    has_var = any(p.kind == p.VAR_POSITIONAL for p in params)
    for p in params:
        if p.name not in ctor:
            continue
        v = ctor[p.name]
        if p.kind == p.VAR_POSITIONAL:
            pos.extend(adapt(p.name, x) for x in v)
        elif p.kind == p.VAR_KEYWORD:
            kw.update({k: adapt(k, x) for k, x in v.items()})
        elif p.kind == p.POSITIONAL_ONLY or has_var and p.kind == p.POSITIONAL_OR_KEYWORD:
            pos.append(adapt(p.name, v))
        else:
            kw[p.name] = adapt(p.name, v)
    try:
        mod = cls(*pos, **kw)
    except Exception:
        return None  # the usual way below, from the sizes
    if isinstance(mod, nn.Module):
        for sub in mod.modules():
            if isinstance(sub, nn.Dropout):
                sub.p = dropout
        return mod
    return None


# --- calling: forward parameters read by name -----------------------------------------------------

_ROLE = {"query": "q", "q": "q", "queries": "q", "key": "k", "k": "k", "keys": "k", "value": "v", "v": "v",
         "values": "v", "x": "x", "inputs": "x", "input": "x", "hidden_states": "x", "src": "x", "h": "x",
         "seq": "x", "enc_input": "x", "tgt": "x", "dec_input": "x", "trg": "x", "y": "x", "tokens": "x",
         "input_ids": "x", "ids": "x", "src_tokens": "x", "emb": "x", "embeddings": "x",
         "memory": "m", "enc_output": "m", "enc_outputs": "m", "encoder_out": "m", "encoder_output": "m",
         "enc_out": "m", "mem": "m", "context": "m", "encoder_outputs": "m", "training": "training",
         "dropout": "dropout", "need_weights": "skip", "return_attention": "skip", "state": "state",
         # rotary positions handed in (LLaMA style): the learner's own table for the probe's length
         "freqs_cis": "freqs", "freqs": "freqs", "freq_cis": "freqs", "pos_cis": "freqs", "rope": "freqs",
         "rotary_emb": "freqs", "freqs_complex": "freqs", "rope_cache": "freqs", "position_embeddings": "freqs",
         "cos_sin": "freqs", "cos": "cos", "sin": "sin", "start_pos": "start_pos", "pos_offset": "start_pos",
         "use_cache": "skip", "past_key_values": "none", "kv_cache": "none", "cache": "none", "past_key_value": "none", "layer_past": "none",
         "past_kv": "none", "is_causal": "skip", "idx": "x", "词": "x", "词元": "x", "x_ids": "x", "targets": "targets", "target": "targets",
         "labels": "labels", "y_true": "targets", "compute_loss": "want_loss", "return_loss": "want_loss",
         "with_loss": "want_loss", "计算损失": "want_loss", "返回损失": "want_loss", "x_mask": "mask", "输入": "x", "掩码": "mask"}


def role_of(name: str, kind: str) -> str | None:
    n = name.lower()
    m = re.fullmatch(r"(?:input|in|x)_?(q|k|v)", n)  # input_Q, input_K, input_V (the nlp-tutorial spelling)
    if m:
        return m.group(1)
    if re.fullmatch(r"(enc|dec|encoder|decoder|src|tgt|trg)_?(inputs?|x|embs?|embeddings)", n):
        return "x"  # enc_inputs, dec_inputs: the layer's input (B, T, d)
    if n in ("valid_lens", "valid_len", "lens", "lengths", "enc_valid_lens", "seq_lens"):
        return "lens"
    if re.search(r"(^|_)cos($|_)", n):
        return "cos"  # freqs_cos, cos_cached: a rotary table handed in
    if re.search(r"(^|_)sin($|_)", n):
        return "sin"
    if "key_padding" in n:  # torch's API, sequence first: (S, B) keys, True = padding
        return "tgt_kpm" if re.search(r"tgt|trg|self", n) else "kpm"
    if "mask" in n:
        if kind == "decoder_layer" and re.fullmatch(r"(memory|mem)_mask|attn_mask", n):
            return "attn_mask"
        if kind == "decoder_layer":
            if re.search(r"dec_enc|enc_dec|cross|memory", n):
                return "src_mask"
            if re.search(r"tgt|trg|look|self|dec|causal|sub|future|combined", n):
                return "tgt_mask"
            return "src_mask"
        return "mask"
    return _ROLE.get(n)


def call_plan(fn, kind: str) -> list[tuple[str, str, bool]]:
    """[(parameter name, role, required)] of a forward (or function), in order."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        raise CannotCheck("cannot read the forward's parameters") from None
    plan = []
    owner = getattr(fn, "__self__", None)
    theirs = RUN.call_args(type(owner)) if isinstance(owner, nn.Module) else {}
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name == "self":
            continue
        role = role_of(p.name, kind)
        required = p.default is p.empty
        if (role is None or role in ("skip", "dropout")) and p.name in theirs and _plain_value(theirs[p.name]) \
                and not (role == "dropout" or "drop" in p.name.lower()):
            plan.append((p.name, Fixed(theirs[p.name]), required))  # as their own caller passes it
            continue
        if role is None and isinstance(theirs.get(p.name), torch.Tensor):
            role = _role_of_value(theirs[p.name], {r for _, r, _ in plan})  # what their program passed there
        if role is None:
            if required:
                raise CannotCheck(f"forward parameter {p.name!r} is not one the checker knows; "
                                  f"name it like the tutorials (query, key, value, mask / x, mask)")
            continue
        plan.append((p.name, role, required))
    if theirs and kind != "attention" and any(r in ("q", "k", "v") for _, r, _ in plan):
        plan = _roles_by_data(plan, theirs, kind)
    return plan


def _roles_by_data(plan, theirs: dict, kind: str):
    """A layer called (value, key, query, mask) as their program calls it: the arguments it was given the same
    tensor for are one input ("x"); in a decoder layer, those that are another sequence are the memory."""
    def same(a, b):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
    named = {n: theirs.get(n) for n, r, _ in plan if r in ("q", "k", "v", "x")}
    anchor = next((n for n, r, _ in plan if r in ("x", "q")), None)
    if anchor is None or not isinstance(named.get(anchor), torch.Tensor):
        return plan
    out = []
    for n, r, req in plan:
        if r in ("q", "k", "v", "x"):
            if same(named.get(n), named[anchor]):
                r = "x"
            elif kind == "decoder_layer" and isinstance(named.get(n), torch.Tensor):
                r = "m"
        out.append((n, r, req))
    return out


def call(fn, plan, values: dict):
    """Call with keywords from `values` (role -> value); a role without a value is left to its default."""
    kw = {}
    for name, role, required in plan:
        if isinstance(role, Fixed):
            kw[name] = role.value
        elif role == "training":
            kw[name] = False
        elif role == "none":
            kw[name] = None
        elif role == "start_pos" and role not in values:
            kw[name] = 0
        elif role in ("dropout", "skip", "tgt_kpm", "attn_mask"):
            continue
        elif role in values:
            kw[name] = values[role]
        elif required:
            raise CannotCheck(f"forward needs {name!r} ({role}) and the checker has none to give")
    return fn(**kw)


def _role_of_value(v: torch.Tensor, taken: set) -> str | None:
    """A parameter's role from the value their own program passed it, where its name says nothing: a
    boolean or 0/1 tensor, or 0 / −1e9 floats, is a mask; a (B, T, C) float tensor the input."""
    if v.dim() >= 2 and (v.dtype == torch.bool or not v.is_floating_point() and bool(((v == 0) | (v == 1)).all())):
        return "mask" if "mask" not in taken else None
    if v.is_floating_point() and v.dim() >= 2 and bool(((v == 0) | (v <= -1e4)).all()) and bool((v == 0).any()):
        return "mask" if "mask" not in taken else None
    if v.is_floating_point() and v.dim() == 3 and "x" not in taken and "q" not in taken:
        return "x"
    return None


def _plain_value(v) -> bool:
    from .facts import _plain  # one definition of "a value a call can be given again as it was"
    return _plain(v)


def first_tensor(out, ndim: int | None = None, shape=None):
    """The output tensor: the value itself, or the first tensor of a tuple (output, weights)."""
    if isinstance(out, torch.Tensor):
        if shape is not None and tuple(out.shape) != tuple(shape):
            raise CannotCheck(f"the output has shape {tuple(out.shape)}, expected {tuple(shape)}")
        return out
    if isinstance(out, (tuple, list)):
        for o in out:
            if isinstance(o, torch.Tensor) and (shape is None or tuple(o.shape) == tuple(shape)) \
                    and (ndim is None or o.dim() == ndim):
                return o
    raise CannotCheck(f"the output is a {type(out).__name__}, not a tensor (or a tuple starting with one)")
