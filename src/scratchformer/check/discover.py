"""Finding the learner's components by the names and shapes the tutorials use, building them, calling them.

Nothing has to be renamed: a class is recognised by its name as the tutorials write it
(`MultiHeadAttention`, `MultiHeadedAttention`, `PositionWiseFFN`, `EncoderLayer`, ...), built by
filling its constructor's parameters by name (`d_model` / `num_hiddens` / `size`, `n_heads` / `h`,
`d_ff` / `dff` / `ffn_num_hiddens`, dropout 0, ...), and called by its forward's parameter names
(`(query, key, value, mask)`, `(x, mask)`, the Keras port's `(v, k, q, mask)`, d2l's `valid_lens`).
What the names cannot tell, `--map KIND=Name` or a comment line `# check: KIND` above the class says.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass

import torch
from torch import nn

from . import KINDS


@dataclass(frozen=True)
class Sizes:
    """Tiny sizes, chosen so that every classic mistake changes the numbers: √d_k = √6, d_k = 6 and
    √d_model = √24 are three different scales; T = 5 and 7 are odd and differ from the 4 heads."""
    d_model: int = 24
    heads: int = 4
    d_ff: int = 40
    max_len: int = 64
    vocab: int = 30
    layers: int = 2


@dataclass
class Found:
    kind: str
    name: str
    obj: object  # a class or a function
    how: str     # "name" | "--map" | "comment"


class CannotCheck(Exception):
    """This component cannot be built or called; the message says why (the component is skipped)."""


_CAUSAL = re.compile(r"subsequent|causal|look_?ahead|future|square|tril|no_?peek|triangular")


def kind_of_class(name: str) -> str | None:
    n = name.lower().replace("_", "")
    if "sublayer" in n or "addnorm" in n or "residual" in n:
        return None
    if re.search(r"decoder(layer|block)|decblock|declayer", n):
        return "decoder_layer"
    if re.search(r"encoder(layer|block)|encblock|enclayer", n):
        return "encoder_layer"
    if "feedforward" in n or "ffn" in n or "mlp" in n or "positionwise" in n:
        return "feed_forward"
    if "posit" in n or n in ("pe", "posenc"):
        return "positional_encoding"
    if "attention" in n or "attn" in n or n == "mha":
        if "additive" in n or "bahdanau" in n:
            return None
        if "dotproduct" in n or "scaled" in n:
            return "scaled_dot_product"
        return "attention"
    if "feedforward" in n or "ffn" in n or "mlp" in n or "positionwise" in n:
        return "feed_forward"
    if "layernorm" in n or n in ("norm", "ln"):
        return "layer_norm"
    if n in ("encoder", "transformerencoder", "encoderstack"):
        return "encoder"
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
        elif kind is not None and kind not in found:
            found[kind] = Found(kind, name, obj, "name")
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
    return [found[k] for k in KINDS if k in found], helpers


# --- building: constructor parameters filled by name ---------------------------------------------

_MODULE_ARGS = {"self_attn": "attention", "src_attn": "attention", "cross_attn": "attention", "attn": "attention",
                "attention": "attention", "mha": "attention", "self_attention": "attention",
                "enc_attn": "attention", "enc_dec_attn": "attention", "cross_attention": "attention",
                "feed_forward": "feed_forward", "ffn": "feed_forward", "ff": "feed_forward", "mlp": "feed_forward",
                "pff": "feed_forward", "pos_ffn": "feed_forward", "layer": "LAYER", "block": "LAYER",
                "encoder_layer": "encoder_layer", "decoder_layer": "decoder_layer"}
_D_MODEL = {"d_model", "num_hiddens", "size", "embed_dim", "hidden_size", "dim", "d", "model_dim", "features",
            "norm_shape", "ffn_num_outputs", "n_embd", "emb_dim", "embedding_dim", "d_embed", "hidden",
            "normalized_shape", "n_features", "num_features", "d_k_total", "model_size", "embed_size", "d_hid"}
_LAYERS = {"n_layer", "n_layers", "num_layers", "nlayers", "n", "num_blks", "depth", "layers", "n_blocks",
           "num_blocks", "num_layer", "nlayer", "n_block"}
_MISSING = object()


def arg_value(name: str, kind: str, sizes: Sizes, build_part, default=_MISSING):
    n = name.lower()
    if n in _MODULE_ARGS:
        part = _MODULE_ARGS[n]
        if part == "LAYER":
            part = "decoder_layer" if kind == "decoder_layer" or "dec" in n else "encoder_layer"
        return build_part(part)
    if n == "ffn_num_outputs":
        return sizes.d_model
    if "head" in n or n in ("h", "nhead"):
        return sizes.heads
    if "ff" in n or "feedforward" in n or n in ("d_inner", "inner_dim", "mlp_dim"):
        return sizes.d_ff
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
    if n in ("i", "idx", "layer_idx", "index", "block_index"):
        return 0
    if n in _D_MODEL:
        return sizes.d_model
    if n in ("hidden_dim", "d_hidden"):
        return sizes.d_ff if kind == "feed_forward" else sizes.d_model
    return default


def build(found: Found, sizes: Sizes, all_found: dict[str, Found]):
    """An instance of the learner's class (or what their factory function returns), tiny sizes, dropout 0."""
    def build_part(kind):
        if kind not in all_found:
            raise CannotCheck(f"{found.name} needs a {kind} module and the file has none that was found")
        return build(all_found[kind], sizes, all_found)

    obj = found.obj
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        raise CannotCheck(f"cannot read the parameters of {found.name}") from None
    kwargs = {}
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name == "self":
            continue
        default = p.default if p.default is not p.empty else _MISSING
        if p.name.lower() == "bias" or "eps" in p.name.lower() and default is not _MISSING:
            continue
        v = arg_value(p.name, found.kind, sizes, build_part, default)
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


