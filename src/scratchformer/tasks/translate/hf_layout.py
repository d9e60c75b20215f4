"""How a translation run's `Seq2Seq` maps onto a `transformers` encoder-decoder layout: the
weights (`hf_state`), the config, the generation settings and the tokenizer files.

Which `transformers` layout (both: sinusoidal positions, embeddings scaled by sqrt(d), no
embedding LayerNorm, biased LayerNorm with eps 1e-5, the same attention):

    Post-LN run (norm_first=false)  ->  MarianMTModel           x = LN(x + sublayer(x)), no final norm
    Pre-LN run  (norm_first=true)   ->  PegasusForConditionalGeneration
                                                                x = x + sublayer(LN(x)), a final LN per stack

Five differences between their layout and ours, each closed exactly:

1. Sinusoids: ours interleave PE[p, 2i] = sin, PE[p, 2i+1] = cos (the paper); Marian's and
   Pegasus' tables put all sines first, then all cosines, at the same frequencies. So theirs is
   ours with the channels permuted, PE_hf = PE[:, P] with P = (0, 2, 4, ..., 1, 3, 5, ...).
   Every residual-stream tensor takes the same P (x_hf = x[..., P]): the embedding tables'
   columns, every LayerNorm's weight and bias, the input columns of each projection that reads
   the stream (Q, K, V, FFN-in, the output projection), the output rows (and biases) of each one
   that writes to it (W_O, FFN-out). LayerNorm, attention and the FFN commute with a channel
   permutation, so the exported model computes the same function (tested: logits within 1e-4).
   The position tables are written into the weights (ours, permuted), not recomputed.
2. The decoder's first input: ours is <bos>, so the exported `decoder_start_token_id` is
   <bos> (transformers looks its row up like any token). CTranslate2's converter would start
   Marian from a zero vector (`start_from_zero_embedding`) and Pegasus from its pad token: the
   ctranslate2 export converts with CTranslate2's own `TransformersConverter`, subclassed to
   start from "<bos>" (`_converter_class`). transformers does not save the sinusoidal tables
   (`from_pretrained` recomputes them, in float64 rounded to float32: within 2e-6 of ours at 64 positions, so
   they cannot carry anything else).
3. Marian's vocabulary ends with "<pad>" (CTranslate2's converter drops that last row and
   token): the export appends one, and our <pad> (id 0) is named "<blank>" there. Pegasus
   keeps our ids and names as they are.
4. Ids ours never emits (<pad>, <bos>, <cls>, and Marian's extra "<pad>") get a final logits
   bias of -1e9: the same next-token distribution as our decoder's -inf, in every engine.
5. Separate source/target vocabularies (a char source and a BPE target, say): Marian has them
   (`share_encoder_decoder_embeddings=false`, `decoder_vocab_size`); CTranslate2's Marian
   loader registers one vocabulary for both sides, so the ctranslate2 export registers the
   source vocabulary through the converter's own spec (`_RunConverter`). Pegasus has one
   table for both sides: a Pre-LN run needs `model.share_embeddings=true` (else refused).

Our ids are the exported ids (plus Marian's one appended "<pad>"), and the tokenizers are
written as `tokenizers` files that `AutoTokenizer` loads (`tokenizer_json`): char and regex-word
vocabularies as WordLevel models, BPE/WordPiece as they are. CTranslate2 4.8.5's Pegasus loader
reads `config.normalize_before` and `normalize_embedding`, which transformers 5's PegasusConfig
no longer has: the exported config.json carries both (true / false); transformers ignores them.
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from ...data.specials import BOS, BOS_ID, CLS_ID, EOS, EOS_ID, PAD, PAD_ID, UNK
from ...data.tokenizers import BPETokenizer, CharTokenizer, Tokenizer, WordPieceTokenizer, WordTokenizer
from ...errors import UserError
from ...fileio import make_dirs

BANNED_BIAS = -1e9
BLANK = "<blank>"  # our <pad> (id 0) in a Marian export, whose "<pad>" is the appended last id
SOURCE_DIR = "source"  # the source tokenizer, when the two sides have their own vocabularies
_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new"}


# ----------------------------------------------------------------------------- what can be exported
def layout_of(recipe) -> str:
    """'marian' (Post-LN) or 'pegasus' (Pre-LN), or a one-line UserError saying why neither fits."""
    m, tc = recipe.model, recipe.model.transformer
    why = None
    if getattr(m, "bert", None) is not None:
        why = (f"its encoder is the pretrained {m.init} (BERT-style embeddings, learned positions), "
               "which neither layout has")
    elif m.src_bigram_buckets:
        why = "it adds hashed source bigram embeddings (model.src_bigram_buckets), which neither layout has"
    elif tc.position != "sinusoidal":
        why = f"its positions are {tc.position!r}; Marian and Pegasus have sinusoidal ones"
    elif tc.norm != "layernorm" or tc.norm_eps != 1e-5:
        why = f"its norm is {tc.norm} (eps {tc.norm_eps}); the layouts have LayerNorm with eps 1e-5"
    elif tc.activation not in _ACTIVATIONS:
        why = f"its FFN activation is {tc.activation!r}; the layouts have {', '.join(_ACTIVATIONS)}"
    elif tc.kv_heads != tc.n_heads:
        why = "it has grouped-query attention (n_kv_heads < n_heads)"
    elif tc.window is not None:
        why = "its self-attention is windowed"
    elif tc.ablate_residual or tc.ablate_scale or tc.ablate_norm:
        why = "it is an ablation model (ablate_*)"
    elif tc.d_model % 2:
        why = "its d_model is odd"
    elif tc.use_final_norm != tc.norm_first:
        why = ("a Post-LN stack with a final norm" if tc.use_final_norm else "a Pre-LN stack without a final norm") \
            + " has no transformers layout (Marian: Post-LN without, Pegasus: Pre-LN with one)"
    elif tc.norm_first and not m.share_embeddings:
        why = ("it is Pre-LN with separate source/target embeddings; the Pre-LN layout (Pegasus) has one "
               "table for both sides (train with data.joint_vocab=true and model.share_embeddings=true)")
    if why:
        raise UserError(f"this translation run cannot be exported to transformers/CTranslate2: {why}")
    return "pegasus" if tc.norm_first else "marian"


def residual_permutation(d: int) -> torch.Tensor:
    """P with PE_hf = PE_ours[:, P]: the even channels (sines), then the odd ones (cosines)."""
    return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])


# ----------------------------------------------------------------------------- the vocabulary plan
class Vocab:
    """The exported ids and token names of both sides. Ours are kept as they are; Marian adds
    "<pad>" after the target vocabulary (its pad and decoder start, a zero row)."""

    def __init__(self, layout: str, src_tok: Tokenizer, tgt_tok: Tokenizer, shared: bool):
        self.layout, self.shared = layout, shared
        self.n_src, self.n_tgt = src_tok.vocab_size, tgt_tok.vocab_size
        rename = {PAD: BLANK} if layout == "marian" else {}
        self.src_tokens = [rename.get(t, t) for t in map(src_tok.id_to_token, range(self.n_src))]
        self.tgt_tokens = [rename.get(t, t) for t in map(tgt_tok.id_to_token, range(self.n_tgt))]
        self.start = BOS_ID
        if layout == "marian":
            self.pad = self.n_tgt  # the appended "<pad>"
            self.tgt_tokens.append(PAD)
            # the encoder table must hold the pad id too (nn.Embedding's padding_idx), and keep
            # all its source rows after CTranslate2's Marian loader drops the last one
            self.n_enc = self.n_tgt + 1 if shared else max(self.n_src, self.n_tgt) + 1
        else:
            self.pad = PAD_ID
            self.n_enc = self.n_src
        self.n_dec = len(self.tgt_tokens)
        self.banned = sorted({PAD_ID, BOS_ID, CLS_ID, self.pad})  # ids ours never emits


# ----------------------------------------------------------------------------- weights
def _perm_cols(w: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    return w[:, p].contiguous()  # (out, C): reads the residual stream


def _perm_rows(w: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    return w[p].contiguous()  # (C, ...) or (C,): writes the residual stream


def _bias(linear, n: int) -> torch.Tensor:
    return linear.bias.detach() if linear.bias is not None else torch.zeros(n)


def _norm(norm, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    w = norm.weight.detach()
    b = norm.bias.detach() if norm.bias is not None else torch.zeros_like(w)
    return _perm_rows(w, p), _perm_rows(b, p)


def _attention(attn, p: torch.Tensor, C: int) -> dict[str, torch.Tensor]:
    """Our fused [W_Q; W_K; W_V] rows as q/k/v_proj, inputs permuted; W_O's outputs permuted."""
    w, b = attn.qkv_proj.weight.detach(), _bias(attn.qkv_proj, 3 * C)
    out = {}
    for i, name in enumerate(("q_proj", "k_proj", "v_proj")):
        out[f"{name}.weight"] = _perm_cols(w[i * C:(i + 1) * C], p)
        out[f"{name}.bias"] = b[i * C:(i + 1) * C].clone()
    out["out_proj.weight"] = _perm_rows(attn.out_proj.weight.detach(), p)
    out["out_proj.bias"] = _perm_rows(_bias(attn.out_proj, C), p)
    return out


