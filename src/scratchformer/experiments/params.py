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
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from ..tasks.runs import refuse_wrong_kind
from ..nn.config import TransformerConfig

COMPONENTS = ("embeddings", "attention", "cross-attention", "ffn", "recurrence", "norms", "head", "other")


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
    if parts[0] in ("embed", "src_embed", "tgt_embed", "embeddings"):
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


@dataclass
class Term:
    value: int
    formula: str


def _block_terms(t: TransformerConfig, L: int, cross: bool) -> dict[str, Term]:
    d, f, b = t.d_model, t.d_ff, int(t.bias)
    kvd = t.kv_heads * t.head_dim
    if kvd == d:
        attn, attn_f = 4 * d * d + b * 4 * d, "4·d² + 4·d" if b else "4·d²"
    else:
        attn = 2 * d * d + 2 * d * kvd + b * (2 * d + 2 * kvd)
        attn_f = "2·d² + 2·d·k·h_d" + (" + 2·d + 2·k·h_d" if b else "")
    n_in = 2 * f if t.activation == "swiglu" else f
    ffn = d * n_in + f * d + b * (n_in + d)
    ffn_f = ("3·d·f" if t.activation == "swiglu" else "2·d·f") + (
        (" + 2·f + d" if t.activation == "swiglu" else " + f + d") if b else "")
    per_norm = 0 if t.ablate_norm else d * (2 if t.norm == "layernorm" and b else 1)
    n_norms = 3 if cross else 2
    out = {"attention": Term(L * attn, f"L·({attn_f})"), "ffn": Term(L * ffn, f"L·({ffn_f})"),
           "norms": Term(L * n_norms * per_norm, f"L·{n_norms}·{_norm_f(per_norm, d)}")}
    if cross:
        out["cross-attention"] = Term(L * attn, f"L·({attn_f})")
    return out


def _norm_f(per_norm: int, d: int) -> str:
    return "2·d" if per_norm == 2 * d else "d" if per_norm else "0 (ablate_norm)"


def _add(terms: dict[str, Term], name: str, value: int, formula: str) -> None:
    if name in terms:
        terms[name] = Term(terms[name].value + value, f"{terms[name].formula} + {formula}")
    else:
        terms[name] = Term(value, formula)


def _embedding(t: TransformerConfig, vocab: int, extra: int, label: str) -> tuple[int, str]:
    value, formula = vocab * t.d_model + extra * t.d_model, f"{label}·d" + (" + buckets·d" if extra else "")
    if t.position == "learned":
        value, formula = value + t.max_len * t.d_model, formula + " + max_len·d"
    return value, formula


def closed_form(recipe: dict) -> dict[str, Term]:
    """Closed-form parameter counts of a classify / lm / translate recipe (a run's config.json)."""
    task, model = recipe.get("task"), recipe.get("model", {})
    if task in ("classify", "lm", "mlm"):
        if model.get("bert"):
            raise UserError("a BERT-backbone run: its layout is BERT's; only the counted column applies")
        # the stack's section is "encoder" in older recipes, "transformer" in newer ones
        t = TransformerConfig.from_dict(model.get("transformer") or model.get("encoder") or {})
        if model.get("kind") == "lstm":  # models/rnn.py: no positions, no norms
            t = t.replace(position="none", final_norm=False)
            h = t.d_model // 2
            terms = {"recurrence": Term(t.n_layers * 2 * 4 * h * (t.d_model + h + 2), "L·2·4·h·(d + h + 2), h = d/2")}
        else:
            terms = _block_terms(t, t.n_layers, cross=False)
        # hashed bigram and trigram tables: one row of d per bucket each
        value, formula = _embedding(t, model.get("vocab_size", 0),
                                    model.get("bigram_buckets", 0) + model.get("trigram_buckets", 0), "V")
        _add(terms, "embeddings", value, formula)
        if task == "classify":
            c = model.get("n_classes", 2)
            _add(terms, "head", t.d_model * c + c, "d·C + C")
        elif not model.get("tie_embeddings", True):
            _add(terms, "head", t.d_model * model.get("vocab_size", 0), "d·V")
        final = 1
    elif task == "translate" and model.get("kind") == "lstm":  # models/rnn_seq2seq.py: no positions, no norms
        t = TransformerConfig.from_dict(model.get("transformer", {})).replace(position="none", final_norm=False)
        d, h, L = t.d_model, t.d_model // 2, t.decoder_layers
        terms = {"recurrence": Term(t.n_layers * 2 * 4 * h * (d + h + 2) + 4 * d * (3 * d + 2)
                                    + (L - 1) * 4 * d * (2 * d + 2) + d * d + d,
                                    "L_enc·2·4·h·(d + h + 2) + 4·d·(3d + 2) + (L_dec − 1)·4·d·(2d + 2) + d² + d, h = d/2"),
                 "cross-attention": Term(2 * d * d + d, "2·d² + d (additive: W_q, W_k, w_v)")}
        value, formula = _embedding(t, model.get("src_vocab_size", 0), model.get("src_bigram_buckets", 0), "V_src")
        _add(terms, "embeddings", value, formula)
        if not model.get("share_embeddings", False):
            value, formula = _embedding(t, model.get("tgt_vocab_size", 0), 0, "V_tgt")
            _add(terms, "embeddings", value, formula)
        if not model.get("tie_output", True):
            _add(terms, "head", d * model.get("tgt_vocab_size", 0), "d·V_tgt")
        final = 0
    elif task == "translate":
        t = TransformerConfig.from_dict(model.get("transformer", {}))
        enc = _block_terms(t, t.n_layers, cross=False)
        dec = _block_terms(t, t.decoder_layers, cross=True)
        terms = {}
        for part in (enc, dec):
            for k, v in part.items():
                _add(terms, k, v.value, v.formula.replace("L·", "L_enc·" if part is enc else "L_dec·"))
        value, formula = _embedding(t, model.get("src_vocab_size", 0), model.get("src_bigram_buckets", 0), "V_src")
        _add(terms, "embeddings", value, formula)
        if not model.get("share_embeddings", False):
            value, formula = _embedding(t, model.get("tgt_vocab_size", 0), 0, "V_tgt")
            _add(terms, "embeddings", value, formula)
        if not model.get("tie_output", True):
            _add(terms, "head", t.d_model * model.get("tgt_vocab_size", 0), "d·V_tgt")
        final = 2  # one norm after each stack
    else:
        raise UserError(f"params: task {task!r} unknown; the recipe needs task classify, lm or translate")
    if final and t.use_final_norm and not t.ablate_norm:
        per_norm = t.d_model * (2 if t.norm == "layernorm" and t.bias else 1)
        _add(terms, "norms", final * per_norm, f"{final}·{_norm_f(per_norm, t.d_model)} (final)")
    return terms


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
