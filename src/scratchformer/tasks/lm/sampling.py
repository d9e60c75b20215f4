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


# The ranges a sampler value must lie in, stated for the float32 numbers the sampler really
# computes with (the logits are float32): a temperature that is finite in JSON can be inf or 0
# in float32 (1e39, 1e-46), and below MIN_TEMPERATURE ordinary logits divided by it overflow.
MIN_TEMPERATURE, MAX_TEMPERATURE = 1e-6, 1e6
MAX_SEED = 2**64 - 1  # torch.Generator.manual_seed takes 64 bits
MAX_TOP_K = 2**63 - 1  # an int64 (k >= the vocabulary keeps every token)
MAX_NEW_TOKENS = 1_000_000  # per call: beyond it a request is a mistake, not a wish


def _as_float32(x: float) -> float:
    return float(torch.tensor(float(x), dtype=torch.float32))


def _in_float32(x: float) -> str:
    """' (inf in float32)' when float32 turns `x` into something else in kind, else ''."""
    f = _as_float32(x)
    if math.isfinite(x) and (not math.isfinite(f) or (f == 0 and x != 0)):
        return f" ({f:g} in float32)"
    return ""


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check_sampling(temperature: float, top_k: int | None, top_p: float | None, *, seed: int | None = None,
                   max_new_tokens: int | None = None) -> None:
    """Every value that reaches the sampler or its random generator, range-checked where it
    enters (the CLI's flags, the server's request fields, the Python API), so that a bad one
    is a one-line `UserError` naming the value and its range instead of a traceback mid-way."""
    if not _is_number(temperature) or not (
            temperature == 0 or _as_float32(MIN_TEMPERATURE) <= _as_float32(temperature) <= _as_float32(MAX_TEMPERATURE)):
        shown = temperature if not _is_number(temperature) else f"{temperature:g}{_in_float32(temperature)}"
        raise UserError(f"temperature must be 0 (greedy) or between {MIN_TEMPERATURE:g} and {MAX_TEMPERATURE:g} "
                        f"(the float32 logits are divided by it), got {shown}")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K):
        raise UserError(f"top_k must be an integer from 1 (greedy) to 2**63-1 (k >= the vocabulary keeps every "
                        f"token), got {top_k}")
    if top_p is not None and (not _is_number(top_p) or math.isnan(top_p) or not 0.0 < _as_float32(top_p) <= 1.0):
        shown = top_p if not _is_number(top_p) else f"{top_p:g}{_in_float32(top_p)}"
        raise UserError(f"top_p must be in (0, 1] (1 = no nucleus cut) as a float32, got {shown}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED):
        raise UserError(f"seed must be an integer from 0 to 2**64-1 = {MAX_SEED} (the generator's 64 bits), "
                        f"got {seed}")
    if max_new_tokens is not None and (isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int)
                                       or not 0 <= max_new_tokens <= MAX_NEW_TOKENS):
        raise UserError(f"max_new_tokens must be an integer from 0 to {MAX_NEW_TOKENS:,}, got {max_new_tokens}")


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
