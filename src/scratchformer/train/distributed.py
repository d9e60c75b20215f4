"""Training over several processes and machines, on torch.distributed (launched by torchrun).

    torchrun --nproc_per_node 2 -m scratchformer.cli train classify --data thucnews --out runs/ddp

Two strategies (`train.strategy`):
  - ``ddp``: every process holds the whole model. Each takes every `world_size`-th micro-batch
    of the same deterministic batch stream; the gradients are summed across processes after the
    backward passes, each loss having been divided by the *global* item count, so one step
    equals the single-process step with `accumulation * world_size` micro-batches (to float
    rounding).
  - ``fsdp``: the same batches and the same arithmetic, but each process holds only its shard
    of the weights, gradients and AdamW state (FSDP2, `torch.distributed.fsdp.fully_shard`);
    the full weights are gathered on rank 0 for every file written (`shard_model`).

Decisions once: whatever ends or shapes training (the time-budget plan, the stop reason of a
step, early stopping, a NaN stop, the adaptive default's candidates) is computed on rank 0 and
sent to the others (`agree`), so every process stops at the same step; each process computing
it from its own clock would not (they measured 46 and 55 ms/step in one run). Values travel as
JSON in a byte tensor, never as a pickle. Only rank 0 writes files and prints (`quiet_unless_main`).
The shared cache too: a step that may fill it (prepared data, a data set's download, a pretrained
checkpoint) runs on rank 0 first while the others wait (`main_first`); they then run it on the
finished folders, reading only. A failure there reaches every process as rank 0's one-line message.

Backends: gloo on CPU, nccl on CUDA (gloo beside it for the small decision messages).
`--resume` restores rank 0's checkpoint on every process (on several machines the run folder must
be on a shared file system); each process's dropout stream is saved too, so a restarted job
continues bit-exactly where the data order is deterministic.
"""
from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from typing import Any, Callable, TypeVar

import torch
import torch.distributed as dist

from ..errors import UserError

T = TypeVar("T")


def world_size() -> int:
    """Processes in this job as torchrun announced them (1 when not launched by torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def is_main() -> bool:
    """Whether this process writes files and prints (rank 0, or the only process)."""
    return rank() == 0


def init_process_group(device: torch.device | None = None) -> bool:
    """Join torchrun's process group once (a no-op for one process); True when distributed.

    The backend is gloo for CPU tensors and, where CUDA is present, nccl for CUDA tensors: one
    group carries both the gradients (on the GPU) and the decisions (small CPU tensors)."""
    if world_size() <= 1:
        return False
    if not dist.is_initialized():
        cuda = (device is None or device.type == "cuda") and torch.cuda.is_available() and dist.is_nccl_available()
        backend = "cpu:gloo,cuda:nccl" if cuda else "gloo"
        timeout = timedelta(seconds=float(os.environ.get("SCRATCHFORMER_DIST_TIMEOUT_S", "1800")))
        store = _attempt_store(timeout)
        if store is None:
            dist.init_process_group(backend, timeout=timeout)
        else:
            dist.init_process_group(backend, timeout=timeout, store=store, rank=rank(), world_size=world_size())
    return dist.get_world_size() > 1


def leave_process_group() -> None:
    """Destroy the process group if this process joined one (registered at exit under torchrun).

    Left to interpreter teardown, gloo's threads can be destroyed while still joinable once the
    peer has already exited (two ranks ending on the same UserError): C++ then calls
    std::terminate ("terminate called without an active exception") and the rank dies of
    SIGABRT instead of exiting with its own code."""
    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception:  # the group is already broken: nothing left to tidy
            pass


def _attempt_store(timeout: timedelta):
    """Under torchrun's shared agent store, a client of it whose keys are this attempt's alone.

    torchrun (c10d rendezvous, torch >= 2.4) keeps one TCPStore for all of a job's attempts and
    its workers join it without a per-attempt prefix, so a restarted attempt's gloo could read the
    dead attempt's addresses (a killed worker's listening port) before the new processes overwrite
    them: "connection refused" in connectFullMesh, or a hang. Keys under
    `/scratchformer/attempt_N/` cannot be stale. None where the default env:// store is fine."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != str(True):
        return None
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world_size(),
                          is_master=False, timeout=timeout)
    return dist.PrefixStore(f"/scratchformer/attempt_{attempt}", store)


def agree(decide: Callable[[], Any]) -> Any:
    """`decide()` run on rank 0 alone, its result (JSON-serialisable) returned on every process.

    Rank 0 runs `decide` while the others wait in the broadcast; the value travels as UTF-8 JSON
    in a uint8 tensor (its length first), so nothing is unpickled. Rank 0 gets back the same
    JSON round trip as the others, so all processes hold equal values (tuples become lists)."""
    if not init_process_group():
        return decide()
    if dist.get_rank() == 0:
        data = json.dumps(decide(), allow_nan=True).encode("utf-8")
        size = torch.tensor([len(data)], dtype=torch.int64)
    else:
        size = torch.zeros(1, dtype=torch.int64)
    dist.broadcast(size, src=0)
    if dist.get_rank() == 0:
        buf = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    else:
        buf = torch.empty(int(size.item()), dtype=torch.uint8)
    dist.broadcast(buf, src=0)
    return json.loads(bytes(buf.numpy()).decode("utf-8"))


