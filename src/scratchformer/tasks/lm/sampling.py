"""Choosing the next token (greedy, temperature, top-k, nucleus) and streaming text out."""
from __future__ import annotations

import math

import torch

from ...data.tokenizers import Tokenizer
from ...errors import UserError


def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
    """logits `(B, V)` -> next ids `(B,)`. temperature 0 = greedy (argmax); top_k keeps the k
    most likely tokens; top_p keeps the smallest set whose probability reaches p (nucleus)."""
    check_sampling(temperature, top_k, top_p)
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        before = probs.cumsum(-1) - probs  # mass of the tokens ranked above each one
        drop_sorted = before >= top_p  # the first token is always kept (before = 0)
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    probs = logits.softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    if not isinstance(temperature, (int, float)) or not math.isfinite(temperature) or temperature < 0:
        raise UserError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1):
        raise UserError(f"top_k must be an integer >= 1 (1 = greedy), got {top_k}")
    if top_p is not None and not (0.0 < top_p <= 1.0):
        raise UserError(f"top_p must be in (0, 1] (1 = no nucleus cut), got {top_p}")


class _IncrementalDecoder:
    """New text for each new token. Byte-level BPE can split one character across tokens,
    so text ending in an incomplete character (U+FFFD) is held back until it completes."""

    def __init__(self, tok: Tokenizer):
        self.tok, self.ids, self.emitted = tok, [], 0

    def push(self, token: int) -> str:
        if self.tok.kind == "char":
            return self.tok.decode([token])
        self.ids.append(token)
        text = self.tok.decode(self.ids)
        if text.endswith("\ufffd"):
            return ""
        new, self.emitted = text[self.emitted :], len(text)
        return new

    def flush(self) -> str:
        if self.tok.kind == "char" or not self.ids:
            return ""
        text = self.tok.decode(self.ids)
        new, self.emitted = text[self.emitted :], len(text)
        return new
