"""Tokenizers: text <-> lists of integer ids.

Four kinds share one interface (`Tokenizer`):

    char       one id per character; the default for Chinese. Optional hashed
               character-bigram ids (`encode_bigrams`) to sum into the embeddings.
    word       words and punctuation marks: a regex split, or jieba's Chinese word segmentation
               for CJK text (data/segment.py).
    bpe        byte-level BPE trained with the HF `tokenizers` library; never emits <unk>
               and `decode(encode(x)) == x` for any text.
    wordpiece  WordPiece trained with `tokenizers`; Metaspace + punctuation pre-tokenization,
               so decoding restores single spaces and punctuation exactly.

Every tokenizer reserves the same special ids (see docs/contracts.md):
    <pad>=0  <unk>=1  <bos>=2  <eos>=3  <cls>=4
Specials are only ever added on request (`add_bos`, `add_eos`, `add_cls`); text that happens
to contain the string "<eos>" is encoded as ordinary text, never as the special id.

A tokenizer saves to one JSON file with a "type" field; `Tokenizer.load` dispatches on it.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

from ..errors import UserError
from ..fileio import atomic_write_text
from .bigrams import char_bigrams, char_trigrams, check_buckets, id_bigrams, pack_ngrams
from .segment import CJK as _CJK, SEGMENTERS, WORD_PATTERN
from .specials import BOS, BOS_ID, CLS, CLS_ID, EOS, EOS_ID, NUM_SPECIALS, PAD, PAD_ID, SPECIAL_TOKENS, UNK, UNK_ID  # noqa: F401
FORMAT_VERSION = 1

_REGISTRY: dict[str, type["Tokenizer"]] = {}


def _register(cls):
    _REGISTRY[cls.kind] = cls
    return cls


class TokenizerFileError(UserError, ValueError):
    """A tokenizer file that cannot be read (one line: which file, what is wrong)."""


class Tokenizer:
    """The common interface. Subclasses implement `_encode_raw`, `_decode_raw`, the vocab
    look-ups, `train`, and `_state`/`_from_state` for saving."""

    kind = "base"
    pad_id = PAD_ID  # what a padded batch of this tokenizer's ids is filled with
    source_specials = 1  # specials `encode_source` adds (<eos>)

    # ---- what a subclass provides -------------------------------------------------------
    def _encode_raw(self, text: str) -> list[int]:
        raise NotImplementedError

    def _decode_raw(self, ids: list[int]) -> str:
        raise NotImplementedError

    @property
    def vocab_size(self) -> int:
        raise NotImplementedError

    def id_to_token(self, i: int) -> str:
        raise NotImplementedError

    def token_to_id(self, token: str) -> int:
        """The id of `token`, or UNK_ID if it is not in the vocabulary."""
        raise NotImplementedError

    @classmethod
    def train(cls, texts: Iterable[str], **opts) -> "Tokenizer":
        raise NotImplementedError

    def _state(self) -> dict:
        raise NotImplementedError

    @classmethod
    def _from_state(cls, state: dict) -> "Tokenizer":
        raise NotImplementedError

    # ---- shared behaviour ---------------------------------------------------------------
    @staticmethod
    def _wrap(ids: list[int], add_bos: bool, add_eos: bool, add_cls: bool) -> list[int]:
        """Add the requested specials: [<cls>] [<bos>] ids [<eos>]."""
        return [CLS_ID] * add_cls + [BOS_ID] * add_bos + ids + [EOS_ID] * add_eos

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False,
               add_cls: bool = False) -> list[int]:
        """Text -> ids. Unknown pieces become UNK_ID; "" gives [] plus requested specials."""
        return self._wrap(self._encode_raw(text) if text else [], add_bos, add_eos, add_cls)

    def encode_batch(self, texts: Sequence[str], add_bos: bool = False, add_eos: bool = False,
                     add_cls: bool = False) -> list[list[int]]:
        return [self.encode(t, add_bos, add_eos, add_cls) for t in texts]

    def encode_source(self, texts: Sequence[str]) -> list[list[int]]:
        """The ids an encoder reads for each text: the tokens and <eos> (a pretrained encoder's
        tokenizer adds its own specials instead, `XLMRSourceTokenizer`)."""
        return self.encode_batch(list(texts), add_eos=True)

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        """Ids -> text. With `skip_special`, <pad>/<bos>/<eos>/<cls> are dropped; <unk> is
        always kept (rendered as "<unk>") so that lost text stays visible."""
        ids = [int(i) for i in ids]
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise UserError(f"id {bad[0]} is outside this tokenizer's vocabulary of {self.vocab_size} "
                            "(a model with more embedding rows than tokenizer.json?)")
        if skip_special:
            ids = [i for i in ids if i == UNK_ID or i >= NUM_SPECIALS]
        return self._decode_raw(ids)

    def unk_rate(self, texts: Iterable[str]) -> float:
        """Fraction of produced tokens (no specials) that are <unk>. 0.0 if there are none."""
        total = unk = 0
        for ids in self.encode_batch(list(texts)):
            total += len(ids)
            unk += sum(1 for i in ids if i == UNK_ID)
        return unk / total if total else 0.0

    def save(self, path: str | Path) -> None:
        """Write the tokenizer as one JSON file."""
        data = {"type": self.kind, "format_version": FORMAT_VERSION, **self._state()}
        atomic_write_text(path, json.dumps(data, ensure_ascii=False))

    @classmethod
    def load(cls, path: str | Path) -> "Tokenizer":
        """Read a file written by `save`; the "type" field picks the subclass. A missing,
        truncated, non-UTF-8 or damaged file is one `TokenizerFileError` naming it."""
        UserError = TokenizerFileError  # noqa: N806  every error below is about the file
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UserError(f"tokenizer file {path} does not exist") from None
        except UnicodeDecodeError as e:
            raise UserError(f"{path} is not a tokenizer file (not UTF-8 at byte {e.start}); "
                            "restore it from the run or retrain") from None
        except json.JSONDecodeError as e:
            raise UserError(f"{path}:{e.lineno}: corrupt tokenizer file ({e.msg}); restore it from the run or retrain") from None
        if not isinstance(data, dict):
            raise UserError(f"{path} is not a tokenizer file (expected a JSON object)")
        kind = data.get("type")
        if kind not in _REGISTRY:
            raise UserError(f"{path}: unknown tokenizer type {kind!r}; expected one of {sorted(_REGISTRY)}")
        sub = _REGISTRY[kind]
        if cls is not Tokenizer and not issubclass(sub, cls):
            raise UserError(f"{path}: holds a {kind!r} tokenizer, not {cls.kind!r}")
        try:
            return sub._from_state(data)
        except UserError:
            raise
        except Exception as e:  # noqa: BLE001 - any defect of the file's content is the file's
            raise UserError(f"{path}: a damaged {kind} tokenizer file ({type(e).__name__}: "
                            f"{str(e).splitlines()[0][:120] if str(e) else ''}); restore it from the run or retrain") from None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(vocab_size={self.vocab_size})"


class _VocabTokenizer(Tokenizer):
    """A tokenizer with a plain Python vocabulary: a list of tokens, specials first."""

    def __init__(self, tokens: Sequence[str], lowercase: bool = False):
        if list(tokens[:NUM_SPECIALS]) != SPECIAL_TOKENS:
            raise ValueError(f"vocabulary must start with {SPECIAL_TOKENS}")
        self.itos = list(tokens)
        self.stoi = {t: i for i, t in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):  # two ids for one token: encode would give only the last
            seen: dict[str, int] = {}
            for i, t in enumerate(self.itos):
                if t in seen:
                    raise ValueError(f"the token {t!r} is listed twice (ids {seen[t]} and {i}); every token has one id")
                seen[t] = i
        self.lowercase = lowercase

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def id_to_token(self, i: int) -> str:
        return self.itos[i]

    def token_to_id(self, token: str) -> int:
        return self.stoi.get(token, UNK_ID)

    def _split(self, text: str) -> list[str]:
        raise NotImplementedError

    def _encode_raw(self, text: str) -> list[int]:
        get = self.stoi.get
        return [get(t, UNK_ID) for t in self._split(text)]

    @staticmethod
    def _build_vocab(counts: Counter, min_freq: int, max_size: int | None) -> list[str]:
        """Specials, then tokens seen >= min_freq times, most frequent first (ties by
        token, so training is deterministic), at most `max_size` entries in total."""
        kept = sorted((t for t, c in counts.items() if c >= min_freq and t not in SPECIAL_TOKENS),
                      key=lambda t: (-counts[t], t))
        if max_size is not None:
            kept = kept[: max(0, max_size - NUM_SPECIALS)]
        return SPECIAL_TOKENS + kept


@_register
class CharTokenizer(_VocabTokenizer):
    """One id per character (spaces included), so `decode(encode(x)) == x` when every
    character is in the vocabulary.

    bigram_buckets=N turns on hashed character bigrams: `encode_bigrams(text)` gives, for
    every position of `encode(text)`, an id in [0, N): 0 for specials, otherwise
    1 + crc32(prev_char + char) % (N - 1), with prev_char = "" at the first character.
    crc32 is stable across processes and machines (Python's hash() is not).
    trigram_buckets=M adds hashed character trigrams, packed into the same id:
    bigram + N * trigram (see `data.bigrams.pack_ngrams`).
    """

    kind = "char"

    def __init__(self, tokens: Sequence[str], lowercase: bool = False, bigram_buckets: int = 0,
                 trigram_buckets: int = 0):
        super().__init__(tokens, lowercase)
        check_buckets(bigram_buckets)
        check_buckets(trigram_buckets)
        if trigram_buckets and not bigram_buckets:
            raise ValueError("trigram_buckets needs bigram_buckets (they are packed into one id)")
        self.bigram_buckets, self.trigram_buckets = bigram_buckets, trigram_buckets

    @classmethod
    def train(cls, texts: Iterable[str], min_freq: int = 1, max_size: int | None = None,
              lowercase: bool = False, bigram_buckets: int = 0, trigram_buckets: int = 0) -> "CharTokenizer":
        """Characters seen fewer than `min_freq` times map to <unk>."""
        counts = Counter()
        for t in texts:
            counts.update(t.lower() if lowercase else t)
        return cls(cls._build_vocab(counts, min_freq, max_size), lowercase, bigram_buckets, trigram_buckets)

    def _split(self, text: str) -> list[str]:
        return list(text.lower() if self.lowercase else text)

    def _decode_raw(self, ids: list[int]) -> str:
        return "".join(self.itos[i] for i in ids)

    def encode_bigrams(self, text: str, add_bos: bool = False, add_eos: bool = False,
                       add_cls: bool = False) -> list[int]:
        """Hashed bigram bucket ids, aligned 1:1 with `encode(text, same flags)`."""
        n = self.bigram_buckets
        if n < 2:
            raise ValueError("this CharTokenizer was built without bigram_buckets")
        chars = self._split(text)
        ids = char_bigrams(chars, n)
        if self.trigram_buckets:
            ids = pack_ngrams(ids, char_trigrams(chars, self.trigram_buckets), n)
        return [0] * add_cls + [0] * add_bos + ids + [0] * add_eos

    def _state(self) -> dict:
        return {"lowercase": self.lowercase, "bigram_buckets": self.bigram_buckets,
                **({"trigram_buckets": self.trigram_buckets} if self.trigram_buckets else {}), "vocab": self.itos}

    @classmethod
    def _from_state(cls, s: dict) -> "CharTokenizer":
        return cls(s["vocab"], s.get("lowercase", False), s.get("bigram_buckets", 0), s.get("trigram_buckets", 0))


@_register
class WordTokenizer(_VocabTokenizer):
    """Words and single punctuation marks, cut by a segmenter (`data/segment.py`):

        regex  runs of letters/digits/underscore and punctuation marks (alphabetic text)
        jieba  Chinese word segmentation (中文分词) for the CJK pieces, regex for the rest

    `train(segmenter="auto")` picks jieba when more than 30% of the characters are CJK (the
    rule `auto_kind` uses), regex otherwise; the choice is saved in the file, and a file
    without one (written before segmenters existed) is regex.

    Decoding joins tokens with single spaces, so it is lossy: "Hi, you." -> "Hi , you ."
    (and Chinese comes back with spaces between its words).
    """

    kind = "word"
    pattern = WORD_PATTERN

    def __init__(self, tokens: Sequence[str], lowercase: bool = False, segmenter: str = "regex"):
        super().__init__(tokens, lowercase)
        if segmenter not in SEGMENTERS:
            raise UserError(f"word segmenter {segmenter!r} is unknown; choose one of {', '.join(SEGMENTERS)}")
        self.segmenter = segmenter
        self._words = SEGMENTERS[segmenter]

    @classmethod
    def train(cls, texts: Iterable[str], min_freq: int = 1, max_size: int | None = None,
              lowercase: bool = False, segmenter: str = "auto") -> "WordTokenizer":
        texts = list(texts)
        if segmenter == "auto":
            segmenter = "jieba" if cjk_fraction(texts) > 0.30 else "regex"
        tok = cls(SPECIAL_TOKENS, lowercase, segmenter)
        counts = Counter()
        for t in texts:
            counts.update(tok._split(t))
        return cls(cls._build_vocab(counts, min_freq, max_size), lowercase, segmenter)

    def _split(self, text: str) -> list[str]:
        return self._words(text.lower() if self.lowercase else text)

    def _decode_raw(self, ids: list[int]) -> str:
        return " ".join(self.itos[i] for i in ids)

    def _state(self) -> dict:
        return {"lowercase": self.lowercase, "segmenter": self.segmenter, "vocab": self.itos}

    @classmethod
    def _from_state(cls, s: dict) -> "WordTokenizer":
        return cls(s["vocab"], s.get("lowercase", False), s.get("segmenter", "regex"))

    def __repr__(self) -> str:
        return f"WordTokenizer(vocab_size={self.vocab_size}, segmenter={self.segmenter!r})"


class _HFTokenizer(Tokenizer):
    """Wraps a `tokenizers.Tokenizer` whose vocabulary starts with our five specials."""

    def __init__(self, hf):
        self.hf = hf
        # Text that contains "<eos>" is ordinary text, not the special token.
        self.hf.encode_special_tokens = True
        for i, s in enumerate(SPECIAL_TOKENS):
            if hf.token_to_id(s) != i:
                raise ValueError(f"special token {s} must have id {i}, got {hf.token_to_id(s)}")

    @classmethod
    def _new_hf(cls):
        """An untrained `tokenizers.Tokenizer` with model, pre-tokenizer and decoder set."""
        raise NotImplementedError

    @classmethod
    def _trainer(cls, vocab_size: int, min_frequency: int):
        raise NotImplementedError

    @classmethod
    def train(cls, texts: Iterable[str], vocab_size: int = 8000, min_frequency: int = 2):
        """Learn the vocabulary from `texts` (any iterable of strings)."""
        hf = cls._new_hf()
        hf.train_from_iterator(iter(texts), cls._trainer(vocab_size, min_frequency))
        return cls(hf)

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size(with_added_tokens=True)

    def id_to_token(self, i: int) -> str:
        tok = self.hf.id_to_token(int(i))
        if tok is None:
            raise IndexError(f"id {i} is outside the vocabulary (size {self.vocab_size})")
        return tok

    def token_to_id(self, token: str) -> int:
        i = self.hf.token_to_id(token)
        return UNK_ID if i is None else i

    def _encode_raw(self, text: str) -> list[int]:
        return self.hf.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str], add_bos: bool = False, add_eos: bool = False,
                     add_cls: bool = False) -> list[list[int]]:
        # The Rust side encodes a batch in parallel.
        encs = self.hf.encode_batch(list(texts), add_special_tokens=False)
        return [self._wrap(e.ids, add_bos, add_eos, add_cls) for e in encs]

    def _decode_raw(self, ids: list[int]) -> str:
        return self.hf.decode(ids, skip_special_tokens=False)

    def _state(self) -> dict:
        return {"hf_json": self.hf.to_str()}

    @classmethod
    def _from_state(cls, s: dict):
        from tokenizers import Tokenizer as HF

        return cls(HF.from_str(s["hf_json"]))


@_register
class BPETokenizer(_HFTokenizer):
    """Byte-level BPE (GPT-2 style). Every string is made of the 256 byte symbols, so there
    is never an <unk> and decoding restores the exact text (spaces, newlines, any script)."""

    kind = "bpe"

    @classmethod
    def _new_hf(cls):
        from tokenizers import Tokenizer as HF, decoders, models, pre_tokenizers

        hf = HF(models.BPE(unk_token=UNK))
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        hf.decoder = decoders.ByteLevel()
        return hf

    @classmethod
    def _trainer(cls, vocab_size: int, min_frequency: int):
        from tokenizers import pre_tokenizers, trainers

        return trainers.BpeTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=SPECIAL_TOKENS,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)


@_register
class WordPieceTokenizer(_HFTokenizer):
    """WordPiece (BERT style). Spaces become "▁" at the start of the following word
    (Metaspace) and each punctuation mark is its own piece; continuation pieces carry "##".
    Decoding strips "##" and turns "▁" back into spaces, so single-spaced text round-trips.
    A word with a character never seen in training becomes one <unk>, which also swallows
    the space before it ("fox ж" decodes to "fox<unk>"). Runs of spaces and leading spaces
    are not preserved."""

    kind = "wordpiece"

    @classmethod
    def _new_hf(cls):
        from tokenizers import Tokenizer as HF, decoders, models, pre_tokenizers

        hf = HF(models.WordPiece(unk_token=UNK, continuing_subword_prefix="##"))
        meta = dict(replacement="▁", prepend_scheme="always", split=True)
        hf.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Metaspace(**meta), pre_tokenizers.Punctuation(behavior="isolated")])
        # "##" can only start a continuation piece: '#' is punctuation, always its own piece.
        hf.decoder = decoders.Sequence([decoders.Replace("##", ""), decoders.Metaspace(**meta)])
        return hf

    @classmethod
    def _trainer(cls, vocab_size: int, min_frequency: int):
        from tokenizers import trainers

        return trainers.WordPieceTrainer(
            vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=SPECIAL_TOKENS,
            continuing_subword_prefix="##", show_progress=False)


# ---- choosing and building --------------------------------------------------------------
@_register
class XLMRSourceTokenizer(Tokenizer):
    """A pretrained XLM-R tokenizer (e5's, usually pruned: `XLMRTokenizer.pruned`) as the source
    side of a translation run. Its ids are the pretrained encoder's own, not the project-wide
    specials: `<s>`=0, `<pad>`=1, `</s>`=2, `<unk>`=3. So `pad_id` is 1 and `encode_source`
    gives `<s> pieces </s>`, the form e5 was trained on; `encode_batch` gives the bare pieces.
    Never a target tokenizer (a decoder emits our <bos>/<eos> ids)."""

    kind = "xlmr"
    source_specials = 2

    def __init__(self, xlmr):
        self.xlmr = xlmr  # data.bert_tokenizer.XLMRTokenizer
        self.pad_id, self.unk_id = xlmr.pad_id, xlmr.unk_id

    @property
    def vocab_size(self) -> int:
        return self.xlmr.vocab_size

    def id_to_token(self, i: int) -> str:
        return self.xlmr.id_to_token(i)

    def token_to_id(self, token: str) -> int:
        return self.xlmr.token_to_id(token)

    def encode(self, text: str, add_bos: bool = False, add_eos: bool = False,
               add_cls: bool = False) -> list[int]:
        return self.encode_batch([text], add_bos, add_eos, add_cls)[0]

    def encode_batch(self, texts: Sequence[str], add_bos: bool = False, add_eos: bool = False,
                     add_cls: bool = False) -> list[list[int]]:
        if add_bos or add_eos or add_cls:
            raise ValueError("an XLM-R source tokenizer adds its own specials: use encode_source")
        hf = self.xlmr.hf
        hf.no_truncation()
        return [e.ids for e in hf.encode_batch(self.xlmr._texts(texts), add_special_tokens=False)]

    def encode_source(self, texts: Sequence[str]) -> list[list[int]]:
        cls, sep = self.xlmr.cls_id, self.xlmr.sep_id
        return [[cls, *ids, sep] for ids in self.encode_batch(texts)]

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        return self.xlmr.decode([int(i) for i in ids], skip_special=skip_special)

    def unk_rate(self, texts: Iterable[str]) -> float:
        return self.xlmr.unk_rate(list(texts))

    def _state(self) -> dict:
        x = self.xlmr
        x.hf.no_truncation()
        x.hf.no_padding()
        return {"hf_json": x.hf.to_str(), "text_prefix": x.text_prefix, "model_max_length": x.model_max_length}

    @classmethod
    def _from_state(cls, s: dict) -> "XLMRSourceTokenizer":
        from tokenizers import Tokenizer as HF

        from .bert_tokenizer import XLMRTokenizer

        return cls(XLMRTokenizer(HF.from_str(s["hf_json"]), model_max_length=int(s["model_max_length"]),
                                 text_prefix=s.get("text_prefix", "")))

    def __repr__(self) -> str:
        return f"XLMRSourceTokenizer(vocab_size={self.vocab_size}, text_prefix={self.xlmr.text_prefix!r})"


def cjk_fraction(texts: Iterable[str]) -> float:
    """Fraction of non-space characters that are CJK (Han, kana, hangul)."""
    total = cjk = 0
    for t in texts:
        total += sum(1 for c in t if not c.isspace())
        cjk += len(_CJK.findall(t))
    return cjk / total if total else 0.0


def auto_kind(texts: Iterable[str]) -> str:
    """'char' if more than 30% of the (non-space) characters are CJK, else 'bpe'."""
    return "char" if cjk_fraction(texts) > 0.30 else "bpe"


def build_tokenizer(kind: str, texts: Iterable[str], **opts) -> Tokenizer:
    """Train a tokenizer of `kind` ('char' | 'word' | 'bpe' | 'wordpiece') on `texts`.
    `opts` go to that class's `train` (e.g. min_freq=3, vocab_size=8000)."""
    if kind not in _REGISTRY:
        raise ValueError(f"unknown tokenizer kind {kind!r}; expected one of {sorted(_REGISTRY)}")
    return _REGISTRY[kind].train(texts, **opts)


__all__ = [
    "PAD", "UNK", "BOS", "EOS", "CLS", "SPECIAL_TOKENS", "NUM_SPECIALS",
    "PAD_ID", "UNK_ID", "BOS_ID", "EOS_ID", "CLS_ID",
    "Tokenizer", "CharTokenizer", "WordTokenizer", "BPETokenizer", "WordPieceTokenizer",
    "build_tokenizer", "auto_kind", "cjk_fraction", "Tokenized",
]


class Tokenized(str):
    """A text that carries what its reader's tokenizer made of it, so that a served text is
    tokenized once: the server counts its tokens for the input limit (`n_tokens`) and the batch
    that reads it later reuses `encoded` when `encoded_by` is that very reader (any other reader,
    or a text without them, tokenizes as usual). It is a str, so every path that reads the text
    itself (a TF-IDF baseline, a message) reads it unchanged."""

    encoded: object = None
    encoded_by: object = None
    n_tokens: int = 0

    @classmethod
    def of(cls, text: str, encoded, encoded_by, n_tokens: int) -> "Tokenized":
        out = cls(text)
        out.encoded, out.encoded_by, out.n_tokens = encoded, encoded_by, n_tokens
        return out


def encode_with_bigrams(tok: Tokenizer, text: str, bigram_buckets: int) -> tuple[list[int], list[int] | None]:
    """ids and, when `bigram_buckets`, aligned hashed bigram ids: character bigrams for a char
    tokenizer built with those buckets, token-id bigrams otherwise (see `data.bigrams`)."""
    ids = tok.encode(text)
    if not bigram_buckets:
        return ids, None
    if hasattr(tok, "encode_bigrams") and getattr(tok, "bigram_buckets", 0) == bigram_buckets:
        return ids, tok.encode_bigrams(text)
    return ids, id_bigrams(ids, bigram_buckets)
