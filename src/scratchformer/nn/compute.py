"""One precision knob for inference, chosen at load: `compute_type`, with CTranslate2's names.

    float32    the model as trained
    bfloat16   a bfloat16 copy of the model, weights and activations bf16 end to end, no autocast
               (autocast's casts around every product and norm ate bf16's gain: 0.94x fp32 at 32
               rows against 1.46x for the copy, benchmarks/results/translation_engines.md)
    int8       the projections in int8, float32 activations (`nn/quant.py`, CPU)
    auto       per batch size, whichever a micro-probe on this CPU measures faster: float32 or
               the bf16 copy (int8 is never chosen by itself: it changes the numbers more)

`Compute(model, compute_type, width)` holds a loaded model under its compute type: `model_for(rows)`
is the module to run a batch of `rows` token rows with, what it computes in and why, returned
to the caller (never stored on the shared object: one model serves several threads).

The probe first asks whether the CPU has bf16 matrix units at all (`bf16_units`: AVX512-BF16 or
AMX-BF16 on Linux); without them `auto` is float32 without timing anything (bf16 there is emulated
and ran 0.26-0.61x fp32 on the AVX2 EPYC). With them it times one post-LN block of `rows` rows in
both types and keeps bf16 only when it wins by `BF16_MIN_GAIN`.
# 推理精度只有一个旋钮（compute_type），在加载时选定；auto 由本机实测决定
"""
from __future__ import annotations

import copy
import functools
import threading
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import UserError

COMPUTE_TYPES = ("auto", "float32", "bfloat16", "int8")
# bf16 must win the probe by this much: a near-tie keeps fp32 (exact, and the same output on
# every run of the same machine). On the 2-core AVX2 EPYC (no bf16 instructions) bf16 decoding
# ran 0.61x at batch 1 and 0.26x at batch 32, and the probe picks fp32. On the 2-core Xeon with
# AMX, the bf16 model decoded (hsk size, one thread) at 0.68x fp32 at batch 1, 1.46x at 32 rows
# (batch 32 greedy) and 1.63x at 128 rows (batch 32, beam 4).
BF16_MIN_GAIN = 1.2
_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def compute_type_from(compute_type: str | None = None, quantize: str | None = None,
                      default: str | None = "float32", stacklevel: int = 3) -> str | None:
    """The compute type asked for: `compute_type`, else the deprecated `quantize="int8"`
    (a DeprecationWarning), else `default` (None: the caller's own default, e.g. translation's
    recipe). A bad name, or both spellings disagreeing, is a one-line UserError."""
    old = None
    if quantize not in (None, "none"):
        if quantize != "int8":
            raise UserError(f"quantize must be one of none, int8, got {quantize!r}")
        warnings.warn("quantize='int8' is deprecated: pass compute_type='int8' (one precision knob at load: "
                      "auto, float32, bfloat16, int8)", DeprecationWarning, stacklevel=stacklevel)
        old = "int8"
    if compute_type is not None and old is not None and compute_type != old:
        raise UserError(f"compute_type={compute_type!r} and quantize={quantize!r} disagree; pass compute_type only")
    value = compute_type if compute_type is not None else old if old is not None else default
    if value is not None and value not in COMPUTE_TYPES:
        raise UserError(f"compute_type must be one of {', '.join(COMPUTE_TYPES)}, got {value!r}")
    return value


@functools.lru_cache(maxsize=1)
def bf16_units() -> tuple[bool, str]:
    """Whether this CPU has bf16 matrix units (and how we know). Linux: /proc/cpuinfo's flags;
    elsewhere unknown, so the timing decides (True)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), None)
    except OSError:
        flags = None
    if flags is None:
        return True, "CPU flags unknown"
    have = [f for f in _CPU_FLAGS if f in flags]
    return (True, "has " + " and ".join(have)) if have else (False, "no avx512_bf16 or amx_bf16")


def choose_compute(rows: int, width: int, device: str = "cpu") -> tuple[str, str]:
    """`("float32" | "bfloat16", why)` for `rows` token rows through a model of width `width`."""
    if device != "cpu":
        return "float32", f"device {device}: the probe is for the CPU (pass compute_type='bfloat16' to choose it)"
    units, how = bf16_units()
    if not units:
        return "float32", f"this CPU has no bf16 matrix units ({how}): float32"
    rows = 1 << max(0, (rows - 1).bit_length())  # power-of-two bucket: one probe per bucket
    gain = _bf16_gain(rows, width)
    choice = "bfloat16" if gain >= BF16_MIN_GAIN else "float32"
    return choice, f"probe at {rows} rows x d_model {width}: bf16 {gain:.2f}x the speed of fp32 -> {choice}"


@functools.lru_cache(maxsize=64)
def _bf16_gain(rows: int, d: int) -> float:
    """fp32 time / bf16 time of one post-LN block on `rows` rows (a fused-qkv-sized product, two
    layer norms, the feed-forward pair): a few ms, once per size bucket. A block, not a lone
    product: the norms and the small ops between the products count too."""
    g = torch.Generator().manual_seed(0)
    weights = [torch.randn(o, i, generator=g) / i ** 0.5 for o, i in ((3 * d, d), (4 * d, d), (d, 4 * d))]
    norm = (torch.ones(d), torch.zeros(d))
    x = torch.randn(rows, d, generator=g)

    def block(h, w_qkv, w_in, w_out, norm_w, norm_b):  # (rows, d) -> (rows, d)
        h = F.layer_norm(h + F.linear(h, w_qkv)[:, :d], (d,), norm_w, norm_b)
        return F.layer_norm(h + F.linear(F.relu(F.linear(h, w_in)), w_out), (d,), norm_w, norm_b)

    def timed(dtype: torch.dtype) -> float:
        args = [t.to(dtype) for t in (x, *weights, *norm)]
        best = float("inf")
        with torch.inference_mode():
            block(*args)  # warm-up (kernel creation)
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(4):
                    block(*args)
                best = min(best, time.perf_counter() - t0)
        return best

    timed(torch.bfloat16)  # warm-up
    return timed(torch.float32) / timed(torch.bfloat16)


class Compute:
    """A loaded model under one compute type. `model` is what was loaded (its projections made
    int8 here for "int8"); the bf16 copy is made once, on first use, beside it."""

    def __init__(self, model: nn.Module, compute_type: str, width: int):
        self.model, self.compute_type, self.width = model.eval(), compute_type, width
        if compute_type == "int8":
            from .quant import quantize_int8

            quantize_int8(model)
        self._bf16: nn.Module | None = None
        self._lock = threading.Lock()  # the copy is made once even when two threads ask at once

    def choose(self, rows: int) -> tuple[str, str]:
        """What a batch of `rows` token rows computes in, and why (nothing is stored)."""
        if self.compute_type != "auto":
            return self.compute_type, f"compute_type={self.compute_type!r} was asked for"
        return choose_compute(rows, self.width)

    def model_for(self, rows: int) -> tuple[nn.Module, str, str]:
        """(the module to run, its compute type, why) for a batch of `rows` token rows."""
        kind, why = self.choose(rows)
        return (self.bf16() if kind == "bfloat16" else self.model), kind, why

    def bf16(self) -> nn.Module:
        """The model with its weights in bfloat16 (made once; the float32 one is untouched)."""
        with self._lock:
            if self._bf16 is None:
                self._bf16 = copy.deepcopy(self.model).to(torch.bfloat16).eval()
        return self._bf16
