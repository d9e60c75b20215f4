"""Finding the learner's components by the names and shapes the tutorials use, building them, calling them.

Nothing has to be renamed: a class is recognised by its name as the tutorials write it
(`MultiHeadAttention`, `MultiHeadedAttention`, `PositionWiseFFN`, `EncoderLayer`, ...), built by
filling its constructor's parameters by name (`d_model` / `num_hiddens` / `size`, `n_heads` / `h`,
`d_ff` / `dff` / `ffn_num_hiddens`, dropout 0, ...), and called by its forward's parameter names
(`(query, key, value, mask)`, `(x, mask)`, the Keras port's `(v, k, q, mask)`, d2l's `valid_lens`).
What the names cannot tell, `--map KIND=Name` or a comment line `# check: KIND` above the class says.
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from dataclasses import dataclass, field

import torch
from torch import nn

from . import KINDS


@dataclass
class Sizes:
    """The sizes the learner's modules are built with: theirs where their file fixes them (see
    `learner_sizes`), else these tiny ones, chosen so that every classic mistake changes the numbers:
    √d_k = √6, d_k = 6 and √d_model = √24 are three different scales; T = 5 and 7 are odd and differ
    from the 4 heads. `came_from` says, per size, where the value was read ("n_embd = 64 in your file")."""
    d_model: int = 24
    heads: int = 4
    d_ff: int = 40
    max_len: int = 64
    vocab: int = 30
    layers: int = 2
    kv_heads: int | None = None  # grouped-query attention: fewer K/V heads than query heads
    came_from: dict = field(default_factory=dict)
    config: object = None        # the learner's config object (GPTConfig(), ModelArgs()), dropout set to 0
    consts: dict = field(default_factory=dict)  # the learner's module-level ints and floats by name
    passed: dict = field(default_factory=dict)  # (class, parameter) -> the size its call sites pass it
    flags: dict = field(default_factory=dict)   # (class, parameter) -> the True/False every call site passes

    @property
    def d_k(self) -> int:
        return self.d_model // self.heads

    def describe(self) -> str:
        return ", ".join(f"{k}={getattr(self, k)} ({v})" for k, v in self.came_from.items())


# the names a size goes by in learners' files (module constants, config fields, `--size`)
SIZE_NAMES = {
    "d_model": ("d_model", "n_embd", "emb", "dim", "embed_dim", "hidden_size", "emb_dim", "n_embed", "embedding_dim",
                "d_embed", "model_dim", "num_hiddens", "hidden_dim_model", "emb_size", "embed_size", "n_embedding",
                "模型维度", "维度", "嵌入维度", "隐藏大小", "模型大小", "词向量维度"),
    "heads": ("heads", "n_head", "n_heads", "num_heads", "nhead", "num_attention_heads", "n_attn_heads", "h",
              "头数", "注意力头数", "多头数"),
    "d_ff": ("d_ff", "dff", "ffn_hidden", "ffn_dim", "d_inner", "intermediate_size", "ffn_num_hiddens", "d_hidden",
             "前馈维度", "隐藏维度", "中间维度"),
    "max_len": ("max_len", "block_size", "max_seq_len", "context_length", "seq_len", "max_position_embeddings",
                "n_positions", "context_size", "max_seq_length", "n_ctx", "最大长度", "序列长度", "上下文长度", "块大小"),
    "vocab": ("vocab", "vocab_size", "n_vocab", "ntoken", "num_tokens", "词表大小", "词汇量"),
    "layers": ("layers", "n_layer", "n_layers", "num_layers", "num_hidden_layers", "depth", "层数"),
    "kv_heads": ("kv_heads", "n_kv_heads", "num_kv_heads", "num_key_value_heads", "n_kv_head"),
}
_CONFIG_PARAM = re.compile(r"config|conf|cfg|args|params|hparams|hp|model_args|settings|opt", re.I)


def config_classes(module) -> list:
    """The learner's config classes: dataclasses (or plain classes with only simple class attributes)
    defined in their file whose name says config / args / params."""
    out = []
    for n, o in vars(module).items():
        if inspect.isclass(o) and getattr(o, "__module__", None) == module.__name__ \
                and not issubclass(o, torch.nn.Module) and (dataclasses.is_dataclass(o) or
                                                            re.search(r"config|args|param|hparam|setting", n, re.I)):
            out.append(o)
    return out


def make_config(cls, sizes: "Sizes | None" = None):
    """An instance of the learner's config class with its defaults (or our sizes for fields it needs),
    every dropout set to 0 (the checks compare in eval)."""
    kw = {}
    if dataclasses.is_dataclass(cls):
        for fl in dataclasses.fields(cls):
            if fl.default is dataclasses.MISSING and fl.default_factory is dataclasses.MISSING:
                v = _size_by_name(fl.name, sizes or Sizes())
                if v is None:
                    return None
                kw[fl.name] = v
    else:  # a plain class (minGPT's GPTConfig(vocab_size, block_size, **kwargs)): its required sizes by name
        try:
            params = inspect.signature(cls).parameters.values()
        except (TypeError, ValueError):
            params = []
        for p in params:
            if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                v = _size_by_name(p.name, sizes or Sizes())
                if v is None:
                    return None
                kw[p.name] = v
    try:
        cfg = cls(**kw)
    except Exception:
        return None
    for n in list(vars(cfg)) + [n for n in vars(cls) if not n.startswith("_")]:
        try:
            v = getattr(cfg, n)
        except Exception:
            continue
        if "drop" in n.lower() and isinstance(v, float):
            try:
                setattr(cfg, n, 0.0)
            except Exception:
                pass
    return cfg


def _global_size(name: str) -> bool:
    """A size every component must share (d_model, heads, ...), so the checker passes its own value."""
    n = name.lower()
    if n in ("hidden", "hidden_dim", "d_hidden", "hidden_size_ff"):
        return False  # a feed-forward's width as often as the model's: their default wins
    return any(n in SIZE_NAMES[s] for s in ("d_model", "heads", "kv_heads", "max_len", "vocab")) \
        or n in _D_MODEL or n in ("head_size", "head_dim", "d_head", "d_k", "dk", "dim_head", "hs", "d_v")


def _size_by_name(name: str, sizes: "Sizes"):
    n = name.lower()
    for size, names in SIZE_NAMES.items():
        if n in names:
            return getattr(sizes, size)
    return None


def _read(obj_vars: dict, where: str, sizes: "Sizes"):
    for size, names in SIZE_NAMES.items():
        for n, v in obj_vars.items():
            if n.lower() in names and isinstance(v, int) and not isinstance(v, bool) and v > 0:
                setattr(sizes, size, v)
                sizes.came_from[size] = f"{n} = {v} {where}"
                break


def passed_sizes(source: str) -> dict:
    """(class name, parameter) -> size, for a parameter without a default that the file's own call sites
    fill from a size: `TransformerBlock(k=emb)` in a constructor whose `emb` is d_model makes the block's
    `k` d_model, and `SelfAttention(k, ...)` inside that block's constructor makes the attention's `k` d_model."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return {}
    inits = {}  # class -> (its __init__'s parameter names, the node)
    for c in tree.body:
        if isinstance(c, ast.ClassDef):
            for fn in c.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == "__init__":
                    inits[c.name] = ([a.arg for a in fn.args.args[1:]] + [a.arg for a in fn.args.kwonlyargs], fn)
    edges = {}  # (callee, parameter) -> [(caller, the name passed)]
    flags = {}  # (callee, parameter) -> {the literal True / False passed}
    for caller, (_, fn) in inits.items():
        for node in ast.walk(fn):
            if not isinstance(node, ast.Call):
                continue
            callee = node.func.id if isinstance(node.func, ast.Name) else None
            if callee not in inits:
                continue
            names = inits[callee][0]
            pairs = list(zip(names, node.args)) + [(k.arg, k.value) for k in node.keywords if k.arg]
            for param, expr in pairs:
                if isinstance(expr, ast.Constant) and isinstance(expr.value, bool):
                    flags.setdefault((callee, param), set()).add(expr.value)
                if isinstance(expr, ast.Name):
                    edges.setdefault((callee, param), []).append((caller, expr.id))

    def size_of(cls, param, depth=0):
        if depth > 6:
            return None
        for caller, name in edges.get((cls, param), []):
            size = next((sz for sz, names in SIZE_NAMES.items() if name.lower() in names), None)
            if size is None and name in inits[caller][0]:
                size = size_of(caller, name, depth + 1)
            if size is not None:
                return size
        return None
    def flag_of(cls, param, depth=0):
        """The one True/False every call site passes (through the callers' own parameters), else None."""
        seen = set(flags.get((cls, param), ()))
        for caller, name in edges.get((cls, param), []):
            v = flag_of(caller, name, depth + 1) if depth < 6 and name in inits[caller][0] else None
            if v is None:
                return None
            seen.add(v)
        return next(iter(seen)) if len(seen) == 1 else None
    sizes = {k: v for k in edges if (v := size_of(*k)) is not None}
    return sizes, {k: v for k in set(flags) | set(edges) if (v := flag_of(*k)) is not None}


