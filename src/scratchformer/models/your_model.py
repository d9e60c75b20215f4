"""The learner's own model in the network slot of our tasks (`train classify|lm --model FILE.py[:Name]`).

你自己写的模型放进我们的任务：我们的分词、数据、训练器、运行目录，你的网络。

What is needed to run someone else's module as ours is decided once, when the run starts, and written into the
run's config.json (`YourModelConfig`), so that every later load (resume, evaluate, predict, serve) builds and
calls it the same way without looking again:

- how it is built: their constructor's arguments as their own program passed them (check/calling.py watches
  it), with the sizes we own put in place: the vocabulary (our tokenizer's), the classes (our labels), the
  context (at least ours). A size is found by its name (`vocab_size`, `n_vocab`, `num_classes`,
  `block_size`, ...), else by its value (the one argument equal to the size of their token table);
- how it is called (`call`): the token ids first; a mask where their forward takes one, in their convention.
  The convention is read from behaviour, not from names: each candidate form (shape, dtype, True = keep or
  True = padding, additive) is tried on a batch whose second row ends in padding, and the form under which
  the padded positions' contents move that row's output the least is theirs (the inverted form lets the real
  tokens read only the padding);
- what it returns (`output`): logits, `(logits, loss)` (the first tensor), or hidden states, which our head
  reads (`head`: masked mean over tokens for a classifier, then a linear layer);
- a model that takes embeddings (B, T, C) instead of ids gets our embeddings in front (`front`).
"""
from __future__ import annotations

import contextlib
import inspect
import re
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from ..config import JsonConfig
from ..errors import UserError
from .your_source import free_globals, load_definitions, read_globals, read_source

SOURCE_NAME = "your_model.py"
VOCAB = re.compile(r"vocab|^n_?tokens?$|^ntokens?$|^num_tokens$|^n_?words$|num_embeddings", re.I)
CLASSES = re.compile(r"class|label|^n_?out|^num_?out|^output_?(dim|size)$|^n_?cls$|categor|^n_?targets$", re.I)
LENGTH = re.compile(r"max_?len|max_?seq|block_?size|context|seq_?len|n_?positions|max_?position|n_?ctx|"
                    r"max_?length|maxlen|^t$", re.I)
MASK = re.compile(r"mask|pad", re.I)
TARGETS = re.compile(r"^(targets?|labels?|y|tgt_ids|target_ids)$", re.I)
NEG = -1e9


@dataclass
class YourModelConfig(JsonConfig):
    source: str = SOURCE_NAME      # their file, copied into the run folder
    sha256: str = ""               # of that copy: a changed file is refused
    origin: str = ""               # where it was copied from (for the reader; never read again)
    entry: str = ""                # their model class, or a function that builds it
    kwargs: dict = field(default_factory=dict)    # its constructor's arguments (a config object tagged)
    overrides: dict = field(default_factory=dict)  # globals their classes read that only their script sets
    call: dict = field(default_factory=dict)      # how it is called (module docstring)
    front: int = 0                 # width of our embeddings in front (0: their model takes ids)
    head: int = 0                  # width of their output that our head reads (0: it returns logits)
    max_len: int | None = None     # the context their model was built for (a learned table's rows)
    notes: list = field(default_factory=list)     # what was decided for them, said once in the run's log


# --- building -------------------------------------------------------------------------------------------------
def _decode(v, module):
    if isinstance(v, list):
        return [_decode(x, module) for x in v]
    if isinstance(v, dict) and "__config__" in v:
        cls = getattr(module, v["__config__"], None)
        if cls is None:
            raise UserError(f"your model file no longer defines {v['__config__']}")
        fields = {k: _decode(x, module) for k, x in v["fields"].items()}
        try:
            return cls(**fields)
        except TypeError:  # a plain holder whose __init__ takes other arguments
            obj = cls.__new__(cls)
            vars(obj).update(fields)
            return obj
    if isinstance(v, dict) and "__device__" in v:
        return torch.device("cpu")
    if isinstance(v, dict) and "__dtype__" in v:
        return getattr(torch, v["__dtype__"])
    if isinstance(v, dict):
        return {k: _decode(x, module) for k, x in v.items()}
    return v


