"""torchrun itself: two agents on loopback (`--nnodes 2`, c10d rendezvous) run one `train
classify` whose run folder is written once; a job that loses a worker (`--max-restarts 1`)
restarts from its last checkpoint and ends with the uninterrupted run's weights, bit for bit.
CPU and gloo, one thread per process, a tiny model; every subprocess has a timeout."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file

from toy_data import headlines, write_tsv
from train_toy import ToyTask

TIMEOUT_S = 120  # a ceiling for a loaded 2-core machine; these runs take 10-40 s
WORKER = Path(__file__).resolve().parent / "elastic_worker.py"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SCRATCHFORMER_DIST_TIMEOUT_S": "60", **extra}
    env.pop("SCRATCHFORMER_DIST_VERBOSE", None)
    return env


def _torchrun(*args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *args]


def test_two_nodes_on_loopback_write_one_run_folder_once(tmp_path):
    """Two agents (`--nnodes 2`, one process each, c10d rendezvous on 127.0.0.1), the adaptive
    default with a time budget and `train.strategy=fsdp`: one log, one plan, one result line, a
    run folder written by rank 0 alone, and `predict` in one process on what it wrote."""
    data = tmp_path / "news.tsv"
    write_tsv(data, headlines(240, seed=1))
    run = tmp_path / "run"
    port = _free_port()
    cmd = _torchrun("--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
                    "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "two-nodes", "--max-restarts", "0",
                    "-m", "scratchformer.cli", "train", "classify", "--data", str(data), "--out", str(run),
                    "--no-baseline", "--time-budget", "3", "--set", "model.encoder.n_layers=1",
                    "--set", "model.encoder.d_model=32", "--set", "model.encoder.d_ff=64",
                    "--set", "model.bigram_buckets=0", "--set", "train.max_steps=6", "--set", "train.strategy=fsdp")
    agents = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                               cwd=tmp_path) for _ in range(2)]
    outs = []
    try:
        for a in agents:
            outs.append(a.communicate(timeout=TIMEOUT_S))
    finally:
        for a in agents:
            a.kill()
    assert [a.returncode for a in agents] == [0, 0], "\n".join(err[-3000:] for _, err in outs)
    stdout = "".join(out for out, _ in outs)
    stderr = "".join(err for _, err in outs)
    results = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert len(results) == 1 and results[0]["run_dir"] == str(run)  # one result line, rank 0's
    assert stderr.count("plan: time budget") == 1  # one plan, measured and made on rank 0
    assert stderr.count("e5 not considered: --set model.encoder.n_layers chose the model") == 1
    assert stderr.count("recipe (adaptive default") == 1  # one log
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_steps = [r["step"] for r in rows if r["split"] == "train"]
    assert train_steps == sorted(set(train_steps)) and train_steps[-1] == 6  # each row written once
    status = json.loads((run / "train_status.json").read_text())
    assert status["finished"] is True and status["step"] == 6
    assert json.loads((run / "config.json").read_text())["ensemble"] == 1  # no members under torchrun
    assert not list(run.glob("member*")) and (run / "test_metrics.json").is_file()
    # the sharded run's weights were gathered into one file: one process predicts with them
    pred = subprocess.run([sys.executable, "-m", "scratchformer.cli", "predict", str(run), "球赛队胜", "--json"],
                          capture_output=True, text=True, timeout=TIMEOUT_S, env=_env())
    assert pred.returncode == 0, pred.stderr[-2000:]
    assert json.loads(pred.stdout.splitlines()[0])["label"] in ("体育", "财经")


def _elastic(run: Path, **env) -> subprocess.CompletedProcess:
    # one restart, the claim; the restarted attempt's gloo once read the dead attempt's addresses
    # from torchrun's shared store ("connection refused", or a hang): distributed._attempt_store
    cmd = _torchrun("--standalone", "--nnodes", "1", "--nproc-per-node", "2", "--max-restarts", "1",
                    "--monitor-interval", "0.5", str(WORKER), str(run))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, env=_env(**env))


def _uninterrupted(rank: int, port: int, run: str) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import elastic_worker

    elastic_worker.main(run)


def test_a_killed_worker_is_restarted_from_the_checkpoint_and_ends_bit_exact(tmp_path):
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    # the reference: the same two processes, forked here (no launcher to start), never killed
    mp.start_processes(_uninterrupted, args=(_free_port(), str(whole)), nprocs=2, start_method="fork")
    res = _elastic(killed, SCRATCHFORMER_TEST_KILL_AT_STEP="6")
    assert res.returncode == 0, res.stderr[-3000:]
    assert (killed / "killed-at").read_text() == "6"  # rank 1 really died as step 6 began ...
    assert "exitcode: -9" in res.stderr  # ... and torchrun saw it (and restarted: returncode 0)
    a, b = load_file(whole / "model.safetensors"), load_file(killed / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # dropout streams included
    init = ToyTask(seed=5, dropout=0.3).model.state_dict()
    assert min((init[k] - a[k]).abs().max().item() for k in a) > 1e-3  # it trained: every tensor moved
    steps = [json.loads(line)["step"] for line in (killed / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 11))  # the log continues where the checkpoint was: no step twice
