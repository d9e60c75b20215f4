"""Where a run computes and in which precision. `resolve_device` turns `train.device` into a
torch device (one GPU per torchrun process): any device type torch knows (`cpu`, `cuda`,
`cuda:N`, `mps`, `xpu`, `xpu:N`, ...); one that is not available here is one line naming what is
(`available_devices`). `train.precision: "auto"` takes the autocast dtype the device supports
(`AUTO_PRECISION`): bf16 on a CUDA GPU that supports it (fp16 with a GradScaler on an older
one), bf16 on Intel XPU, fp16 on Apple MPS, bf16 on a CPU with AVX512-BF16 or AMX, else fp32. An explicit "bf16" on a CPU without bf16 instructions still runs, but says that autocast
then emulates bf16: measured ~9x slower than fp32 on an AVX2 EPYC (docs/pretrained.md)."""
from __future__ import annotations

import os

import torch

from scratchformer.errors import UserError


DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu")  # the ones we name; torch.device parses any it knows


def parse_device(name, where: str = "device") -> torch.device:
    """`name` as a torch device, or a one-line UserError when torch knows no such device (its
    availability is `check_available`'s: a recipe written on a GPU machine still loads on a CPU)."""
    try:
        device = torch.device(name) if isinstance(name, str) else None
    except (RuntimeError, ValueError):
        device = None
    if device is None or device.type == "meta":  # meta holds shapes, not numbers: nothing to compute on
        raise UserError(f"{where}={name!r} is not a device torch knows; use cpu, cuda, cuda:N, mps or xpu "
                        f"(available here: {', '.join(available_devices())})")
    return device


def _backend(kind: str):
    """torch.cuda / torch.mps-like module of a device type (None when this torch has none)."""
    if kind == "mps":
        return torch.backends.mps
    return getattr(torch, kind, None)


def available_devices() -> list[str]:
    """Every device this process can compute on, e.g. ['cpu', 'cuda:0', 'cuda:1']."""
    out = ["cpu"]
    for kind in DEVICE_TYPES[1:]:
        backend = _backend(kind)
        try:
            if backend is None or not backend.is_available():
                continue
        except Exception:  # noqa: BLE001 - a backend that cannot even be asked is not available
            continue
        count = getattr(backend, "device_count", None)
        out += [kind] if count is None else [f"{kind}:{i}" for i in range(count())]
    return out


def check_available(device: torch.device, asked: str) -> torch.device:
    """`device` when this process can compute on it, else one line: not available here, and what is."""
    if device.type == "cpu":
        return device
    backend = _backend(device.type)
    try:
        ok = backend is not None and backend.is_available()
        count = getattr(backend, "device_count", None)
        if ok and device.index is not None and count is not None:
            ok = device.index < count()
    except Exception:  # noqa: BLE001
        ok = False
    if not ok:
        raise UserError(f"device '{asked}' is not available here; available: {', '.join(available_devices())}")
    return device


def native_bf16(device: torch.device) -> bool:
    """Whether `device` computes bf16 matrix products in hardware."""
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if device.type == "xpu":
        return True  # every Intel GPU torch supports has bf16 matrix units (XMX)
    if device.type == "mps":
        return False  # Apple GPUs: fp16 is the mixed-precision dtype autocast supports everywhere
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
        if native:
            chosen, why = "bf16", "the device computes in bf16"
        elif device.type == "cpu":
            chosen, why = "fp32", "this CPU has no bf16 instructions (AVX512-BF16/AMX), so bf16 autocast would be emulated and slower"
        elif device.type in ("cuda", "mps"):
            chosen, why = "fp16", f"{'this GPU does not support bf16' if device.type == 'cuda' else 'Apple MPS'}: fp16 autocast with a GradScaler"
        else:
            chosen, why = "fp32", f"no mixed-precision dtype known for {device.type}"
        return chosen, f"precision auto: {chosen} ({why})"
    if asked == "bf16" and device.type == "cpu" and not native_bf16(device):
        return "bf16", ("precision bf16 on a CPU without bf16 instructions (AVX512-BF16/AMX): autocast emulates "
                        "it, ~9x slower than fp32 measured on AVX2; set train.precision=auto or fp32")
    return asked, None


def resolve_device(cfg) -> torch.device:
    """`cfg`: a `TrainConfig` (its device and precision; not imported: config.py parses devices here)."""
    device = parse_device(cfg.device, "train.device")
    if device.type in ("cuda", "xpu") and device.index is None and "LOCAL_RANK" in os.environ:
        device = torch.device(device.type, int(os.environ["LOCAL_RANK"]))  # one GPU per torchrun process
    check_available(device, cfg.device)
    if cfg.precision == "fp16" and device.type == "cpu":
        raise UserError("precision 'fp16' needs a GPU (cuda, mps, xpu); on CPU use 'bf16' or 'fp32'")
    return device