def _ffn(ffn, p: torch.Tensor, d_ff: int, C: int) -> dict[str, torch.Tensor]:
    return {"fc1.weight": _perm_cols(ffn.linear_in.weight.detach(), p), "fc1.bias": _bias(ffn.linear_in, d_ff).clone(),
            "fc2.weight": _perm_rows(ffn.linear_out.weight.detach(), p),
            "fc2.bias": _perm_rows(_bias(ffn.linear_out, C), p)}


def _table(rows: int, weight: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """An exported embedding table of `rows` rows: ours (columns permuted), then zero rows."""
    out = torch.zeros(rows, weight.shape[1])
    out[: weight.shape[0]] = _perm_cols(weight.detach(), p)
    return out


def hf_state(model, layout: str, vocab: Vocab) -> dict[str, torch.Tensor]:
    """Our `Seq2Seq` as the state dict of MarianMTModel / PegasusForConditionalGeneration."""
    tc = model.cfg.transformer
    C, p = tc.d_model, residual_permutation(tc.d_model)
    sd: dict[str, torch.Tensor] = {}
    enc, dec = model.transformer.encoder, model.transformer.decoder
    for i, layer in enumerate(enc.layers):
        pre = f"model.encoder.layers.{i}."
        sd.update({pre + "self_attn." + k: v for k, v in _attention(layer.self_attn, p, C).items()})
        sd.update({pre + k: v for k, v in _ffn(layer.ffn, p, tc.d_ff, C).items()})
        for norm, name in ((layer.norm1, "self_attn_layer_norm"), (layer.norm2, "final_layer_norm")):
            sd[pre + name + ".weight"], sd[pre + name + ".bias"] = _norm(norm, p)
    for i, layer in enumerate(dec.layers):
        pre = f"model.decoder.layers.{i}."
        sd.update({pre + "self_attn." + k: v for k, v in _attention(layer.self_attn, p, C).items()})
        sd.update({pre + "encoder_attn." + k: v for k, v in _attention(layer.cross_attn, p, C).items()})
        sd.update({pre + k: v for k, v in _ffn(layer.ffn, p, tc.d_ff, C).items()})
        for norm, name in ((layer.norm1, "self_attn_layer_norm"), (layer.norm2, "encoder_attn_layer_norm"),
                           (layer.norm3, "final_layer_norm")):
            sd[pre + name + ".weight"], sd[pre + name + ".bias"] = _norm(norm, p)
    if layout == "pegasus":  # the final norm of each stack
        for stack, name in ((enc, "encoder"), (dec, "decoder")):
            sd[f"model.{name}.layer_norm.weight"], sd[f"model.{name}.layer_norm.bias"] = _norm(stack.norm, p)

    dec_table = _table(vocab.n_dec, model.tgt_embed.tokens.weight, p)
    enc_table = dec_table if vocab.shared else _table(vocab.n_enc, model.src_embed.tokens.weight, p)
    if vocab.shared:
        sd["model.shared.weight"] = dec_table
    sd["model.encoder.embed_tokens.weight"] = enc_table
    sd["model.decoder.embed_tokens.weight"] = dec_table
    if model.cfg.tie_output:
        sd["lm_head.weight"] = dec_table
    else:
        sd["lm_head.weight"] = _table(vocab.n_dec, model.out_proj.weight, p)
    bias = torch.zeros(1, vocab.n_dec)
    bias[0, vocab.banned] = BANNED_BIAS
    sd["final_logits_bias"] = bias
    return sd


def hf_config(recipe, layout: str, vocab: Vocab, n_positions: int):
    import transformers

    tc, m = recipe.model.transformer, recipe.model
    common = dict(d_model=tc.d_model, encoder_layers=tc.n_layers, decoder_layers=tc.decoder_layers,
                  encoder_attention_heads=tc.n_heads, decoder_attention_heads=tc.n_heads,
                  encoder_ffn_dim=tc.d_ff, decoder_ffn_dim=tc.d_ff, activation_function=_ACTIVATIONS[tc.activation],
                  max_position_embeddings=n_positions, scale_embedding=True, dropout=0.0, attention_dropout=0.0,
                  activation_dropout=0.0, pad_token_id=vocab.pad, eos_token_id=EOS_ID, bos_token_id=None,
                  decoder_start_token_id=vocab.start, forced_eos_token_id=None,
                  tie_word_embeddings=m.tie_output, is_encoder_decoder=True)
    if layout == "marian":
        return transformers.MarianConfig(vocab_size=vocab.n_enc, decoder_vocab_size=vocab.n_dec,
                                         share_encoder_decoder_embeddings=vocab.shared, **common)
    # normalize_before / normalize_embedding: read by CTranslate2's Pegasus loader (module docstring)
    return transformers.PegasusConfig(vocab_size=vocab.n_dec, normalize_before=True, normalize_embedding=False,
                                      **common)


def generation_config(recipe, vocab: Vocab):
    from transformers import GenerationConfig

    d = recipe.decode
    # greedy (beam 1): no beam settings, which transformers refuses to save beside num_beams=1
    beam = dict(length_penalty=d.length_penalty, early_stopping=d.early_stop) if d.beam > 1 else {}
    return GenerationConfig(decoder_start_token_id=vocab.start, eos_token_id=EOS_ID, pad_token_id=vocab.pad,
                            num_beams=d.beam, do_sample=False, **beam)


# ----------------------------------------------------------------------------- tokenizers
def tokenizer_json(tok: Tokenizer, names: list[str]) -> str:
    """`tok` as a `tokenizers` tokenizer.json with the exported token `names` (id order): the
    same ids on any text (char, regex-word, BPE and WordPiece tokenizers; tested)."""
    from tokenizers import Regex, Tokenizer as HF, decoders, models, normalizers, pre_tokenizers

    specials = [PAD, UNK, BOS, EOS, "<cls>"]
    if isinstance(tok, (BPETokenizer, WordPieceTokenizer)):
        data = json.loads(tok.hf.to_str())
        rename = {t: n for t, n in zip(map(tok.id_to_token, range(tok.vocab_size)), names) if t != n}
        vocab = data["model"]["vocab"]
        for old, new in rename.items():
            vocab[new] = vocab.pop(old)
        for added in data["added_tokens"]:
            added["content"] = rename.get(added["content"], added["content"])
        for i in range(tok.vocab_size, len(names)):  # Marian's appended "<pad>"
            data["added_tokens"].append({"id": i, "content": names[i], "single_word": False, "lstrip": False,
                                         "rstrip": False, "normalized": False, "special": True})
        return json.dumps(data, ensure_ascii=False)
    if isinstance(tok, WordTokenizer) and tok.segmenter != "regex":
        raise UserError(f"the run's word tokenizer segments with {tok.segmenter}, which a tokenizer.json "
                        "cannot do; export runs with char, regex-word, BPE or WordPiece tokenizers")
    if not isinstance(tok, (CharTokenizer, WordTokenizer)):
        raise UserError(f"a {tok.kind} tokenizer cannot be written as a tokenizer.json")
    hf = HF(models.WordLevel({n: i for i, n in enumerate(names)}, unk_token=UNK))
    if tok.lowercase:
        hf.normalizer = normalizers.Lowercase()
    if isinstance(tok, CharTokenizer):  # every code point its own piece (spaces too), joined back without spaces
        hf.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
        hf.decoder = decoders.Fuse()
    else:  # regex words: \w+ runs and single punctuation marks, whitespace dropped; decoded space-joined
        hf.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.WhitespaceSplit(),
                                                    pre_tokenizers.Split(Regex(r"\w+|[^\w\s]"), behavior="isolated")])
    hf.add_special_tokens([n for n in names if n in specials or n in (BLANK,)] + names[tok.vocab_size:])
    return hf.to_str()


def _write_tokenizer(folder: Path, tok: Tokenizer, names: list[str], pad: str) -> None:
    from tokenizers import Tokenizer as HF
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(tokenizer_object=HF.from_str(tokenizer_json(tok, names)), pad_token=pad,
                                   unk_token=UNK, eos_token=EOS, bos_token=BOS)
    make_dirs(folder)
    fast.save_pretrained(str(folder))


def n_positions_for(recipe) -> int:
    d = recipe.decode
    return max(512, d.max_input_len + 2, d.max_output_len + 2)


def vocab_list(tokenizer_data: dict) -> list[str]:
    ids = dict(tokenizer_data["model"]["vocab"])
    ids.update({a["content"]: a["id"] for a in tokenizer_data["added_tokens"]})
    names = [None] * (max(ids.values()) + 1)
    for name, i in ids.items():
        names[i] = name
    return names
