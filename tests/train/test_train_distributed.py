"""Two processes (torch.distributed, gloo, loopback) train exactly like one process whose step
holds both processes' micro-batches."""
import json
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from scratchformer.train import TrainConfig, Trainer
from scratchformer.train.checkpoint import load_weights
from scratchformer.train.checkpoint_store import CheckpointStore

from train_toy import ToyTask, batch_fn, make_data, valid_fn, weights

SIZES = [3, 5, 7, 9, 4, 6, 2]  # unequal micro-batches; the last one is a remainder for 2 processes
CFG = dict(lr=0.05, schedule="constant", epochs=3, grad_clip=1.0, seed=5, eval_every=2,
           log_every=1, progress=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, run_dir: str) -> None:
    import os

    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    x, y = make_data(36)
    vx, vy = make_data(16, seed=2)
    task = ToyTask(seed=3 + rank)  # different inits: the Trainer must broadcast rank 0's
    Trainer(task, batch_fn(x, y, SIZES), valid_fn(vx, vy), TrainConfig(accumulation=1, **CFG), run_dir).fit()
    dist.destroy_process_group()


def test_two_processes_equal_one_process_with_both_micro_batches(tmp_path):
    mp.start_processes(_worker, args=(2, _free_port(), str(tmp_path / "ddp")), nprocs=2,
                       start_method="fork")
    x, y = make_data(36)
    vx, vy = make_data(16, seed=2)
    single = ToyTask(seed=3)
    # one process, accumulation 2, without the last micro-batch (the 2-process run drops it)
    Trainer(single, batch_fn(x, y, SIZES[:6]), valid_fn(vx, vy), TrainConfig(accumulation=2, **CFG),
            tmp_path / "single").fit()
    ddp = ToyTask(seed=99)
    load_weights(ddp.model, CheckpointStore(tmp_path / "ddp").latest().weights)
    w_single, w_ddp = weights(single.model), weights(ddp.model)
    assert max((w_single[k] - w_ddp[k]).abs().max().item() for k in w_single) < 1e-6
    assert max((w_single[k] - weights(ToyTask(seed=3).model)[k]).abs().max().item() for k in w_single) > 0.1
    # only rank 0 wrote the log, and it logged the global loss (same as the single run)
    rows = [line for line in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines() if '"train"' in line]
    single_rows = [line for line in (tmp_path / "single" / "metrics.jsonl").read_text().splitlines() if '"train"' in line]
    assert len(rows) == len(single_rows) == 9
    for a, b in zip(rows, single_rows):
        assert abs(json.loads(a)["loss"] - json.loads(b)["loss"]) < 1e-6
