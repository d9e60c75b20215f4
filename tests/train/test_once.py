"""train/once.py: who runs a task's step (issue 52, item 5). Two processes on gloo (fork): a
step built once runs on rank 0 before rank 1; a decision is rank 0's on both (a dataclass rebuilt
from its fields); only rank 0 writes. One process: each step is simply run."""
import dataclasses
import json
import os
import socket
import time
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp

from scratchformer.train.once import build_once, decide_once, write_once, writes


@dataclasses.dataclass
class Estimate:
    minutes: float
    gflops: float


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, folder: str) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    order = Path(folder, "order.txt")

    def build() -> int:
        with open(order, "a") as f:
            f.write(f"start {rank}\n")
        time.sleep(0.3 if rank == 0 else 0)  # rank 1, were it not waiting, would start meanwhile
        with open(order, "a") as f:
            f.write(f"end {rank}\n")
        return 10 + rank

    built = build_once(build)
    plan = decide_once(lambda: {"steps": 100 + rank})
    est = decide_once(lambda: Estimate(1.0 + rank, 300.0), as_=Estimate)
    wrote = write_once(lambda: Path(folder, "report.txt").write_text(f"rank {rank}\n") and f"rank {rank}")
    out = {"built": built, "plan": plan, "est": dataclasses.asdict(est), "est_type": type(est).__name__,
           "wrote": wrote, "writes": writes()}
    Path(folder, f"r{rank}.json").write_text(json.dumps(out))
    dist.destroy_process_group()


def test_two_processes_build_on_rank_0_first_share_its_decisions_and_write_once(tmp_path):
    mp.start_processes(_worker, args=(_free_port(), str(tmp_path)), nprocs=2, start_method="fork")
    r0, r1 = (json.loads((tmp_path / f"r{r}.json").read_text()) for r in (0, 1))
    assert (tmp_path / "order.txt").read_text().splitlines() == ["start 0", "end 0", "start 1", "end 1"]
    assert (r0["built"], r1["built"]) == (10, 11)  # each process's own value (rank 1 read what rank 0 built)
    assert r0["plan"] == r1["plan"] == {"steps": 100}
    assert r0["est"] == r1["est"] == {"minutes": 1.0, "gflops": 300.0} and r1["est_type"] == "Estimate"
    assert (r0["wrote"], r1["wrote"]) == ("rank 0", None)
    assert (r0["writes"], r1["writes"]) == (True, False)
    assert (tmp_path / "report.txt").read_text() == "rank 0\n"


def test_one_process_runs_each_step_and_keeps_its_objects():
    est = Estimate(2.0, 10.0)
    assert build_once(lambda: 7) == 7
    assert decide_once(lambda: est, as_=Estimate) is est
    assert decide_once(lambda: (1, 2)) == (1, 2)  # no JSON round trip alone
    assert write_once(lambda: "done") == "done" and writes()
