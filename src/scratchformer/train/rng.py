"""RNG states of python, numpy and torch: seed, capture, restore, fork.

Captured states hold only tensors and plain values, so a ``torch.save``'d checkpoint containing
them loads with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import contextlib
import math
import random

import numpy as np
import torch

__all__ = ["seed_everything", "get_rng_state", "set_rng_state", "forked_rng"]


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def get_rng_state(device: torch.device) -> dict:
    """RNG states as tensors and plain values only (loadable with weights_only=True)."""
    py_version, py_internal, py_gauss = random.getstate()
    np_name, np_keys, np_pos, np_has_gauss, np_cached = np.random.get_state()
    rng = {
        "python_version": py_version,
        "python_state": torch.tensor(py_internal, dtype=torch.int64),
        "python_gauss": py_gauss,
        "numpy_name": str(np_name),
        "numpy_keys": torch.from_numpy(np_keys.astype(np.int64)),
        "numpy_pos": int(np_pos),
        "numpy_has_gauss": int(np_has_gauss),
        "numpy_cached_gaussian": float(np_cached),
        "torch": torch.get_rng_state(),
    }
    if device.type == "cuda":
        rng["cuda"] = torch.cuda.get_rng_state_all()
    return rng


def set_rng_state(rng: dict, device: torch.device) -> None:
    random.setstate(
        (rng["python_version"], tuple(int(x) for x in rng["python_state"].tolist()), rng["python_gauss"])
    )
    np.random.set_state(
        (
            rng["numpy_name"],
            rng["numpy_keys"].numpy().astype(np.uint32),
            rng["numpy_pos"],
            rng["numpy_has_gauss"],
            rng["numpy_cached_gaussian"],
        )
    )
    torch.set_rng_state(rng["torch"])
    if device.type == "cuda" and "cuda" in rng:
        torch.cuda.set_rng_state_all(rng["cuda"])


@contextlib.contextmanager
def forked_rng(device: torch.device):
    """Run a block on copies of the python/numpy/torch RNG streams, leaving the originals as-is."""
    py, npy = random.getstate(), np.random.get_state()
    devices = []
    if device.type == "cuda":
        devices = [device.index if device.index is not None else torch.cuda.current_device()]
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        random.setstate(py)
        np.random.set_state(npy)


def rng_tensors(rng: dict) -> list[torch.Tensor]:
    """`get_rng_state`'s dict as tensors of fixed shapes (for a gather across processes):
    python, numpy, torch states, then numpy's position and cached Gaussian and python's."""
    gauss = rng["python_gauss"]
    scalars = torch.tensor([rng["numpy_pos"], rng["numpy_has_gauss"], rng["numpy_cached_gaussian"],
                            math.nan if gauss is None else gauss], dtype=torch.float64)
    return [rng["python_state"], rng["numpy_keys"], rng["torch"], scalars]


def rng_from_tensors(parts: list[torch.Tensor], like: dict) -> dict:
    """The inverse of `rng_tensors` (`like` gives the constant fields: versions, names)."""
    python_state, numpy_keys, torch_state, scalars = parts
    pos, has_gauss, cached, gauss = scalars.tolist()
    return {**{k: v for k, v in like.items() if k != "cuda"}, "python_state": python_state.clone(),
            "numpy_keys": numpy_keys.clone(), "torch": torch_state.clone(), "numpy_pos": int(pos),
            "numpy_has_gauss": int(has_gauss), "numpy_cached_gaussian": float(cached),
            "python_gauss": None if math.isnan(gauss) else gauss}
