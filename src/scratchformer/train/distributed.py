"""Data-parallel training over several processes, on torch.distributed.

Launch any training command with torchrun, e.g.
    torchrun --nproc_per_node 2 -m scratchformer.cli train classify --data thucnews --out runs/ddp
Each process takes every `world_size`-th micro-batch of the same deterministic batch stream;
the gradients are summed across processes after the backward passes, each loss having been
divided by the *global* item count, so one step equals the single-process step with
`accumulation * world_size` micro-batches (to float rounding). Only rank 0 writes files.
Backends: gloo on CPU, nccl on CUDA. `--resume` works (rank 0's checkpoint), but only a
single-process run resumes bit-exactly: each process's dropout stream is not saved.
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist


class Distributed:
    """Rank and world size of this process (1 process when not launched by torchrun)."""

    def __init__(self, device: torch.device | None = None) -> None:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world > 1 and not dist.is_initialized():
            backend = "nccl" if device is not None and device.type == "cuda" else "gloo"
            dist.init_process_group(backend)
        self.enabled = dist.is_initialized() and dist.get_world_size() > 1
        self.world = dist.get_world_size() if self.enabled else 1
        self.rank = dist.get_rank() if self.enabled else 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def sum(self, values: list[float], device) -> list[float]:
        """Element-wise sum of `values` over all processes (float64)."""
        if not self.enabled:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(t)
        return t.tolist()

    def sum_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """Sum every gradient over all processes, in one flat all-reduce."""
        if not self.enabled:
            return
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads])  # (n_params,)
        dist.all_reduce(flat)
        offset = 0
        for p, g in zip(params, grads):
            n = g.numel()
            p.grad = flat[offset : offset + n].view_as(p).clone()
            offset += n

    def broadcast_parameters(self, module: torch.nn.Module) -> None:
        """Start every process from rank 0's weights."""
        if self.enabled:
            for t in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(t.data, src=0)

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()
