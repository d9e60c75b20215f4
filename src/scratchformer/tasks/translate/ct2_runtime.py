"""A folder written by `scratchformer export RUN --format ctranslate2`, translated by CTranslate2
with the folder's tokenizer files: what `serve --backend ctranslate2` runs (torch is not used).

Decoding follows the run's recipe (export.json `decode`): the beam, the length penalty, and our
per-sentence limit of ceil(max_len_ratio * n) + max_len_offset output tokens (n = source tokens
with <eos>, capped by max_output_len). Sentences are grouped by that limit, because
CTranslate2 takes one `max_decoding_length` per call.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Sequence

from ...errors import UserError


class Ct2Translator:
    def __init__(self, folder: str | Path, threads: int = 1):
        import ctranslate2
        from tokenizers import Tokenizer

        self.folder = Path(folder)
        try:
            self.meta = json.loads((self.folder / "export.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            raise UserError(f"{self.folder} is not a CTranslate2 export (export.json missing or damaged)") from None
        if self.meta.get("format") != "ctranslate2":
            raise UserError(f"{self.folder} holds a {self.meta.get('format')!r} export, not a ctranslate2 one")
        self.src = Tokenizer.from_file(str(self.folder / self.meta["source_tokenizer"]))
        self.tgt = Tokenizer.from_file(str(self.folder / "tokenizer.json"))
        self.src.encode_special_tokens = True  # as ours: "<eos>" typed in a text is text, not the special
        self.translator = ctranslate2.Translator(str(self.folder), device="cpu", intra_threads=threads)
        self.decode = self.meta["decode"]

    def decode_config(self, beam: int | None = None, max_output_len: int | None = None) -> SimpleNamespace:
        """The decoding settings of a call (`Translator.decode_config`'s answer, as far as an export
        has them): the export's own where not given; a bad value is one line."""
        if beam is not None and (isinstance(beam, bool) or not isinstance(beam, int) or beam < 1):
            raise UserError(f"beam must be >= 1, got {beam}")
        if max_output_len is not None and (isinstance(max_output_len, bool) or not isinstance(max_output_len, int)
                                           or max_output_len < 1):
            raise UserError(f"max_length must be >= 1, got {max_output_len}")
        return SimpleNamespace(beam=beam or self.decode["beam"],
                               max_output_len=max_output_len or self.decode["max_output_len"])

    def tokens(self, text: str) -> list[str]:
        return self.src.encode(text.strip(), add_special_tokens=False).tokens + [self.meta["source_ends_with"]]

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(self.tokens(t)) - 1 for t in texts]

    def tokenize(self, texts: Sequence[str]) -> list:
        """The texts carrying their source tokens (`Translator.tokenize`): tokenized once when served."""
        from ...data.tokenizers import Tokenized

        return [Tokenized.of(t, toks, self, len(toks) - 1) for t, toks in ((t, self.tokens(t)) for t in texts)]

    def limit(self, n_source: int, max_output_len: int | None = None) -> int:
        d = self.decode
        cap = d["max_output_len"] if max_output_len is None else max_output_len
        return max(1, min(math.ceil(n_source * d["max_len_ratio"]) + d["max_len_offset"], cap))

    def translate(self, texts: Sequence[str], beam: int | None = None, max_output_len: int | None = None) -> list[str]:
        for i, t in enumerate(texts, 1):
            if not isinstance(t, str) or not t.strip():
                raise UserError(f"sentence {i} is empty: there is nothing to translate")
        beam = self.decode["beam"] if beam is None else beam
        toks = [t.encoded if getattr(t, "encoded_by", None) is self else self.tokens(t) for t in texts]
        longest = self.decode.get("max_input_len")  # refused as ours refuses it (decoding.check_sources)
        for i, t in enumerate(toks, 1):
            if longest is not None and len(t) - 1 > longest:
                raise UserError(f"sentence {i} has {len(t) - 1} tokens, more than max_input_len={longest}; "
                                "split it into shorter sentences (or raise decode.max_input_len)")
        limits = [self.limit(len(t), max_output_len) for t in toks]
        out: list[str] = [""] * len(texts)
        for limit in sorted(set(limits)):
            rows = [i for i, n in enumerate(limits) if n == limit]
            res = self.translator.translate_batch([toks[i] for i in rows], beam_size=beam,
                                                  length_penalty=self.decode["length_penalty"],
                                                  max_decoding_length=limit)
            for i, r in zip(rows, res):
                out[i] = self.tgt.decode([self.tgt.token_to_id(t) for t in r.hypotheses[0]])
        return out
