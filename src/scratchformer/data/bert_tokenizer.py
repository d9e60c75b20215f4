"""BERT's WordPiece tokenizer (the one a pretrained BERT checkpoint was trained with), on the
`tokenizers` library. `scratchformer.interop.hf_bert` loads it with its checkpoint; the
classification task keeps it in its run directory.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Sequence

import torch

from ..errors import UserError
from ..fileio import atomic_write_text


def _read_json(path: Path, required: bool = True) -> dict | None:
    if not path.exists():
        if required:
            raise UserError(f"{path} does not exist; a BERT checkpoint folder needs it")
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UserError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None


def _write_json(path: Path, obj: dict) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")


class BertTokenizer:
    """BERT's WordPiece pipeline on the `tokenizers` library, returning padded tensors.

    `encode_batch(texts)` equals `transformers.AutoTokenizer(...)(texts, padding=True,
    truncation=True, max_length=..., return_tensors="pt")`: [CLS] text [SEP] (plus text_b
    [SEP] for pairs, with token type 1), truncated longest-first to `max_length` tokens
    including the specials, right-padded with [PAD] to the longest row.

    BERT's vocabulary has its own special ids ([PAD]=0, [UNK]=100, [CLS]=101, [SEP]=102 for
    the uncased English one), not the project-wide ids of `scratchformer.data.tokenizers`:
    a pretrained model only understands the ids it was trained with.
    """

    def __init__(self, hf_tokenizer, model_max_length: int = 512, do_lower_case: bool = True,
                 sentence_max_length: int | None = None):
        self.hf = hf_tokenizer
        self.hf.no_truncation()  # shipped tokenizer.json files often pin 128 / fixed padding
        self.hf.no_padding()
        self.model_max_length = model_max_length
        self.do_lower_case = do_lower_case
        self.sentence_max_length = sentence_max_length  # sentence-transformers' max_seq_length
        ids = {t: self.hf.token_to_id(t) for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")}
        missing = [t for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]") if ids[t] is None]
        if missing:
            raise UserError(f"the BERT vocabulary lacks {', '.join(missing)}; is this a BERT tokenizer?")
        self.pad_id, self.unk_id, self.cls_id, self.sep_id = (ids[t] for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]"))
        self.mask_id = ids["[MASK]"]

    # ---- construction ---------------------------------------------------------------------
    @classmethod
    def from_vocab(cls, vocab_file: str | os.PathLike, lowercase: bool = True,
                   strip_accents: bool | None = None, tokenize_chinese_chars: bool = True,
                   **kw) -> "BertTokenizer":
        """Build the standard BERT pipeline from a `vocab.txt` (one token per line)."""
        from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

        vocab: dict[str, int] = {}
        with open(vocab_file, encoding="utf-8") as f:
            for i, line in enumerate(f):
                vocab.setdefault(line.rstrip("\n"), i)
        tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
        tok.normalizer = normalizers.BertNormalizer(
            clean_text=True, handle_chinese_chars=tokenize_chinese_chars,
            strip_accents=strip_accents, lowercase=lowercase)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        cls_id, sep_id = vocab.get("[CLS]"), vocab.get("[SEP]")
        if cls_id is None or sep_id is None:
            raise UserError(f"{vocab_file} lacks [CLS] or [SEP]; is it a BERT vocab.txt?")
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
        tok.decoder = decoders.WordPiece(prefix="##")
        tok.add_special_tokens([t for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]") if t in vocab])
        return cls(tok, do_lower_case=lowercase, **kw)

    @classmethod
    def from_dir(cls, model_dir: str | os.PathLike, max_positions: int = 512) -> "BertTokenizer":
        """Load from a checkpoint folder: `tokenizer.json` if present, else `vocab.txt`
        (with `tokenizer_config.json`'s do_lower_case / strip_accents / tokenize_chinese_chars)."""
        from tokenizers import Tokenizer

        d = Path(model_dir)
        tcfg = _read_json(d / "tokenizer_config.json", required=False) or {}
        st_cfg = _read_json(d / "sentence_bert_config.json", required=False) or {}
        max_len = tcfg.get("model_max_length")
        if not isinstance(max_len, int) or max_len > max_positions:  # HF writes 1e30 for "unset"
            max_len = max_positions
        kw = dict(model_max_length=max_len, sentence_max_length=st_cfg.get("max_seq_length"))
        if (d / "tokenizer.json").exists():
            try:
                hf = Tokenizer.from_file(str(d / "tokenizer.json"))
            except Exception as e:  # the Rust error text is one line
                raise UserError(f"{d / 'tokenizer.json'} cannot be read ({e})") from None
            return cls(hf, do_lower_case=tcfg.get("do_lower_case", True), **kw)
        if (d / "vocab.txt").exists():
            return cls.from_vocab(
                d / "vocab.txt", lowercase=tcfg.get("do_lower_case", True),
                strip_accents=tcfg.get("strip_accents"),
                tokenize_chinese_chars=tcfg.get("tokenize_chinese_chars", True), **kw)
        raise UserError(f"{d} has neither tokenizer.json nor vocab.txt; copy the checkpoint's tokenizer files there")

    # ---- use ------------------------------------------------------------------------------
    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size(with_added_tokens=True)

    def tokenize(self, text: str) -> list[str]:
        return self.hf.encode(text, add_special_tokens=False).tokens

    def encode(self, text: str, pair: str | None = None, max_length: int | None = None,
               add_special_tokens: bool = True) -> list[int]:
        """Ids of `[CLS] text [SEP]` (or a pair), truncated to `max_length` (default: the
        model's). `add_special_tokens=False` gives the bare WordPiece ids, untruncated (for
        callers that cut long documents into segments themselves)."""
        if not add_special_tokens:
            self.hf.no_truncation()
            return self.hf.encode(text, pair, add_special_tokens=False).ids
        self._truncate(max_length)
        return self.hf.encode(text, pair).ids

    def id_to_token(self, i: int) -> str:
        tok = self.hf.id_to_token(int(i))
        return "[UNK]" if tok is None else tok

    def token_to_id(self, token: str) -> int:
        i = self.hf.token_to_id(token)
        return self.unk_id if i is None else i

    def unk_rate(self, texts) -> float:
        """Fraction of WordPiece tokens that are [UNK] (e.g. emoji or CJK in an English vocab)."""
        self.hf.no_truncation()
        encs = self.hf.encode_batch(list(texts), add_special_tokens=False)
        total = sum(len(e.ids) for e in encs)
        return sum(e.ids.count(self.unk_id) for e in encs) / max(total, 1)

    def encode_batch(self, texts: Sequence[str], pairs: Sequence[str] | None = None,
                     max_length: int | None = None) -> dict[str, torch.Tensor]:
        """Padded `(B, T)` LongTensors `input_ids`, `attention_mask` (1 = real), `token_type_ids`.

        `max_length` (default `model_max_length`) counts the special tokens, as in transformers.
        """
        if isinstance(texts, str):
            raise TypeError("encode_batch takes a list of texts, not one string")
        texts = list(texts)
        inputs = texts if pairs is None else list(zip(texts, pairs, strict=True))
        self._truncate(max_length)
        self.hf.enable_padding(direction="right", pad_id=self.pad_id, pad_type_id=0, pad_token="[PAD]")
        try:
            encs = self.hf.encode_batch(inputs) if inputs else []
        finally:
            self.hf.no_padding()

        def stack(field: str) -> torch.Tensor:
            return torch.tensor([getattr(e, field) for e in encs], dtype=torch.long).reshape(len(encs), -1)

        return {"input_ids": stack("ids"), "attention_mask": stack("attention_mask"),
                "token_type_ids": stack("type_ids")}

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str:
        return self.hf.decode(list(ids), skip_special_tokens=skip_special)

    def _truncate(self, max_length: int | None) -> None:
        max_length = self.model_max_length if max_length is None else max_length
        if max_length < 3:
            raise UserError(f"max_length {max_length} leaves no room for text between [CLS] and [SEP]")
        self.hf.enable_truncation(max_length, stride=0, strategy="longest_first", direction="right")

    def save(self, out_dir: str | os.PathLike) -> None:
        """Write tokenizer.json, vocab.txt, tokenizer_config.json and special_tokens_map.json."""
        out = Path(out_dir)
        self.hf.no_truncation()
        self.hf.no_padding()
        atomic_write_text(out / "tokenizer.json", self.hf.to_str(pretty=True))  # hf.save would follow a link
        vocab = self.hf.get_vocab(with_added_tokens=True)
        by_id = sorted(vocab.items(), key=lambda kv: kv[1])
        if [i for _, i in by_id] != list(range(len(by_id))):
            raise UserError("the vocabulary has gaps in its ids; cannot write vocab.txt")
        atomic_write_text(out / "vocab.txt", "".join(t + "\n" for t, _ in by_id))
        specials = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                    "cls_token": "[CLS]", "mask_token": "[MASK]"}
        _write_json(out / "special_tokens_map.json", specials)
        _write_json(out / "tokenizer_config.json", {
            "tokenizer_class": "BertTokenizer", "do_lower_case": self.do_lower_case,
            "model_max_length": self.model_max_length, "tokenize_chinese_chars": True,
            "strip_accents": None, **specials})

    def __repr__(self) -> str:
        return f"BertTokenizer(vocab_size={self.vocab_size}, model_max_length={self.model_max_length})"