def main_first(work: Callable[[], T]) -> T:
    """`work()` on rank 0 first, then on the other processes; its value on each (not sent).

    For a step that may fill the shared cache (`$SCRATCHFORMER_CACHE`: the prepared data, a data
    set's download, a pretrained checkpoint): rank 0 builds while the others wait in a broadcast,
    then the others run the same step, find every folder complete and only read; one writer, not
    N racing ones. Every process must call it at the same point (a collective), so it belongs in a
    pipeline's setup, never after an `is_main()` branch. The wait counts against the process
    group's timeout (SCRATCHFORMER_DIST_TIMEOUT_S, 30 min by default): a data set that takes longer
    to prepare is prepared beforehand (`scratchformer prepare`), or the timeout raised.

    When `work` fails on rank 0, it raises there as it would alone, and the others raise a
    UserError with rank 0's message (a UserError's own: `file:line: what is wrong`) instead of
    waiting for a result that never comes. One process: `work()`."""
    if not init_process_group():
        return work()
    if dist.get_rank() == 0:
        try:
            value = work()
        except Exception as e:
            try:
                agree(lambda: {"failed": _one_line(e)})
            except Exception:  # the group itself broke: rank 0's own error is the one to show
                pass
            raise
        agree(lambda: {})
        return value
    outcome = agree(lambda: {})  # rank 0 works meanwhile
    if "failed" in outcome:
        raise UserError(outcome["failed"])
    return work()


def _one_line(e: Exception) -> str:
    """What another process says of rank 0's failure: a UserError's message as it is, else its kind."""
    if isinstance(e, UserError):
        return str(e)
    if isinstance(e, OSError) and e.filename is not None:
        return f"rank 0 stopped: {e.filename}: {e.strerror or e}"
    return f"rank 0 stopped: {type(e).__name__}: {e} (its log has the details)"


def quiet_unless_main() -> None:
    """Under torchrun, processes other than rank 0 print nothing (their stdout and stderr go to
    /dev/null): one log and one result line per job, not one per process. Their failures still
    show: torchrun reports each failed process's exit code, and rank 0 reaches the same errors.
    SCRATCHFORMER_DIST_VERBOSE=1 keeps every process's output (debugging a hang)."""
    if is_main() or world_size() <= 1 or os.environ.get("SCRATCHFORMER_DIST_VERBOSE") == "1":
        return
    null = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 - for the rest of the process
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(null.fileno(), sys.stdout.fileno())
    os.dup2(null.fileno(), sys.stderr.fileno())


def shard_model(model: torch.nn.Module, mesh=None) -> list[torch.nn.Module]:
    """FSDP2: shard each layer of every `nn.ModuleList` (the stacks' layers), then the root.

    Each `fully_shard` unit gathers its weights just before its forward and frees them after,
    so peak memory holds the shards plus one layer's full weights. Gradients are summed, not
    averaged, across processes (the Trainer divides every loss by the global item count).
    Returns the sharded units."""
    from torch.distributed.fsdp import fully_shard

    units = [m for lst in model.modules() if isinstance(lst, torch.nn.ModuleList) for m in lst
             if any(True for _ in m.parameters())]
    for m in units:
        fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    for m in units + [model]:
        m.set_gradient_divide_factor(1.0)  # a sum, as the ddp strategy's all-reduce ...
        m.set_force_sum_reduction_for_comms(True)  # ... as a plain SUM (gloo has no PREMUL_SUM)
    return units + [model]


class Distributed:
    """Rank and world size of this process (1 process when not launched by torchrun), and the
    collectives the Trainer needs."""

    def __init__(self, device: torch.device | None = None) -> None:
        self.enabled = init_process_group(device)
        if self.enabled and device is not None and device.type == "cuda":
            torch.cuda.set_device(device)  # nccl's collectives run on this process's GPU
        self.world = dist.get_world_size() if self.enabled else 1
        self.rank = dist.get_rank() if self.enabled else 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def agree(self, decide: Callable[[], Any]) -> Any:
        """Rank 0's `decide()` on every process (see the module function)."""
        return agree(decide) if self.enabled else decide()

    def sum(self, values: list[float], device) -> list[float]:
        """Element-wise sum of `values` over all processes (float64)."""
        if not self.enabled:
            return values
        t = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(t)
        return t.tolist()

    def sum_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """Sum every gradient over all processes, in one flat all-reduce (the ddp strategy)."""
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

    def gather_tensors(self, tensors: list[torch.Tensor]) -> list[list[torch.Tensor]] | None:
        """Each process's `tensors` (the same shapes and dtypes everywhere), on rank 0: a list
        per rank; None elsewhere. Used for the per-process RNG states of a checkpoint (each
        process reads its own back from the checkpoint file on resume)."""
        if not self.enabled:
            return [tensors]
        out = []
        for t in tensors:
            parts = [torch.empty_like(t) for _ in range(self.world)] if self.is_main else None
            dist.gather(t, parts, dst=0)
            out.append(parts)
        return [list(x) for x in zip(*out)] if self.is_main else None

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()


def restarted_with_checkpoint(run_dir) -> bool:
    """Whether torchrun restarted this job (`--max-restarts`, TORCHELASTIC_RESTART_COUNT > 0) and
    `run_dir` holds a checkpoint: then the same command line resumes instead of starting afresh."""
    from pathlib import Path

    from scratchformer.train.checkpoint_store import POINTER

    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)
    return restarts > 0 and run_dir is not None and (Path(run_dir) / POINTER).is_file()
