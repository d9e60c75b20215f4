"""Any tokenizer of a classify run as a standard `tokenizers` pipeline (the `tokenizer.json` format
that Hugging Face's `tokenizers`, `transformers` and most serving stacks read), giving the ids ours
gives: what an ONNX export carries so that it runs without scratchformer.

    ours                        the standard pipeline
    char                        WordLevel over the characters; every character its own piece
    word, regex segmenter       WordLevel; split on whitespace (removed), then \\w+ | [^\\w\\s]
    bpe, wordpiece              already `tokenizers` pipelines; our five specials are dropped from
                                the added tokens, because ours encode "<eos>" typed in a text as
                                text (`encode_special_tokens`, which tokenizer.json does not store)
    BERT / XLM-R (--init)       the run's own tokenizer.json (pruned vocabulary included)

`to_hf(tok)` returns the pipeline without specials, truncation or padding: the caller (the
export) adds the template and the truncation it uses. Word runs cut by jieba are refused:
jieba's dictionary segmentation has no `tokenizers` equivalent.

Where the two could still differ: `\\s` is Python's in ours and Oniguruma's in `tokenizers`
(a few control characters), and lowercasing is Python's `str.lower` in ours and a per-character
lowercase in `tokenizers` (a word-final Greek sigma). On THUCNews and Rotten Tomatoes texts, and on
the odd ones in tests/serve/test_export_tokenizers.py, every kind gives our ids.
"""
from __future__ import annotations

import json

from ..errors import UserError
from .specials import SPECIAL_TOKENS, UNK


# WORD_PATTERN (`\w+|[^\w\s]`) with Python's `\w` spelt out: letters, numbers, underscore.
# Oniguruma's `\w` also takes combining marks, so "é" written e + U+0301 would stay one word.
_WORD = r"[\p{L}\p{N}_]+|[^\p{L}\p{N}_\s]"


def to_hf(tok):
    """`tok` (ours, or a `BertTokenizer`) -> a `tokenizers.Tokenizer` giving the same ids for
    `encode(text, add_special_tokens=False)`."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

    if hasattr(tok, "cls_id"):  # BertTokenizer / XLMRTokenizer: already a `tokenizers` pipeline
        return Tokenizer.from_str(tok.hf.to_str())
    kind = getattr(tok, "kind", None)
    if kind in ("bpe", "wordpiece"):
        d = json.loads(tok.hf.to_str())
        d["added_tokens"] = [t for t in d.get("added_tokens", []) if t["content"] not in SPECIAL_TOKENS]
        return Tokenizer.from_str(json.dumps(d))
    if kind == "word" and tok.segmenter != "regex":
        raise UserError(f"this run's word tokenizer cuts Chinese with {tok.segmenter}, which a standard "
                        "tokenizer.json cannot express; train with data.tokenizer=char (or bpe) to export")
    if kind not in ("char", "word"):
        raise UserError(f"a {kind!r} tokenizer has no standard tokenizer.json form")
    hf = Tokenizer(models.WordLevel({t: i for i, t in enumerate(tok.itos)}, unk_token=UNK))
    if tok.lowercase:
        hf.normalizer = normalizers.Lowercase()
    if kind == "char":
        hf.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), "isolated")
        hf.decoder = decoders.Fuse()  # `decode` joins the characters, as ours (WordLevel's joins with spaces)
    else:
        hf.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r"\s+"), "removed"),
                                                    pre_tokenizers.Split(Regex(_WORD), "isolated")])
    return hf
