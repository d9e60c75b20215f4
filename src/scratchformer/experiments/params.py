"""`scratchformer params`: parameters per component, counted and in closed form side by side.

Counted: the tensors of a run's `model.safetensors` (names and shapes; any task), grouped by
name. Closed form, from the recipe (`config.json`), with d = d_model, f = d_ff, L = layers,
b = 1 with biases (0 without), per encoder layer:
  attention  W_Q, W_K, W_V, W_O and biases: 4·d² + 4·d   (grouped-query: 2·d² + 2·d·k·h_d + ...)
  FFN        W_1 (d×f), W_2 (f×d) and biases: 2·d·f + f + d   (SwiGLU: W_1 is d×2f: 3·d·f + 2·f + d)
  norms      2 LayerNorms of gain + offset: 2·2·d   (RMSNorm: gain only)
plus token embeddings V·d (+ hashed bigrams, + a learned position table) and the head.
An LSTM classifier (`model.kind=lstm`) has, instead of the encoder layers, per layer and
direction 4 gates of h = d/2 units over an input of d features, with torch's two biases:
  recurrence 2·4·h·(d + h + 2) per layer
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from ..errors import UserError
from ..tasks.runs import refuse_wrong_kind
from ..models.param_terms import Term  # noqa: F401  (the row type callers read)

COMPONENTS = ("embeddings", "attention", "cross-attention", "ffn", "recurrence", "norms", "head", "other")


# the first part of an embedding tensor's name in our models (one is `embed`, which is also a
# task's name: a tensor's, here)
_EMBEDDING_TENSORS = ("embed", "src_embed", "tgt_embed", "embeddings")


def component_of(name: str) -> str:
    """Which component a tensor of our models belongs to, by its name."""
    parts = name.split(".")
    if "cross_attn" in parts:
        return "cross-attention"
    if parts[0] == "attention":  # the LSTM translator's additive attention over the source
        return "cross-attention"
    if "self_attn" in parts or "attention" in parts:
        return "attention"
    if "ffn" in parts:
        return "ffn"
    if parts[0] in ("lstm", "init_state") or (parts[0] in ("encoder", "decoder") and len(parts) == 2
                                              and parts[1].startswith(("weight_", "bias_"))):
        return "recurrence"  # nn.LSTM tensors (weight_ih_l0, ...) and the LSTM decoder's initial state
    if any(p.startswith(("norm", "ln", "layernorm", "LayerNorm")) for p in parts):
        return "norms"
    if parts[0] in _EMBEDDING_TENSORS:
        return "embeddings"
    if parts[0] in ("head", "out_proj", "lm_head"):
        return "head"
    return "other"


def count_tensors(shapes: dict[str, list[int]]) -> dict[str, int]:
    counts = dict.fromkeys(COMPONENTS, 0)
    for name, shape in shapes.items():
        counts[component_of(name)] += math.prod(shape)
    return counts


def shapes_of(path: Path) -> dict[str, list[int]]:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        return {k: list(f.get_slice(k).get_shape()) for k in f.keys()}


def closed_form(recipe: dict) -> dict[str, Term]:
    """Closed-form parameter counts of a run's config.json (or a recipe), from its task's face
    (the `params` slot; models/param_terms.py holds the terms they are written with)."""
    from ..tasks.faces import face, having

    task = recipe.get("task")
    f = face(task) if isinstance(task, str) else None
    if f is None or not f.params:
        raise UserError(f"params: task {task!r} has no closed form; the recipe needs task "
                        f"{' or '.join(having('params'))}")
    return f.params(recipe)


def checkpoint_weights(run: Path) -> Path | None:
    from ..train.checkpoint_store import CheckpointStore, has_checkpoint

    return CheckpointStore(run).latest().weights if has_checkpoint(run) else None


def params_table(run_or_config: Path, task: str | None = None) -> tuple[list[tuple[str, int | None, Term | None]], str]:
    """Rows (component, counted, closed form) and a one-line note on what was read."""
    path = Path(run_or_config)
    if path.is_dir():
        cfg_path, weights = path / "config.json", path / "model.safetensors"
        if not weights.exists():  # an unfinished run: its latest checkpoint
            weights = checkpoint_weights(path) or weights
        if not weights.exists() and (path / "members.json").exists():
            raise UserError(f"{path} is an ensemble: its members are the models; count one of them, "
                            f"e.g. `scratchformer params {path / 'member0'}`")
        if not cfg_path.exists() or not weights.exists():
            raise UserError(f"{path} is not a finished run (config.json and model.safetensors needed)")
        recipe = json.loads(cfg_path.read_text(encoding="utf-8"))
        counted = count_tensors(shapes_of(weights))
        note = f"counted: the tensors of {weights}; closed form: {cfg_path}"
    else:
        try:
            recipe = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UserError(f"{path} does not exist; pass a run folder or --config RECIPE.json") from None
        except json.JSONDecodeError as e:
            raise UserError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
        except (UnicodeDecodeError, IsADirectoryError):
            raise UserError(f"{path} is not a JSON recipe file; pass a run folder or --config RECIPE.json") from None
        if not isinstance(recipe, dict):
            raise UserError(f"{path}: expected a JSON object of recipe sections (as `train --config`), "
                            f"found {type(recipe).__name__}")
        refuse_wrong_kind(recipe, path, "recipe")
        recipe.setdefault("task", task or "classify")
        counted = None
        note = (f"closed form only ({path} is a recipe: the vocabulary size comes from the tokenizer, "
                "so V is taken from the recipe and is 0 when not set); train a run to count its tensors")
    try:
        terms = closed_form(recipe)
    except UserError:
        if counted is None:
            raise
        terms = {}
    names = [c for c in COMPONENTS if (counted and counted[c]) or c in terms]
    rows = [(c, counted[c] if counted else None, terms.get(c)) for c in names]
    total_counted = sum(counted.values()) if counted else None
    total_closed = sum(t.value for t in terms.values()) if terms else None
    rows.append(("total", total_counted, Term(total_closed, "") if total_closed is not None else None))
    return rows, note


def format_params(rows, note: str) -> str:
    total = next((r[1] for r in rows if r[0] == "total"), None) or next(
        (r[2].value for r in rows if r[0] == "total" and r[2]), 0)
    lines = [f"{'component':<16}{'counted':>12}{'closed form':>14}{'share':>8}  formula"]
    for name, counted, term in rows:
        shown = counted if counted is not None else (term.value if term else 0)
        share = f"{100 * shown / total:.1f}%" if total else ""
        lines.append(f"{name:<16}{'' if counted is None else f'{counted:,}':>12}"
                     f"{'' if term is None else f'{term.value:,}':>14}{share:>8}  {term.formula if term else ''}")
    return "\n".join(lines) + f"\n{note}"
