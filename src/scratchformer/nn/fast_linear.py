"""`Linear` and `linear`: `nn.Linear` / `F.linear` with a oneDNN fast path for float32 on CPU.

Why: torch's CPU float32 matmul goes to MKL's sgemm, which on AMD CPUs runs its AVX2 code.
oneDNN (also inside every x86 torch build) uses AVX-512 there (on a CPU with it): on the 2-core EPYC of our
benchmarks a `(3000, 256) x (256, 1024)` product runs at ~200 GFLOP/s instead of ~90, in the
forward and in both backward products. Same float32 arithmetic, other summation order:
results differ from `F.linear` by float32 rounding (~1e-6 relative).

`linear(x, w, b)` is the function every projection in `scratchformer.nn` calls; it uses
oneDNN when `onednn_blocker` finds no reason not to (the reason is kept in
`last_linear_path_reason`, as PyTorch's transformer.py reports why its fast path was not
taken), else `F.linear`. `use_onednn(False)` turns the path off everywhere. Inference
products (no autograd) use MKL below `inference_min_rows()` rows: 128 with AVX-512, every
size on an AVX2-only CPU, where oneDNN has no wider vectors to win with.

Inference products with few rows (a decoding step, a short encoder input) are bound by reading
the weight, and there its layout matters more than the library: `F.linear` reads W stored
`(out, in)`; a copy stored `(in, out)` (`transposed_copy`, made once per weight) read as
`x @ W_T` is faster for some shapes and row counts and slower for others, and which ones depends
on the CPU: MKL runs its AVX2 code on AMD CPUs and its own AVX-512 code on Intel ones.
`RULES` holds the rule measured for this CPU (`transposed_wins`, `inference_min_rows`;
`python -m benchmarks.linear_layouts` measures them again on any machine);
`use_transposed(False)` turns the layout off.

Memory: oneDNN compiles a kernel ("primitive") for each product shape it meets and keeps it in
two caches of 1,024 entries each (oneDNN's own, `ONEDNN_PRIMITIVE_CACHE_CAPACITY`, and ideep's,
torch's C++ wrapper, `LRU_CACHE_CAPACITY`); a training step makes about 15 (forward and both
backward products of each weight shape), one more set for every new (batch, length) shape, and
the heap around the cached ones cannot be given back. Measured on the benchmark machine (2-core
Xeon with AMX, 2026-12-02), 200 steps of a 1-layer classifier with lengths drawn like real text (49 distinct
lengths): +386 MB RSS at d_model 32 and +745 MB at d_model 256 with the default capacities,
+21 MB and +86 MB with both at 32, for 3-4 ms more a step (a new shape's primitives compiled
again: +25% at d_model 32, +4% at 256; capacity 128 was no faster and kept 5x the memory).
Importing this module sets both to `ONEDNN_CACHE_CAPACITY` unless the environment sets them:
they are read when oneDNN makes its first primitive, so a process that ran oneDNN before
importing scratchformer keeps the defaults.
"""
from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils.weak import WeakIdKeyDictionary


ONEDNN_CACHE_CAPACITY = 32  # primitives kept by each of oneDNN's and ideep's caches (see the module docstring)
for _var in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"):
    os.environ.setdefault(_var, str(ONEDNN_CACHE_CAPACITY))


def _find_kernel():
    if not torch.backends.mkldnn.is_available():
        return None
    try:
        return torch.ops.mkldnn._linear_pointwise  # (x, w, b, attr, scalars, algorithm)
    except (AttributeError, RuntimeError):
        return None


_KERNEL = _find_kernel()
_enabled = _KERNEL is not None
last_linear_path_reason: str | None = None


def use_onednn(enabled: bool = True) -> bool:
    """Switch the oneDNN path on or off for every `linear` call; returns the previous setting
    (`previous = use_onednn(False)` ... `use_onednn(previous)`)."""
    global _enabled
    if enabled and _KERNEL is None:
        raise RuntimeError("this torch build has no oneDNN linear kernel (torch.ops.mkldnn._linear_pointwise)")
    previous, _enabled = _enabled, enabled
    return previous


