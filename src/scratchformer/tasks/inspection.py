"""What a task's `inspect.py` slot hands to `attention` and `doctor`, in task-free terms.

Each task package that can be inspected has an `inspect.py` with `load(run_dir)`, returning an
object with two methods (the protocol, `scratchformer.diagnostics.inspection.Inspector`):

    attention(text) -> AttentionResult          the attention views of one text
    subject(data, split, n) -> Subject          what `doctor` examines: sample batches, their
                                                loss and attention, the embeddings as trained
                                                and as initialised

This module holds the records they return and the helpers every task's slot shares. It sits in
`tasks/` (beside runs.py), below `diagnostics/`, so a task never imports the layer above it.
"""
from __future__ import annotations

import contextlib
import inspect
import random
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import torch

from ..data.specials import PAD_ID
from ..errors import UserError
from ..nn import MultiHeadAttention

ENC, DEC, CROSS = "encoder self-attention", "decoder self-attention", "cross-attention"
BATCH = 32  # samples per batch of a Subject


# ------------------------------------------------------------------------ the records

def shown(token: str) -> str:
    """A token as a label: whitespace made visible (a space is an empty label otherwise)."""
    if token.strip():
        return token
    return "".join({" ": "\u2423", "\n": "\u21b5", "\t": "\u21e5"}.get(c, "\u2423") for c in token) or "\u2205"


@dataclass
class AttentionView:
    """One kind of attention in a model (encoder self-, decoder self-, cross-attention) for one
    input: per layer a tensor `(H, Tq, Tk)` whose row q is the distribution of query token q over
    the key tokens (rows sum to 1)."""

    name: str  # e.g. "encoder self-attention"
    query_tokens: list[str]
    key_tokens: list[str]
    layers: list[torch.Tensor]  # per layer (H, Tq, Tk)
    note: str = ""  # e.g. "rows: output tokens, columns: source tokens"

    def __post_init__(self) -> None:
        self.query_tokens = [shown(t) for t in self.query_tokens]
        self.key_tokens = [shown(t) for t in self.key_tokens]
        self.layers = [w.detach().float().cpu() for w in self.layers]
        for i, w in enumerate(self.layers):
            if w.dim() != 3 or w.shape[1:] != (len(self.query_tokens), len(self.key_tokens)):
                raise ValueError(f"layer {i}: weights {tuple(w.shape)} do not match "
                                 f"{len(self.query_tokens)} query x {len(self.key_tokens)} key tokens")

    @property
    def n_layers(self) -> int:
        return len(self.layers)

    @property
    def n_heads(self) -> int:
        return self.layers[0].shape[0] if self.layers else 0

    def mean_of_heads(self, layer: int) -> torch.Tensor:
        """`(Tq, Tk)`: the head-averaged map of one layer."""
        return self.layers[layer].mean(0)

    def slug(self) -> str:
        return self.name.replace("-attention", "").replace(" ", "_")


@dataclass
class AttentionResult:
    """The views of one text through one run (and, for translation, the output)."""

    text: str
    views: list[AttentionView]
    output: str | None = None  # e.g. the translation whose decoder attention is shown
    task: str = ""
    extra: dict = field(default_factory=dict)


@dataclass
class AttentionBatch:
    """One kind of attention over a batch of samples.

    layers: per layer `(B, H, Tq, Tk)` probabilities. Masks are True where the position is a
    real token; `key_kinds` maps a special token's name (e.g. '<cls>', '[SEP]') to the
    `(B, Tk)` positions holding it. `self_attention`: queries and keys are the same positions
    (so distances and the diagonal mean something). `causal`: key j > query i is blocked."""

    name: str
    layers: list[torch.Tensor]
    query_real: torch.Tensor  # (B, Tq) bool
    key_real: torch.Tensor  # (B, Tk) bool
    key_kinds: dict[str, torch.Tensor] = field(default_factory=dict)
    self_attention: bool = True
    causal: bool = False


@dataclass
class EmbeddingTable:
    """An input embedding, as trained and as it was at initialisation (rebuilt from the seed).

    train_counts: `(V,)` how often each row's id occurs in the training batches the weights had
    seen when they were saved (None when not known). data_counts: `(V,)` how often it occurs in
    the whole training data (a token can occur there and still come after the saved step).
    special: ids of special tokens, which are allowed to go unused."""

    name: str
    weight: torch.Tensor  # (V, C)
    initial: torch.Tensor | None  # (V, C)
    train_counts: torch.Tensor | None = None
    token: Callable[[int], str] = str
    special: set[int] = field(default_factory=set)
    hashed: bool = False  # rows are hash buckets (bigrams): unused rows are expected
    data_counts: torch.Tensor | None = None
    saved_step: int | None = None  # the optimizer step of the weights, when they say
    token_dropout: float = 0.0  # training turned this share of the tokens into <unk> (their rows got nothing)


@dataclass
class Subject:
    """A trained model, a few real batches of its data, and how to read them."""

    run_dir: Path
    task: str
    model: torch.nn.Module
    batches: list[Any]
    loss: Callable[[Any], torch.Tensor]  # mean loss of one batch (a scalar tensor)
    attention: Callable[[Any], list[AttentionBatch]]
    input_ids: Callable[[Any], list[torch.Tensor]]  # id tensors whose <unk> share is measured
    heads: dict[str, list[torch.nn.Module]]  # view name -> its MultiHeadAttention per layer
    embeddings: list[EmbeddingTable] = field(default_factory=list)
    pad_id: int = 0
    unk_id: int = 1
    n_samples: int = 0
    data_name: str = ""
    notes: list[str] = field(default_factory=list)  # e.g. "an ensemble: member 0 is examined"


# ------------------------------------------------------------------------ reading a model

