"""Closed-form parameter counts of our Transformer stacks, term by term (`scratchformer params`,
experiments/params.py): with d = d_model, f = d_ff, L = layers, b = 1 with biases (0 without),
per layer attention 4·d² + 4·d, FFN 2·d·f + f + d (SwiGLU 3·d·f + 2·f + d), norms 2·2·d; token
embeddings V·d (+ hashed n-gram buckets, + a learned position table); an LSTM's recurrence
2·4·h·(d + h + 2) per layer (h = d/2). Each task's face adds its head (tasks/<task>/face.py
`params`)."""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import UserError
from ..nn.config import TransformerConfig


@dataclass
class Term:
    value: int
    formula: str


def block_terms(t: TransformerConfig, L: int, cross: bool) -> dict[str, Term]:
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
           "norms": Term(L * n_norms * per_norm, f"L·{n_norms}·{norm_f(per_norm, d)}")}
    if cross:
        out["cross-attention"] = Term(L * attn, f"L·({attn_f})")
    return out


def norm_f(per_norm: int, d: int) -> str:
    return "2·d" if per_norm == 2 * d else "d" if per_norm else "0 (ablate_norm)"


def add(terms: dict[str, Term], name: str, value: int, formula: str) -> None:
    if name in terms:
        terms[name] = Term(terms[name].value + value, f"{terms[name].formula} + {formula}")
    else:
        terms[name] = Term(value, formula)


def embedding(t: TransformerConfig, vocab: int, extra: int, label: str) -> tuple[int, str]:
    value, formula = vocab * t.d_model + extra * t.d_model, f"{label}·d" + (" + buckets·d" if extra else "")
    if t.position == "learned":
        value, formula = value + t.max_len * t.d_model, formula + " + max_len·d"
    return value, formula


def encoder_terms(model: dict) -> tuple[dict[str, Term], TransformerConfig]:
    """The terms of one encoder (or decoder-only) stack with its token embeddings, no head, and
    the stack's config (classify, lm and mlm runs)."""
    if model.get("bert"):
        raise UserError("a BERT-backbone run: its layout is BERT's; only the counted column applies")
    # the stack's section is "encoder" in older recipes, "transformer" in newer ones
    t = TransformerConfig.from_dict(model.get("transformer") or model.get("encoder") or {})
    if model.get("kind") == "lstm":  # models/rnn.py: no positions, no norms
        t = t.replace(position="none", final_norm=False)
        h = t.d_model // 2
        terms = {"recurrence": Term(t.n_layers * 2 * 4 * h * (t.d_model + h + 2), "L·2·4·h·(d + h + 2), h = d/2")}
    else:
        terms = block_terms(t, t.n_layers, cross=False)
    # hashed bigram and trigram tables: one row of d per bucket each
    value, formula = embedding(t, model.get("vocab_size", 0),
                               model.get("bigram_buckets", 0) + model.get("trigram_buckets", 0), "V")
    add(terms, "embeddings", value, formula)
    return terms, t


def seq2seq_terms(model: dict) -> tuple[dict[str, Term], TransformerConfig]:
    """The terms of an encoder-decoder (a translation run), its output projection included."""
    t = TransformerConfig.from_dict(model.get("transformer", {}))
    enc = block_terms(t, t.n_layers, cross=False)
    dec = block_terms(t, t.decoder_layers, cross=True)
    terms: dict[str, Term] = {}
    for part in (enc, dec):
        for k, v in part.items():
            add(terms, k, v.value, v.formula.replace("L·", "L_enc·" if part is enc else "L_dec·"))
    value, formula = embedding(t, model.get("src_vocab_size", 0), model.get("src_bigram_buckets", 0), "V_src")
    add(terms, "embeddings", value, formula)
    if not model.get("share_embeddings", False):
        value, formula = embedding(t, model.get("tgt_vocab_size", 0), 0, "V_tgt")
        add(terms, "embeddings", value, formula)
    if not model.get("tie_output", True):
        add(terms, "head", t.d_model * model.get("tgt_vocab_size", 0), "d·V_tgt")
    return final_norms(terms, t, 2), t  # one norm after each stack


def lstm_seq2seq_terms(model: dict) -> tuple[dict[str, Term], TransformerConfig]:
    """The terms of the LSTM encoder-decoder (models/rnn_seq2seq.py: no positions, no norms): a
    bidirectional encoder of h = d/2 per direction, a decoder whose first layer also reads the
    attention context, the decoder's initial state, additive attention, embeddings and output."""
    t = TransformerConfig.from_dict(model.get("transformer", {})).replace(position="none", final_norm=False)
    d, h, L = t.d_model, t.d_model // 2, t.decoder_layers
    terms = {"recurrence": Term(t.n_layers * 2 * 4 * h * (d + h + 2) + 4 * d * (3 * d + 2)
                                + (L - 1) * 4 * d * (2 * d + 2) + d * d + d,
                                "L_enc·2·4·h·(d + h + 2) + 4·d·(3d + 2) + (L_dec − 1)·4·d·(2d + 2) + d² + d, h = d/2"),
             "cross-attention": Term(2 * d * d + d, "2·d² + d (additive: W_q, W_k, w_v)")}
    value, formula = embedding(t, model.get("src_vocab_size", 0), model.get("src_bigram_buckets", 0), "V_src")
    add(terms, "embeddings", value, formula)
    if not model.get("share_embeddings", False):
        value, formula = embedding(t, model.get("tgt_vocab_size", 0), 0, "V_tgt")
        add(terms, "embeddings", value, formula)
    if not model.get("tie_output", True):
        add(terms, "head", d * model.get("tgt_vocab_size", 0), "d·V_tgt")
    return terms, t  # no final norms


def lm_head(terms: dict[str, Term], t: TransformerConfig, model: dict) -> dict[str, Term]:
    """An LM head (lm, mlm runs): none when tied to the embeddings, else d·V; then the final norm."""
    if not model.get("tie_embeddings", True):
        add(terms, "head", t.d_model * model.get("vocab_size", 0), "d·V")
    return final_norms(terms, t, 1)


def final_norms(terms: dict[str, Term], t: TransformerConfig, n: int) -> dict[str, Term]:
    """The `n` norms after the stacks (none with use_final_norm off or ablate_norm)."""
    if t.use_final_norm and not t.ablate_norm:
        per_norm = t.d_model * (2 if t.norm == "layernorm" and t.bias else 1)
        add(terms, "norms", n * per_norm, f"{n}·{norm_f(per_norm, t.d_model)} (final)")
    return terms
