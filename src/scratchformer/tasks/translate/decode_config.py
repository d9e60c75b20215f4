"""What a decode is asked to do: `DecodeConfig` (beam, lengths, precision, the decoding path),
the ids no decoder emits, and each sentence's output limit (`length_limits`). Read by the search
(decoding.py) and the static step (static_step.py)."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ...config import JsonConfig
from ...data.tokenizers import BOS_ID, CLS_ID, PAD_ID
from ...errors import UserError


@dataclass
class DecodeConfig(JsonConfig):
    beam: int = 5  # 1 = greedy
    length_penalty: float = 1.0  # beam ranking: score / length**length_penalty
    max_len_ratio: float = 1.5  # output limit: ratio * source length + offset tokens
    max_len_offset: int = 10
    max_output_len: int = 256  # hard cap on output tokens
    max_input_len: int = 256  # longer sources are refused with a UserError
    early_stop: bool = True
    use_cache: bool = True
    batch_tokens: int = 4000  # source tokens (times beam) decoded together
    # "bf16": a bfloat16 copy of the model (log-probs in fp32; `Translator.bf16_model`); "auto": whichever a
    # micro-probe on this CPU measures faster for the decode's size (`choose_precision`)
    precision: str = "auto"
    lean: bool = True  # the lean search and decode step (False: the readable reference)
    # torch.compile the lean step (Inductor; the first decodes compile for seconds to a minute).
    # Off by default: on the CPU only batch-1 greedy gained (~14%, benchmarks/results/epyc-avx2/compiled_decode.md)
    compile: bool = False
    # the static compiled step (nn/static.py: fixed shape buckets, K/V buffers written in place,
    # compiled ahead of time by AOTInductor, one package per bucket kept in the cache folder):
    # "on" (or true): compile a bucket the first time it is met (seconds to a minute each);
    # "auto": in float32 on the CPU, where the bucket's package is ready (built in this process or
    # stored): a one-off command never waits for a compile; `serve` builds its buckets at start;
    # "off" (or false): the lean step. Falls back to the lean step, with one warning, where a
    # model cannot use it or the compiler fails
    static: bool | str = "auto"
    # with `static`: weight-only int8 projections (per-output-channel scales, float activations;
    # a quarter of the weight bytes a batch-1 step reads)
    static_int8: bool = False

    def __post_init__(self) -> None:
        if self.beam < 1:
            raise UserError(f"beam must be >= 1, got {self.beam}")
        if self.max_len_ratio < 0 or self.max_len_offset < 0 or self.max_output_len < 1:
            raise UserError("max_len_ratio and max_len_offset must be >= 0 and max_output_len >= 1")
        if self.max_input_len < 1 or self.batch_tokens < 1:
            raise UserError("max_input_len and batch_tokens must be >= 1")
        if isinstance(self.static, bool):  # the earlier spelling
            self.static = "on" if self.static else "off"
        if self.static not in ("on", "off", "auto"):
            raise UserError(f"decode static must be 'on', 'off' or 'auto' (or true/false), got {self.static!r}")
        if self.precision not in ("fp32", "bf16", "auto"):
            raise UserError(f"decode precision must be 'fp32', 'bf16' or 'auto', got {self.precision!r}")


# Ids a decoder must never emit: padding, <bos> and <cls> are not outputs.
_BANNED = (PAD_ID, BOS_ID, CLS_ID)


def length_limits(src: torch.Tensor, cfg: DecodeConfig, pad_id: int = PAD_ID) -> torch.Tensor:
    """`(B,)` maximum number of output tokens (without <eos>) for each source row. `pad_id`:
    the source's padding id (`model.src_pad_id`: 1 for an XLM-R encoder, whose `<s> .. </s>`
    count as two source tokens where ours have one <eos>)."""
    n = (src != pad_id).sum(-1).double()
    limit = torch.ceil(n * cfg.max_len_ratio).long() + cfg.max_len_offset
    return limit.clamp(min=1, max=cfg.max_output_len)
