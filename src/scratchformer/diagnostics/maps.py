"""Attention maps of one text, as plain tensors and token strings.

An `AttentionView` is one kind of attention in a model (encoder self-attention, decoder
self-attention, cross-attention) for one input: per layer a tensor `(H, Tq, Tk)` whose row q
is the distribution of query token q over the key tokens (rows sum to 1). Everything in this
package that draws or prints maps works on views, whatever task produced them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..errors import UserError


def shown(token: str) -> str:
    """A token as a label: whitespace made visible (a space is an empty label otherwise)."""
    if token.strip():
        return token
    return "".join({" ": "\u2423", "\n": "\u21b5", "\t": "\u21e5"}.get(c, "\u2423") for c in token) or "\u2205"


@dataclass
class AttentionView:
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


def select_views(result: AttentionResult, wanted: str | None) -> list[AttentionView]:
    """`wanted`: None (all), or a word naming views ('encoder', 'decoder', 'cross', 'self')."""
    if not wanted:
        return result.views
    chosen = [v for v in result.views if wanted.lower() in v.name.lower()]
    if not chosen:
        raise UserError(f"no {wanted!r} attention in this run; it has: {', '.join(v.name for v in result.views)}")
    return chosen


def top_k(view: AttentionView, k: int) -> list[dict]:
    """For every layer, head (and 'mean'), and query token: its k most attended key tokens.

    One row per (layer, head, query): `{"layer", "head", "query", "query_token", "top": [[key
    position, key token, weight], ...]}`; layers and heads count from 1, head "mean" is the
    head average."""
    if k < 1:
        raise UserError(f"--top must be >= 1, got {k}")
    rows = []
    for li, w in enumerate(view.layers):
        heads = [(str(h + 1), w[h]) for h in range(w.shape[0])] + [("mean", w.mean(0))]
        for head, m in heads:
            vals, idx = m.topk(min(k, m.shape[-1]), dim=-1)  # (Tq, k)
            for q in range(m.shape[0]):
                rows.append({"layer": li + 1, "head": head, "query": q, "query_token": view.query_tokens[q],
                             "top": [[int(j), view.key_tokens[int(j)], round(float(v), 4)]
                                     for v, j in zip(vals[q], idx[q])]})
    return rows


def format_top_k(view: AttentionView, k: int, heads: str = "all") -> str:
    """The `top_k` table as text: one block per layer and head, one line per query token."""
    lines = [f"{view.name}: top {k} attended tokens ({view.note or 'rows: queries, columns: keys'})"]
    current = None
    for row in top_k(view, k):
        if heads == "mean" and row["head"] != "mean":
            continue
        if (row["layer"], row["head"]) != current:
            current = (row["layer"], row["head"])
            head = "mean of heads" if row["head"] == "mean" else f"head {row['head']}"
            lines.append(f"  layer {row['layer']} {head}")
        tops = "  ".join(f"{tok}({pos}) {w:.2f}" for pos, tok, w in row["top"])
        lines.append(f"    {row['query_token']}({row['query']}) -> {tops}")
    return "\n".join(lines)


def result_to_json(result: AttentionResult, k: int | None = None) -> dict:
    """Everything needed to redraw the maps (weights rounded to 4 decimals); with `k`, the
    top-k table too."""
    out = {"text": result.text, "task": result.task, "output": result.output, "views": []}
    for v in result.views:
        d = {"name": v.name, "note": v.note, "query_tokens": v.query_tokens, "key_tokens": v.key_tokens,
             "layers": [[[[round(float(x), 4) for x in row] for row in head] for head in w.tolist()]
                        for w in v.layers]}
        if k:
            d["top"] = top_k(v, k)
        out["views"].append(d)
    return out