def onednn_blocker(x: torch.Tensor, weight: torch.Tensor) -> str | None:
    """Why `linear` does not use oneDNN for these arguments (None when it does)."""
    if _KERNEL is None:
        return "this torch build has no oneDNN linear kernel"
    if not _enabled:
        return "turned off with use_onednn(False)"
    if x.device.type != "cpu":
        return f"tensors are on {x.device.type}, the oneDNN path is for CPU"
    if x.dtype != torch.float32 or weight.dtype != torch.float32:
        return f"dtype {x.dtype}/{weight.dtype}: the path is for float32 (bf16 already runs on oneDNN)"
    if torch.is_autocast_enabled("cpu"):
        return "CPU autocast is on: it casts to bfloat16 and picks the kernel itself"
    if x.numel() == 0:
        return "empty input"
    return None


def _matmul_t(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`a @ b.T + bias` on oneDNN; a `(..., K)`, b `(N, K)`; strided views are fine."""
    return _KERNEL(a, b, bias, "none", [], "")


class _OneDNNLinear(torch.autograd.Function):
    """`x @ w.T + b` whose forward and both backward products run on oneDNN."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _matmul_t(x, weight, bias)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        grad_x = grad_w = grad_b = None
        grad_2d = grad.reshape(-1, grad.shape[-1])  # (M, N)
        if ctx.needs_input_grad[0]:
            grad_x = _matmul_t(grad, weight.t())  # (..., N) x (N, K) -> (..., K)
        if ctx.needs_input_grad[1]:
            x_2d = x.reshape(-1, x.shape[-1])  # (M, K)
            grad_w = _matmul_t(grad_2d.t(), x_2d.t())  # (N, M) x (M, K) -> (N, K)
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = grad_2d.sum(0)  # (N,)
        return grad_x, grad_w, grad_b


# The oneDNN projection as a `torch.library` custom op with a fake (shape-only) implementation,
# so that torch.compile / Dynamo traces through `linear` as one opaque node instead of failing
# on `mkldnn._linear_pointwise` (Inductor has no lowering for its `Scalar?` list argument).
# Eager code keeps calling the kernel directly: the custom op's Python dispatch costs ~10 µs a call.
if _KERNEL is not None:
    @torch.library.custom_op("scratchformer::onednn_linear", mutates_args=())
    def _onednn_linear_op(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return _KERNEL(x, weight, bias, "none", [], "")

    @_onednn_linear_op.register_fake
    def _(x, weight, bias):
        return x.new_empty((*x.shape[:-1], weight.shape[0]))


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear`, on oneDNN where `onednn_blocker` allows it."""
    global last_linear_path_reason
    reason = onednn_blocker(x, weight)
    if torch.compiler.is_compiling():  # no global to write under a trace; the custom op for inference
        if reason is None and not (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)):
            return torch.ops.scratchformer.onednn_linear(x, weight, bias)
        return F.linear(x, weight, bias)
    last_linear_path_reason = reason
    if reason is not None:
        return F.linear(x, weight, bias)
    needs_grad = torch.is_grad_enabled() and (
        x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad))
    if needs_grad:
        return _OneDNNLinear.apply(x, weight, bias)
    rows = x.numel() // x.shape[-1]
    if rows < inference_min_rows():  # an inference product where MKL is faster
        if _transposed_for(weight, rows):
            last_linear_path_reason = transposed_reason(rows)
            return matmul_transposed(x, transposed_copy(weight), bias)
        last_linear_path_reason = inference_mkl_reason(rows)
        return F.linear(x, weight, bias)
    return _matmul_t(x, weight, bias)


# ----------------------------------------------------------------------------- weight layout

TRANSPOSED_MAX_NUMEL = 1 << 24  # a transposed copy doubles a weight's memory: not for the giant ones
_transposed_enabled = True
_TRANSPOSED: WeakIdKeyDictionary = WeakIdKeyDictionary()  # weight -> ((its version, steps), its (in, out) copy)


def use_transposed(enabled: bool = True) -> bool:
    """Switch the transposed-weight path of few-row inference products on or off; returns the
    previous setting."""
    global _transposed_enabled
    previous, _transposed_enabled = _transposed_enabled, enabled
    return previous


def _version(t: torch.Tensor) -> int:
    try:
        return t._version
    except RuntimeError:  # an inference tensor keeps no version counter (nor can it change outside inference)
        return -1


# Not every in-place change bumps a tensor's version counter: torch's fused AdamW (one kernel over
# every parameter) and writes through `.data` leave it as it was. So a copy is also made anew after
# any optimizer step (a global hook counts them); after writing weights through `.data`, call
# `forget_transposed()`.
_optimizer_steps = 0


def _count_optimizer_step(optimizer, args, kwargs) -> None:
    global _optimizer_steps
    _optimizer_steps += 1


register_optimizer_step_post_hook(_count_optimizer_step)


def forget_transposed() -> None:
    """Drop every transposed copy (they are made again when next needed)."""
    _TRANSPOSED.clear()


def transposed_copy(weight: torch.Tensor) -> torch.Tensor:
    """`weight (out, in)` as a contiguous `(in, out)` copy, made once per weight and made anew
    after the weight changed in place (its version counter moved, or an optimizer stepped)."""
    version = (_version(weight), _optimizer_steps)
    hit = _TRANSPOSED.get(weight)
    if hit is not None and hit[0] == version:
        return hit[1]
    copy = weight.detach().t().contiguous()  # (in, out)
    _TRANSPOSED[weight] = (version, copy)
    return copy


def matmul_transposed(x: torch.Tensor, weight_t: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`x (..., in) @ weight_t (in, out) + bias`: `F.linear` with the weight stored transposed."""
    if x.dim() == 2:  # a decode step's (rows, in): one call, no reshape around it
        return torch.mm(x, weight_t) if bias is None else torch.addmm(bias, x, weight_t)
    K, N = weight_t.shape
    x2 = x.reshape(-1, K)  # (M, in): a view for the usual contiguous input
    out = torch.mm(x2, weight_t) if bias is None else torch.addmm(bias, x2, weight_t)  # (M, out)
    return out.view(*x.shape[:-1], N)


def _transposed_for(weight: torch.Tensor, rows: int) -> bool:
    if not _transposed_enabled or weight.numel() > TRANSPOSED_MAX_NUMEL:
        return False
    if weight.device.type != "cpu" or weight.dtype != torch.float32 or weight.dim() != 2:
        return False
    return transposed_wins(weight.shape[0], weight.shape[1], rows)


def transposed_wins(out_features: int, in_features: int, rows: int, rules: "InferenceRules | None" = None) -> bool:
    """Whether `x @ W_T` (the weight stored `(in, out)`) is the faster inference product for
    `rows` rows on this CPU (`RULES`, or the `rules` given)."""
    r = RULES if rules is None else rules
    if not r.transposed_min_rows <= rows <= r.transposed_max_rows:
        return False
    return out_features > in_features or not r.transposed_needs_more_outputs


def transposed_reason(rows: int) -> str:
    return f"inference on {rows} rows: the weight stored transposed is faster for this shape ({RULES.name}; transposed_wins)"


@dataclass(frozen=True)
class InferenceRules:
    """Which kernel an inference product takes, as measured on one kind of CPU (one thread,
    16 weights of a shape in rotation, as a decode step streams its weights;
    `benchmarks/results/linear_layouts.md`, docs/speed.md)."""

    name: str
    onednn_min_rows: float  # inference products with at least this many rows run on oneDNN, fewer on MKL
    transposed_min_rows: int  # the transposed weight is read for rows in [min, max] ...
    transposed_max_rows: float
    transposed_needs_more_outputs: bool  # ... and only for weights with out > in when True
    measured: str


# MKL on an AMD CPU runs its AVX2 code. On the 2-core AVX2-only EPYC (2026-12-01), time of the
# transposed layout over F.linear's: 0.43-0.70 at 1 row when out > in, 1.1-1.8 when in > out;
# 0.63-0.85 at 32 rows for (768 | 2000, 256), up to 1.08 for (1024, 256); 0.7-1.1 at 128 rows.
# MKL was as fast as oneDNN or faster at every inference size there (1.03-1.31x from 128 to
# 4096 rows, 1.3-1.7x at 1-32 rows).
AMD_AVX2 = InferenceRules("MKL's AVX2 code, AVX2-only AMD CPU", float("inf"), 1, 32, True,
                          "2-core AMD EPYC, AVX2 only, 2026-12-01")
# The same MKL code on an AMD CPU with AVX-512, where oneDNN's AVX-512 code wins from 128 rows
# (1.66x MKL at 1 row, 1.38x at 32, equal at 128 and 512 for (M, 256) x (256, 1024); shared EPYC
# Zen 5). The layout rule is the AVX2 one: it is MKL's code that reads the layout.
AMD_AVX512 = InferenceRules("MKL's AVX2 code, AMD CPU with AVX-512", 128, 1, 32, True,
                            "2-core AMD EPYC Zen 5 (oneDNN rows); layout as on the AVX2 EPYC")
# MKL's own AVX-512 code on an Intel Xeon (2-core, AVX-512 + AMX, 2026-12-01, two runs): F.linear
# reads (out, in) at full speed with 1-4 rows (the transposed copy 0.63-1.03 for out > in) and
# the transposed copy wins from 32 rows for every shape but (1024, 256) (1.05-1.39 at 32 rows,
# 0.84 for that one; 1.10-1.23 at 128; a tie, 1.01-1.05, at 512 and 4096). oneDNN never wins an
# inference product there (0.44-0.74 at 1-32 rows, 0.82-1.00 at 128, 0.92-1.05 at 512-4096).
INTEL = InferenceRules("MKL's AVX-512 code, Intel CPU", float("inf"), 32, 256, False,
                       "2-core Intel Xeon, AVX-512 + AMX, 2026-12-01")


def _cpu_vendor() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("vendor_id"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def rules_for(vendor: str, capability: str) -> InferenceRules:
    """The measured rules for a CPU vendor (`/proc/cpuinfo`'s vendor_id) and torch's capability."""
    if "Intel" in vendor:
        return INTEL
    return AMD_AVX512 if capability.startswith(("AVX512", "AMX")) else AMD_AVX2


RULES = rules_for(_cpu_vendor(), torch.backends.cpu.get_cpu_capability())
_ROWS_IF_UNKNOWN = 128  # a projection planned without a row count is taken as a large product


def inference_min_rows() -> float:
    """Inference products with fewer rows than this run on MKL (`F.linear`), the rest on oneDNN."""
    return RULES.onednn_min_rows


def inference_mkl_reason(rows: int) -> str:
    if RULES.onednn_min_rows == float("inf"):
        return f"inference on this CPU ({RULES.name}): MKL's sgemm is as fast or faster at every size"
    return f"inference on fewer than {RULES.onednn_min_rows} rows: MKL's sgemm is faster there ({RULES.name})"


def projection(module: nn.Module, sample: torch.Tensor | None = None, rows: int | None = None):
    """`x -> module(x)` as one closure whose kernel is chosen now, once, for inputs like
    `sample` (device, dtype, autocast) with about `rows` rows per call, instead of by
    `onednn_blocker` at every call: what a decode loop calls thousands of times. A module
    with its own kernel (an int8 projection, `quant.Int8Linear`) is returned as it is."""
    if not isinstance(module, nn.Linear):
        return module
    return _planned(module.weight, module.bias, sample, rows)


def row_projection(module: nn.Module, start: int, stop: int | None, sample: torch.Tensor | None = None,
                   rows: int | None = None):
    """`projection` of rows `start:stop` of the module's weight (and bias): e.g. W_Q or
    [W_K; W_V] of a fused `qkv_proj`."""
    if not isinstance(module, nn.Linear):
        return module.rows(start, stop)
    b = module.bias
    w = module.weight
    return _planned(w[start:stop], None if b is None else b[start:stop], sample, rows,
                    full_weight=w, columns=slice(start, stop))


def _planned(weight: torch.Tensor, bias: torch.Tensor | None, sample: torch.Tensor | None,
             rows: int | None = None, full_weight: torch.Tensor | None = None, columns: slice | None = None):
    """The kernel for `weight` (rows `columns` of `full_weight`, when given: its transposed copy
    is made once for the whole matrix and sliced by columns, a strided view)."""
    sample = weight if sample is None else sample
    if torch.is_grad_enabled() and (weight.requires_grad or sample.requires_grad):
        return lambda x: linear(x, weight, bias)  # autograd: the per-call path
    if (rows if rows is not None else _ROWS_IF_UNKNOWN) < inference_min_rows():
        if rows is not None and sample.device.type == "cpu" and sample.dtype == torch.float32 \
                and not torch.is_autocast_enabled("cpu") and _transposed_for(weight, rows):
            weight_t = transposed_copy(weight) if full_weight is None else transposed_copy(full_weight)[:, columns]
            return lambda x: matmul_transposed(x, weight_t, bias)  # (in, out): faster for this shape
        return lambda x: F.linear(x, weight, bias)  # MKL wins here (RULES)
    if onednn_blocker(sample, weight) is None:
        kernel = _KERNEL
        return lambda x: kernel(x, weight, bias, "none", [], "")
    return lambda x: F.linear(x, weight, bias)


class Linear(nn.Linear):
    """`nn.Linear` (same parameters, same state_dict keys) that calls `linear`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
