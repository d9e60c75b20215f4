"""Dynamic int8 quantization of the projections, for CPU inference.

    y = x Wᵀ + b  ->  y ≈ (s_x · q_x)(s_W · q_W)ᵀ + b
    # 动态 int8 量化：权重按输出通道量化为 int8，激活在每次调用时按张量量化，整数乘加后再缩放回浮点

Each weight row (output channel) is stored as int8 with its own scale s_W = max|W_row| / 127
(symmetric); the activations are quantized at every call with a scale measured on that call's
input (dynamic quantization: no calibration data). The integer products run in PyTorch's
quantized engine (fbgemm / oneDNN, chosen by `torch.backends.quantized.engine`; on x86 the
`x86` engine, which uses VNNI where the CPU has it). Activations use 8 bits where that is
safe and 7 (`reduce_range=True`) where it is not: without VNNI the engine adds pairs of
products in 16 bits, which saturate with 8-bit activations (measured on an AVX2 EPYC: 15%
relative error on one projection, 1.8% with 7 bits); with VNNI the sums are 32-bit and 8 bits
halve the rounding error instead (measured on a Xeon with AVX512-VNNI: 1.1-1.2% against
1.8-2.2%). `activation_bits()` measures which holds on this CPU, once, on a fixed random
projection, and says why.

Products of many rows may run faster on another engine: on a Xeon with AMX the `onednn` engine
(AMX int8 tiles) ran 1.3-2.4x the `x86` one at 32-128 rows and 0.65-0.8x at 1 row. `wide_engine()`
measures that once; where it wins, each `Int8Linear` also keeps its weight packed for it and
products of at least `WIDE_MIN_ROWS` rows use that packing.

`quantize_int8(model)` replaces every `nn.Linear` of a model (our `Linear` included) by an
`Int8Linear`; inference only (no gradients), CPU only. Embedding tables and norms stay float.
"""
from __future__ import annotations

import functools
import time
import warnings

import torch
from torch import nn

from ..errors import UserError

__all__ = ["Int8Linear", "quantize_int8", "int8_engine", "QUANTIZE_CHOICES", "check_quantize", "activation_bits",
           "full_range_wins", "wide_engine"]

QUANTIZE_CHOICES = ("none", "int8")
_ENGINE_PREFERENCE = ("x86", "fbgemm", "onednn", "qnnpack")


def check_quantize(quantize: str | None) -> str:
    """'none' (also for None) or 'int8'; anything else is a one-line `UserError`."""
    q = "none" if quantize is None else quantize
    if q not in QUANTIZE_CHOICES:
        raise UserError(f"quantize must be one of {', '.join(QUANTIZE_CHOICES)}, got {quantize!r}")
    return q


def int8_engine() -> str | None:
    """The quantized engine to use (None: this torch build has none)."""
    engines = torch.backends.quantized.supported_engines
    return next((e for e in _ENGINE_PREFERENCE if e in engines), None)


def _per_channel_int8(w: torch.Tensor) -> torch.Tensor:
    scale = (w.abs().amax(1).clamp(min=1e-12) / 127.0).double()  # (out,): s_W per row
    zero = torch.zeros(w.shape[0], dtype=torch.long)
    with warnings.catch_warnings():  # deprecated in favour of torchao, still the packing input here
        warnings.simplefilter("ignore", UserWarning)
        return torch.quantize_per_channel(w, scale, zero, 0, torch.qint8)  # (out, in) int8


# 8-bit activations must cut the probe's error by this much to be chosen: saturation makes it
# many times worse (15% vs 1.8%), no saturation ~0.6x; a near-tie keeps the safe 7 bits.
FULL_RANGE_MAX_ERROR_RATIO = 0.8


def full_range_wins(error_7bit: float, error_8bit: float) -> bool:
    """Whether 8-bit activations are the better choice, from the two probe errors."""
    return error_8bit <= FULL_RANGE_MAX_ERROR_RATIO * error_7bit


def activation_bits(engine: str | None = None) -> tuple[int, str]:
    """`(bits, why)`: 8 when this CPU's int8 kernels sum without saturating (VNNI), else 7.
    Measured once per engine (default: the current one) on a fixed random `(32, 256) x (256, 1024)`
    product (a few ms)."""
    return _activation_bits(engine or torch.backends.quantized.engine)


@functools.lru_cache(maxsize=None)
def _activation_bits(engine: str) -> tuple[int, str]:
    previous = torch.backends.quantized.engine
    try:
        torch.backends.quantized.engine = engine
        g = torch.Generator().manual_seed(0)
        w = torch.randn(1024, 256, generator=g) / 16.0
        x = 3.0 * torch.randn(32, 256, generator=g)  # activations that fill the 8-bit range
        packed = torch.ops.quantized.linear_prepack(_per_channel_int8(w), None)
        ref = x @ w.t()  # (32, 1024)
        err = {bits: float((torch.ops.quantized.linear_dynamic(x, packed, bits == 7) - ref).norm() / ref.norm())
               for bits in (7, 8)}
    finally:
        torch.backends.quantized.engine = previous
    bits = 8 if full_range_wins(err[7], err[8]) else 7
    return bits, (f"int8 probe on engine {engine}: relative error {err[8]:.2%} with 8-bit activations, "
                  f"{err[7]:.2%} with 7 -> {bits} bits")


