"""Prune a Unigram (SentencePiece) vocabulary to what one run needs.

multilingual-e5-small carries 250,002 pieces for ~100 languages: 96M of its 117M parameters are
word embeddings, and every one of them would be updated by AdamW at every step of a run that
reads Chinese headlines only. A pruned run keeps

  1. the special pieces (<s>, <pad>, </s>, <unk>, <mask>);
  2. every piece the training texts are tokenized into (with the run's text prefix);
  3. every single-character piece ("c" and "▁c") of each character the training texts contain,
     so a known character in a new word never becomes <unk>;
  4. a margin: the `margin` most probable other pieces (the Unigram score is the piece's log
     probability in the model's training corpus) spelt only with characters the training texts
     contain, so new words made of known characters keep their pretrained pieces.

Unseen text is tokenized by the same Unigram model over the kept pieces: `tokenizers` runs its
Viterbi search again on the pruned vocabulary, so a word whose best piece was dropped gets the
most probable segmentation into kept pieces (e.g. "篮球赛" -> "篮球" "赛" when "篮球赛" was dropped);
only a character with no kept piece at all becomes <unk> (`unk_rate` measures how often).
Kept pieces keep their relative order, so the specials keep ids 0-3.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Iterable, Sequence

from ..errors import UserError

META = "\u2581"  # SentencePiece's word-start marker


@dataclass
class PrunedVocab:
    kept: list[int]  # old ids in new-id order: row i of the new embedding is row kept[i]
    tokenizer_json: str  # the pruned tokenizer.json
    used: int  # pieces of (2): in the training texts
    singles: int  # pieces added by (3)
    margin: int  # pieces added by (4)

    def line(self, total: int) -> str:
        return (f"vocabulary pruned to {len(self.kept):,} of {total:,} pieces ({self.used:,} in the training texts, "
                f"{self.singles:,} single characters, {self.margin:,} margin)")


def prune_unigram(tokenizer_json: str, encode_pieces, texts: Iterable[str], margin: int = 20000,
                  prefix: str = "") -> PrunedVocab:
    """`tokenizer_json`: a `tokenizers` Unigram tokenizer as JSON text; `encode_pieces(list of
    texts) -> list of id lists` (no specials) with that tokenizer. Returns the pruned one."""
    d = json.loads(tokenizer_json)
    model = d.get("model", {})
    if model.get("type") != "Unigram":
        raise UserError(f"vocabulary pruning needs a Unigram (SentencePiece) tokenizer, this one is "
                        f"{model.get('type')!r}; set model.prune_vocab=false")
    if margin < 0:
        raise UserError(f"model.vocab_margin must be >= 0, got {margin}")
    vocab = model["vocab"]  # [[piece, score], ...]
    texts = [prefix + t for t in texts]
    specials = {t["id"] for t in d.get("added_tokens", []) if t.get("special")}
    if model.get("unk_id") is not None:
        specials.add(model["unk_id"])
    used = {i for ids in encode_pieces(texts) for i in ids} - specials
    chars = {c for t in texts for c in t} | {META}
    index = {p: i for i, (p, _) in enumerate(vocab)}
    singles = {index[p] for c in chars for p in (c, META + c) if p in index} - used - specials
    chosen = specials | used | singles
    candidates = sorted((i for i, (p, _) in enumerate(vocab)
                         if i not in chosen and all(c in chars for c in p)), key=lambda i: -vocab[i][1])
    extra = set(candidates[:margin])
    kept = sorted(chosen | extra)
    return PrunedVocab(kept, _rewrite(d, kept), len(used), len(singles), len(extra))


def _rewrite(d: dict, kept: Sequence[int]) -> str:
    """The tokenizer JSON with only `kept` pieces, every id inside renumbered."""
    new_id = {old: new for new, old in enumerate(kept)}
    model = d["model"]
    model["vocab"] = [model["vocab"][i] for i in kept]
    if model.get("unk_id") is not None:
        model["unk_id"] = new_id[model["unk_id"]]
    for tok in d.get("added_tokens", []):
        tok["id"] = new_id[tok["id"]]
    d["added_tokens"] = [t for t in d.get("added_tokens", [])]
    post = d.get("post_processor") or {}
    for spec in (post.get("special_tokens") or {}).values():
        spec["ids"] = [new_id[i] for i in spec["ids"]]
    for key in ("sep", "cls"):  # RobertaProcessing / BertProcessing: [token, id]
        if isinstance(post.get(key), list):
            post[key] = [post[key][0], new_id[post[key][1]]]
    return json.dumps(d, ensure_ascii=False)


__all__ = ["PrunedVocab", "prune_unigram"]
