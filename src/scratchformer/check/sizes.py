"""The sizes a learner's modules are built with, read from their own file: constructor defaults,
module constants (`n_embd = 64`), config classes (`GPTConfig()`, `ModelArgs()`), the arguments at
call sites, a `# check: d_model=64` comment, or `--size NAME=N`; each size says where it came from.
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
import re
from dataclasses import dataclass, field

import torch
from torch import nn


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
# the names tutorials give the model width (a constructor parameter, a constant, a config field)
_D_MODEL = {"d_model", "num_hiddens", "size", "embed_dim", "hidden_size", "dim", "d", "model_dim", "features",
            "norm_shape", "ffn_num_outputs", "n_embd", "emb_dim", "embedding_dim", "d_embed", "hidden",
            "normalized_shape", "n_features", "ndim", "n_embed", "in_features", "in_dim", "input_dim",
            "模型维度", "维度", "嵌入维度", "隐藏大小", "num_features", "d_k_total", "model_size", "embed_size", "d_hid",
            "hid", "hid_dim", "hid_size"}

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