def learner_sizes(module, source: str = "", overrides: dict | None = None) -> "Sizes":
    """The sizes from the learner's own code, later ones winning: module-level constants (`n_embd = 64`),
    a config class built with its defaults (`GPTConfig()`, `ModelArgs()`), `# check: name=value`
    comments, then `--size name=value` (`overrides`). Unfixed sizes keep the tiny defaults."""
    sizes = Sizes()
    sizes.passed, sizes.flags = passed_sizes(source)
    consts = {n: v for n, v in vars(module).items()
              if not n.startswith("_") and isinstance(v, (int, float)) and not isinstance(v, bool)}
    sizes.consts = consts
    for n, v in consts.items():  # their module-level dropout: 0 while checking (eval compares exact numbers)
        if "drop" in n.lower() and isinstance(v, float):
            setattr(module, n, 0.0)
            consts[n] = 0.0
    _read(consts, "in your file", sizes)
    for cls in [o for o in vars(module).values() if inspect.isclass(o) and issubclass(o, torch.nn.Module)
                and getattr(o, "__module__", None) == module.__name__]:
        try:  # constructor defaults (`def __init__(self, d_model=64, n_heads=4)`): the learner's sizes too
            params = inspect.signature(cls).parameters.values()
        except (TypeError, ValueError):
            continue
        for p in params:
            size = next((s for s, names in SIZE_NAMES.items() if p.name.lower() in names), None)
            if size and size not in sizes.came_from and isinstance(p.default, int) and not isinstance(p.default, bool) \
                    and p.default > 0:
                setattr(sizes, size, p.default)
                sizes.came_from[size] = f"{p.name}={p.default} in {cls.__name__}()"
    for cls in config_classes(module):
        cfg = make_config(cls, sizes)
        if cfg is None:
            continue
        fields = {n: getattr(cfg, n) for n in dir(cfg) if not n.startswith("_")}
        _read({n: v for n, v in fields.items() if not callable(v)}, f"in {cls.__name__}()", sizes)
        sizes.config = cfg
        break
    comments = {m.group(1): m.group(2) for m in re.finditer(r"#\s*check:\s*(\w+)\s*=\s*(\d+)", source)}
    for how, m in (("# check:", comments), ("--size", overrides or {})):
        for name, v in m.items():
            size = next((s for s, names in SIZE_NAMES.items() if name.lower() in names or name == s), None)
            if size is None:
                raise ValueError(f"{how} {name}={v}: {name!r} is not a size; use one of "
                                 + ", ".join(SIZE_NAMES))
            try:
                iv = int(v)
            except ValueError:
                raise ValueError(f"{how} {name}={v}: give a whole number") from None
            if iv <= 0:
                raise ValueError(f"{how} {name}={v}: give a positive number")
            setattr(sizes, size, iv)
            sizes.came_from[size] = f"{name}={iv} from {how}"
            for n in SIZE_NAMES[size]:  # their code reads the constant or the config field: change it there
                if n in consts:
                    setattr(module, n, iv)
                    consts[n] = iv
                if sizes.config is not None and hasattr(sizes.config, n):
                    try:
                        setattr(sizes.config, n, iv)
                    except Exception:
                        pass
    if sizes.d_model % sizes.heads:
        raise ValueError(f"d_model {sizes.d_model} is not a multiple of heads {sizes.heads}; "
                         f"give --size d_model=... heads=... that divide")
    if sizes.config is not None:  # the fallback sizes into the config's own fields where it had none
        for size, names in SIZE_NAMES.items():
            for n in names:
                if hasattr(sizes.config, n) and getattr(sizes.config, n) is None and size not in ("kv_heads", "d_ff"):
                    try:
                        setattr(sizes.config, n, getattr(sizes, size))
                    except Exception:
                        pass
    return sizes


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
            and not re.search(r"rotary|rope|embed|norm|config|head|mlp|cache", n):
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
_D_MODEL = {"d_model", "num_hiddens", "size", "embed_dim", "hidden_size", "dim", "d", "model_dim", "features",
            "norm_shape", "ffn_num_outputs", "n_embd", "emb_dim", "embedding_dim", "d_embed", "hidden",
            "normalized_shape", "n_features", "ndim", "n_embed", "in_features", "in_dim", "input_dim",
            "模型维度", "维度", "嵌入维度", "隐藏大小", "num_features", "d_k_total", "model_size", "embed_size", "d_hid"}
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
