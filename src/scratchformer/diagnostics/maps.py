"""Attention maps of one text: choosing views, the top-K table, the JSON form.

An `AttentionView` (tasks/inspection.py, what a task's inspect slot returns) is one kind of
attention in a model (encoder self-attention, decoder self-attention, cross-attention) for one
input: per layer a tensor `(H, Tq, Tk)` whose row q is the distribution of query token q over the
key tokens (rows sum to 1). Everything in this package that draws or prints maps works on views,
whatever task produced them.
"""
from __future__ import annotations

from ..errors import UserError
from ..tasks.inspection import AttentionResult, AttentionView, shown

__all__ = ["AttentionResult", "AttentionView", "format_top_k", "result_to_json", "select_views", "shown", "top_k"]


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
