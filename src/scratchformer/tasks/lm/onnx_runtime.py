"""An exported language model (`scratchformer export --format onnx`) as the LM's inference object:
what `serve` opens for an lm export (the face's `runtime`), with the methods of `LanguageModel`
that serving asks for (`count_tokens`, `encode_prompt`, `generate` with streaming), run by ONNX
Runtime through the folder's own `generate.py` logic (onnx_generate.py). No torch in the loop.

The export samples as the run does (temperature, top_k, top_p; numpy's generator, so a seed gives
other tokens than torch's): a request the run folder answers, its export answers too."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from ...errors import UserError


class OnnxLanguageModel:
    def __init__(self, folder: str | Path, threads: int | None = None):
        try:
            import onnxruntime  # noqa: F401
        except ImportError:
            raise UserError("serving an ONNX export needs onnxruntime: pip install 'scratchformer[export]'") from None
        from .onnx_generate import ExportedLM

        folder = Path(folder)
        if not (folder / "model.onnx").is_file():
            raise UserError(f"{folder} has no model.onnx: pass a folder written by `scratchformer export --format onnx`")
        try:
            self.exported = ExportedLM(folder, threads)
        except (ValueError, KeyError, OSError) as e:
            raise UserError(f"{folder}: not a readable language-model export ({e})") from None
        self.context = self.exported.window

    def count_tokens(self, text: str) -> int:
        return len(self.exported.encode(text))

    def tokenize(self, texts) -> list:
        """The prompts carrying their ids (`LanguageModel.tokenize`): tokenized once when served."""
        from ...data.tokenizers import Tokenized

        return [Tokenized.of(t, ids, self, len(ids)) for t, ids in ((t, self.exported.encode(t)) for t in texts)]

    def encode_prompt(self, prompt: str) -> tuple[list[int], list[str]]:
        if not isinstance(prompt, str) or prompt == "":
            raise UserError("the prompt is empty; give some text to continue")
        if getattr(prompt, "encoded_by", None) is self:  # a served prompt: tokenized at the limit check
            return list(prompt.encoded), []
        return self.exported.encode(prompt), []

    def generate(self, prompt: str, max_new_tokens: int = 200, temperature: float = 1.0,
                 top_k: int | None = None, top_p: float | None = None, seed: int | None = None,
                 stream: Callable[[str], None] | None = None, warn: Callable[[str], None] | None = None) -> str:
        """The continuation of `prompt`; `stream(piece)` with each new piece of text (a piece is
        sent once the ids so far decode to more text: a character split over ids waits)."""
        ids, _ = self.encode_prompt(prompt)
        new: list[int] = []
        sent = [""]

        def on_token(token: int) -> None:
            new.append(token)
            text = self.exported.decode(new)
            if stream is not None and len(text) > len(sent[0]) and not text.endswith("\ufffd"):
                stream(text[len(sent[0]):])
                sent[0] = text

        self.exported.generate_ids(ids, max_new_tokens, temperature, seed, on_token, top_k=top_k, top_p=top_p)
        text = self.exported.decode(new)
        if stream is not None and len(text) > len(sent[0]):
            stream(text[len(sent[0]):])
        return text
