"""Where a run computes and in which precision. `resolve_device` turns `train.device` into a
torch device (one GPU per torchrun process). `train.precision: "auto"` takes bf16 autocast where
the hardware computes in bf16 (a CUDA GPU that supports it; a CPU with AVX512-BF16 or AMX), else
fp32. An explicit "bf16" on a CPU without bf16 instructions still runs, but says that autocast
then emulates bf16: measured ~9x slower than fp32 on an AVX2 EPYC (docs/pretrained.md)."""
from __future__ import annotations

import os

import torch

from scratchformer.errors import UserError
from scratchformer.train.config import TrainConfig


def native_bf16(device: torch.device) -> bool:
    """Whether `device` computes bf16 matrix products in hardware."""
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    try:  # private helpers of torch.cpu (present since 2.1); /proc/cpuinfo when they are gone
        return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())
    except AttributeError:
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                flags = f.read()
        except OSError:
            return False
        return "avx512_bf16" in flags or "amx_bf16" in flags


def resolve_precision(asked: str, device: torch.device) -> tuple[str, str | None]:
    """(the precision to train in, a one-line note to print or None)."""
    if asked == "auto":
        native = native_bf16(device)
        chosen = "bf16" if native else "fp32"
        why = ("the device computes in bf16" if native else
               "this CPU has no bf16 instructions (AVX512-BF16/AMX), so bf16 autocast would be emulated and slower"
               if device.type == "cpu" else "this GPU does not support bf16")
        return chosen, f"precision auto: {chosen} ({why})"
    if asked == "bf16" and device.type == "cpu" and not native_bf16(device):
        return "bf16", ("precision bf16 on a CPU without bf16 instructions (AVX512-BF16/AMX): autocast emulates "
                        "it, ~9x slower than fp32 measured on AVX2; set train.precision=auto or fp32")
    return asked, None


def resolve_device(cfg: TrainConfig) -> torch.device:
    device = torch.device(cfg.device)
    if device.type == "cuda" and device.index is None and "LOCAL_RANK" in os.environ:
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))  # one GPU per torchrun process
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device '{cfg.device}' was asked for but CUDA is not available; use device 'cpu'")
    if cfg.precision == "fp16" and device.type != "cuda":
        raise UserError("precision 'fp16' needs a CUDA device; on CPU use 'bf16' or 'fp32'")
    return device