# --- calling: forward parameters read by name -----------------------------------------------------

_ROLE = {"query": "q", "q": "q", "queries": "q", "key": "k", "k": "k", "keys": "k", "value": "v", "v": "v",
         "values": "v", "x": "x", "inputs": "x", "input": "x", "hidden_states": "x", "src": "x", "h": "x",
         "seq": "x", "enc_input": "x", "tgt": "x", "dec_input": "x", "trg": "x", "y": "x", "tokens": "x",
         "input_ids": "x", "ids": "x", "src_tokens": "x", "emb": "x", "embeddings": "x",
         "memory": "m", "enc_output": "m", "enc_outputs": "m", "encoder_out": "m", "encoder_output": "m",
         "enc_out": "m", "mem": "m", "context": "m", "encoder_outputs": "m", "training": "training",
         "dropout": "dropout", "need_weights": "skip", "return_attention": "skip", "state": "state"}


def role_of(name: str, kind: str) -> str | None:
    n = name.lower()
    if n in ("valid_lens", "valid_len", "lens", "lengths", "enc_valid_lens", "seq_lens"):
        return "lens"
    if "mask" in n:
        if kind == "decoder_layer":
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
    for p in sig.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name == "self":
            continue
        role = role_of(p.name, kind)
        required = p.default is p.empty
        if role is None:
            if required:
                raise CannotCheck(f"forward parameter {p.name!r} is not one the checker knows; "
                                  f"name it like the tutorials (query, key, value, mask / x, mask)")
            continue
        plan.append((p.name, role, required))
    return plan


def call(fn, plan, values: dict):
    """Call with keywords from `values` (role -> value); a role without a value is left to its default."""
    kw = {}
    for name, role, required in plan:
        if role == "training":
            kw[name] = False
        elif role in ("dropout", "skip"):
            continue
        elif role in values:
            kw[name] = values[role]
        elif required:
            raise CannotCheck(f"forward needs {name!r} ({role}) and the checker has none to give")
    return fn(**kw)


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