# From this many rows an int8 product may take the wide engine (batched decoding, encoders).
WIDE_MIN_ROWS = 32
# The wide engine must beat the default one by this much on the probe's 128-row product.
WIDE_MIN_GAIN = 1.2


def _prepack(w: torch.Tensor, bias: torch.Tensor | None, engine: str):
    previous = torch.backends.quantized.engine
    try:
        torch.backends.quantized.engine = engine  # the packing belongs to the engine it was made for
        return torch.ops.quantized.linear_prepack(_per_channel_int8(w), bias)
    finally:
        torch.backends.quantized.engine = previous


def wide_engine(engine: str | None = None) -> tuple[str | None, str]:
    """`(engine or None, why)`: another quantized engine for products of `WIDE_MIN_ROWS` rows or
    more, when a probe on a `(128, 256) x (256, 1024)` product finds it `WIDE_MIN_GAIN` times
    faster than `engine` (default: the current one); None keeps that one for every size."""
    return _wide_engine(engine or torch.backends.quantized.engine)


@functools.lru_cache(maxsize=None)
def _wide_engine(engine: str) -> tuple[str | None, str]:
    other = "onednn"
    if other == engine or other not in torch.backends.quantized.supported_engines:
        return None, f"int8: one engine ({engine}) for every size"
    g = torch.Generator().manual_seed(0)
    weights = [torch.randn(1024, 256, generator=g) / 16.0 for _ in range(4)]
    x = torch.randn(128, 256, generator=g)

    def timed(name: str) -> float:
        packs = [_prepack(w, None, name) for w in weights]
        reduce = activation_bits(name)[0] == 7
        torch.ops.quantized.linear_dynamic(x, packs[0], reduce)  # warm-up (kernel creation)
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for k in range(8):
                torch.ops.quantized.linear_dynamic(x, packs[k % 4], reduce)
            best = min(best, time.perf_counter() - t0)
        return best

    gain = timed(engine) / timed(other)
    chosen = other if gain >= WIDE_MIN_GAIN else None
    return chosen, (f"int8 probe at 128 rows: engine {other} {gain:.2f}x the speed of {engine} -> "
                    f"{other if chosen else engine} from {WIDE_MIN_ROWS} rows")


class Int8Linear(nn.Module):
    """`nn.Linear` for inference with an int8 weight (per output channel) and dynamically
    quantized activations. `weight` / `bias` keep the float originals (for `rows` and for
    code that reads them); `forward` uses only the packed int8 weight."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None):
        super().__init__()
        w = weight.detach().float().contiguous()
        self.out_features, self.in_features = w.shape
        self.weight, self.bias = w, None if bias is None else bias.detach().float().contiguous()
        self._packed = _prepack(w, self.bias, torch.backends.quantized.engine)
        self.reduce_range = activation_bits()[0] == 7  # 7-bit activations where 8 would saturate
        wide = wide_engine()[0]
        self._packed_wide = None if wide is None else _prepack(w, self.bias, wide)  # many-row products
        self.reduce_range_wide = wide is not None and activation_bits(wide)[0] == 7
        self._rows: dict = {}

    @classmethod
    def from_linear(cls, module: nn.Linear) -> "Int8Linear":
        return cls(module.weight, module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x `(..., in)` float32 -> `(..., out)` float32."""
        if x.dtype != torch.float32:
            x = x.float()
        if self._packed_wide is not None and x.numel() >= WIDE_MIN_ROWS * self.in_features:
            return torch.ops.quantized.linear_dynamic(x, self._packed_wide, self.reduce_range_wide)
        return torch.ops.quantized.linear_dynamic(x, self._packed, self.reduce_range)  # see module doc

    def rows(self, start: int, stop: int | None = None) -> "Int8Linear":
        """The int8 projection of weight rows `start:stop` (e.g. W_Q of a fused qkv), built once."""
        key = (start, stop)
        if key not in self._rows:
            b = None if self.bias is None else self.bias[start:stop]
            self._rows[key] = Int8Linear(self.weight[start:stop], b)
        return self._rows[key]

    def extra_repr(self) -> str:
        wide = "" if self._packed_wide is None else f", {wide_engine()[0]} from {WIDE_MIN_ROWS} rows"
        return (f"in_features={self.in_features}, out_features={self.out_features}, int8, "
                f"{7 if self.reduce_range else 8}-bit activations{wide}")


def quantize_int8(model: nn.Module) -> nn.Module:
    """Replace every `nn.Linear` of `model` (in place) by an `Int8Linear`; returns the model,
    in eval mode. A `UserError` when this torch build has no quantized engine."""
    if any(p.device.type != "cpu" for p in model.parameters()):
        raise UserError("int8 quantization runs on the CPU only (torch's dynamic int8 linear has no GPU kernel); "
                        "move the model to the CPU first, or use bf16/fp16 autocast on the GPU")
    engine = int8_engine()
    if engine is None:
        raise UserError("this torch build has no quantized engine (fbgemm/onednn): int8 is not "
                        "available; run without --quantize")
    if torch.backends.quantized.engine != engine:
        torch.backends.quantized.engine = engine
    targets = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    for name, m in targets:
        parent, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent) if parent else model, attr, Int8Linear.from_linear(m))
    return model.eval()