def build_net(cfg: YourModelConfig, folder: Path) -> nn.Module:
    """Their model, built from the run's copy of their file (its sha256 checked)."""
    path = Path(folder) / cfg.source
    module = load_definitions(path, read_source(path, cfg.sha256), cfg.overrides)
    entry = getattr(module, cfg.entry, None)
    if entry is None:
        raise UserError(f"{path} defines no {cfg.entry!r}; name the model class with --model FILE.py:Name")
    args, kwargs = [], {}
    try:
        params = inspect.signature(entry).parameters
    except (TypeError, ValueError):
        params = {}
    for k, v in cfg.kwargs.items():
        v = _decode(v, module)
        kind = params[k].kind if k in params else None
        if kind == inspect.Parameter.VAR_POSITIONAL:
            args.extend(v)
        elif kind == inspect.Parameter.VAR_KEYWORD:
            kwargs.update(v)
        else:
            kwargs[k] = v
    try:
        net = entry(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - their constructor: the one line says which
        raise UserError(f"building {cfg.entry}({', '.join(f'{k}={v!r}' for k, v in cfg.kwargs.items())}) from "
                        f"{path.name} raised {type(e).__name__}: {e}") from None
    if not isinstance(net, nn.Module):
        raise UserError(f"{cfg.entry} in {path.name} returned a {type(net).__name__}, not a torch nn.Module")
    return net


# --- calling --------------------------------------------------------------------------------------------------
def make_mask(form: dict, ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """The mask their forward takes, in their form, for `ids` (B, T)."""
    B, T = ids.shape
    if form["shape"] in ("TT", "11TT"):  # a causal mask their caller builds
        keep = torch.ones(T, T, dtype=torch.bool).tril()  # (T, T) True = may attend
        if form["shape"] == "11TT":
            keep = keep[None, None]  # (1, 1, T, T)
    else:
        keep = ids != pad_id  # (B, T) True = a real token
        keep = {"BT": keep, "B11T": keep[:, None, None, :], "B1T": keep[:, None, :],
                "BTT": keep[:, None, :].expand(B, T, T)}[form["shape"]]
    if form.get("additive"):
        return torch.zeros(keep.shape).masked_fill(~keep, form.get("fill", NEG))
    flag = keep if form["true"] == "keep" else ~keep
    return flag.to({"bool": torch.bool, "float": torch.float32, "long": torch.long, "int": torch.int32}[form["dtype"]])


def call_net(net: nn.Module, call: dict, x: torch.Tensor, ids: torch.Tensor, pad_id: int):
    """Their forward on `x` (ids, or our embeddings of them) in their calling convention; its chosen output."""
    kwargs = {call["ids"]: x}
    if call.get("mask"):
        kwargs[call["mask"]["param"]] = make_mask(call["mask"], ids, pad_id)
    if call.get("targets"):
        kwargs[call["targets"]] = ids  # only for models that return full logits when given targets; loss unused
    out = net(**kwargs)
    return pick_output(out, call.get("output", 0))


def pick_output(out, index: int):
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        out = out[index]
    if not isinstance(out, torch.Tensor):
        raise UserError(f"your model returned {type(out).__name__} where a tensor was expected")
    return out


def masked_mean(h: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """(B, T, C), (B, T) True = real -> (B, C)."""
    w = keep.to(h.dtype).unsqueeze(-1)  # (B, T, 1)
    return (h * w).sum(1) / w.sum(1).clamp(min=1.0)


class YourClassifier(nn.Module):
    """Their network inside our classifier: ids `(S, T)` -> logits `(n_docs, n_classes)` (segments pooled)."""

    def __init__(self, net: nn.Module, cfg: YourModelConfig, vocab_size: int, n_classes: int, pad_id: int = 0):
        super().__init__()
        self.net, self.cfg, self.pad_id = net, cfg, pad_id
        self.front = _front(cfg, vocab_size, pad_id)
        self.head = nn.Linear(cfg.head, n_classes) if cfg.head else None

    def features(self, ids, bigrams=None, need_weights: bool = False):
        """(their logits or pooled features `(S, C)`, the attention maps their forward computed (models/
        your_attention.py) when `need_weights`): what `attention` and `doctor` read."""
        from .your_attention import captured_attention

        x = self.front(ids) if self.front is not None else ids
        maps: list = []
        with captured_attention(*ids.shape) if need_weights else _nothing() as maps:
            out = call_net(self.net, self.cfg.call, x, ids, self.pad_id)
        if out.dim() == 3:  # per-token outputs (S, T, C): the mean over the real tokens
            out = masked_mean(out, ids != self.pad_id)  # (S, C)
        return (out, maps) if need_weights else out

    def forward(self, ids, bigrams=None, doc_index=None, n_docs=None):
        out = self.features(ids)
        if self.head is not None:
            out = self.head(out)  # (S, n_classes)
        if doc_index is not None:
            from .pooling import pool_segments
            out = pool_segments(out, doc_index, n_docs, "mean")  # (n_docs, n_classes)
        return out


class YourLM(nn.Module):
    """Their network inside our language model: ids `(B, T)` -> logits `(B, T, V)`; no cache (each new token
    runs the whole window again: their forward is what we have)."""

    supports_cache = False

    def __init__(self, net: nn.Module, cfg: YourModelConfig, vocab_size: int):
        super().__init__()
        self.net, self.cfg = net, cfg
        self.front = _front(cfg, vocab_size, 0)
        self.head = nn.Linear(cfg.head, vocab_size) if cfg.head else None

    @property
    def max_positions(self) -> int | None:
        return self.cfg.max_len

    def forward(self, ids, caches=None, need_weights: bool = False):
        from .your_attention import captured_attention

        x = self.front(ids) if self.front is not None else ids
        maps: list = []
        with captured_attention(*ids.shape) if need_weights else _nothing() as maps:
            out = call_net(self.net, self.cfg.call, x, ids, -1)
        out = self.head(out) if self.head is not None else out  # (B, T, V)
        return (out, maps) if need_weights else out


@contextlib.contextmanager
def _nothing():
    yield []


def _front(cfg: YourModelConfig, vocab_size: int, pad_id: int):
    if not cfg.front:
        return None
    from ..nn import TransformerConfig
    from .embedding import Embeddings
    d = cfg.front
    return Embeddings(vocab_size, TransformerConfig(d_model=d, n_heads=1, d_ff=d, position="sinusoidal"),
                      pad_id=max(pad_id, 0))


def build_yours(cfg: YourModelConfig, folder: Path, causal: bool, vocab_size: int, n_classes: int = 0,
                pad_id: int = 0) -> nn.Module:
    """A language model's (`causal`: logits at every position) or a classifier's adapter around their net."""
    net = build_net(cfg, folder)
    if causal:
        return YourLM(net, cfg, vocab_size)
    return YourClassifier(net, cfg, vocab_size, n_classes, pad_id)


def global_names(folder: Path, cfg: YourModelConfig) -> tuple[set[str], set[str]]:
    """(the globals their code reads that only their script sets, all the globals their code reads)."""
    source = read_source(Path(folder) / cfg.source, cfg.sha256)
    return free_globals(source), read_globals(source)