class Captured:
    weights: list[torch.Tensor] | None = None


@contextlib.contextmanager
def attention_of(stack: torch.nn.Module):
    """`with attention_of(model.encoder) as got: model(ids)` runs the model as it is, while the
    stack (our `Encoder` or `Decoder`) is made to return its per-layer weights, which are kept in
    `got.weights` and stripped from its output, so the model never sees them. No model code needs
    a `need_weights` path of its own."""
    got = Captured()
    at = list(inspect.signature(stack.forward).parameters).index("need_weights")  # position after self

    def ask(_module, args, kwargs):
        if len(args) > at:
            args = args[:at] + (True,) + args[at + 1:]
        else:
            kwargs = {**kwargs, "need_weights": True}
        return args, kwargs

    def strip(_module, _args, _kwargs, out):
        out, got.weights = out
        return out

    handles = [stack.register_forward_pre_hook(ask, with_kwargs=True),
               stack.register_forward_hook(strip, with_kwargs=True)]
    try:
        yield got
    finally:
        for h in handles:
            h.remove()


def attention_modules(model: torch.nn.Module) -> dict[str, list[MultiHeadAttention]]:
    """Every MultiHeadAttention of a model, by kind, in layer order."""
    out: dict[str, list] = {ENC: [], DEC: [], CROSS: []}
    for name, m in model.named_modules():
        if isinstance(m, MultiHeadAttention):
            kind = CROSS if "cross_attn" in name else DEC if "decoder." in name else ENC
            out[kind].append(m)
    return {k: v for k, v in out.items() if v}


def special_kinds(ids: torch.Tensor, specials: dict[int, str]) -> dict[str, torch.Tensor]:
    """{name: (B, T) positions holding that special token} for the specials present."""
    out = {}
    for i, name in specials.items():
        pos = ids == i
        if bool(pos.any()):
            out[name] = pos
    return out


def encoder_views(weights: list[torch.Tensor], real: torch.Tensor, kinds: dict, name: str = ENC,
                  causal: bool = False) -> AttentionBatch:
    return AttentionBatch(name, weights, real, real, kinds, self_attention=True, causal=causal)


def initial_copy(model: torch.nn.Module, cfg, seed: int) -> torch.nn.Module:
    """The model as it was before training: the pipelines seed torch right before building it."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return type(model)(cfg)


# ------------------------------------------------------------------------ samples

def pad(rows: list[list[int]]) -> torch.Tensor:
    T = max(len(r) for r in rows)
    return torch.tensor([r + [PAD_ID] * (T - len(r)) for r in rows])  # (B, T)


def sample(items: list, n: int) -> list:
    """A seeded random sample, in a fixed order, so reports are reproducible."""
    if not items:
        raise UserError("no samples: the chosen split or file is empty")
    return random.Random(0).sample(items, min(n, len(items)))


def chunks(items: list, size: int = BATCH) -> list[list]:
    return [items[i:i + size] for i in range(0, len(items), size)]


# ------------------------------------------------------------------------ what the weights have seen

def counts(id_lists: Iterable[Iterable[int]], size: int) -> torch.Tensor:
    """`(size,)`: how often each id occurs in `id_lists` (lists of ints or id tensors)."""
    out = torch.zeros(size, dtype=torch.long)
    for ids in id_lists:
        t = torch.as_tensor(ids if isinstance(ids, torch.Tensor) else list(ids), dtype=torch.long).flatten()
        t = t[(t >= 0) & (t < size)]
        out += torch.bincount(t, minlength=size)
    return out


def trained_position(weights: Path) -> tuple[int, int, int] | None:
    """(step, epoch, batch_in_epoch) at which the Trainer saved `weights`: every batch of the
    epochs before `epoch` and the first `batch_in_epoch` of it had been trained on. None for
    weights that do not say (written by an older version, or averaged)."""
    from ..train.checkpoint import read_weights_metadata

    meta = read_weights_metadata(weights)
    try:
        return int(meta["step"]), int(meta["epoch"]), int(meta["batch_in_epoch"])
    except (KeyError, ValueError):
        return None


def batches_seen(batches: Callable[[int], Iterable], epoch: int, within: int) -> Iterator:
    """The training batches before (epoch, within), replayed from `batches(epoch)` (the same
    batches for the same epoch every time: the Trainer's resume contract)."""
    for e in range(epoch):
        yield from batches(e)
    yield from islice(iter(batches(epoch)), within)


@dataclass
class Seen:
    """Per embedding table: id counts in the batches the saved weights were trained on, and in
    the whole training data; `step` is the weights' optimizer step (None: not recorded)."""

    counts: list[torch.Tensor]
    data: list[torch.Tensor]
    step: int | None


def seen_counts(weights: Path, batches: Callable[[int], Iterable], ids_of: Callable[[Any], list[torch.Tensor]],
                sizes: list[int], whole: Callable[[], list[torch.Tensor]], notes: list[str]) -> Seen:
    """How often each id occurs in the training batches `weights` had seen, so that a row whose
    token first comes after the saved step is not taken for a row that never trains.

    `ids_of(batch)`: one id tensor per table; `whole()`: one id tensor per table over the whole
    training data. Weights that do not record their position are judged against the whole
    training data, with a note."""
    data = [counts([ids], n) for ids, n in zip(whole(), sizes)]
    position = trained_position(weights)
    if position is None:
        notes.append(f"{weights.name} does not record the step it was saved at: embedding rows are "
                     "compared with the whole training data")
        return Seen(data, data, None)
    step, epoch, within = position
    out = [torch.zeros(n, dtype=torch.long) for n in sizes]
    for b in batches_seen(batches, epoch, within):
        for i, ids in enumerate(ids_of(b)):
            out[i] += counts([ids], sizes[i])
    return Seen(out, data, step)
