"""Distributed state is independent of the process (issue 54, rule 3): real `torchrun` workers, each
with its own PYTHONHASHSEED (hashseed_worker.py), so a collective issued in the order of a `set`
differs between them as it does between machines, and gloo aborts (`--resume` of an fsdp run did:
sharding.load once handed the keys over in a set's order). fsdp and ddp runs, interrupted (SIGTERM to
the torchrun agent, which must leave no half-written file) and finished, resume in 2 processes under
torchrun and in 1 process; a second node that never joins ends with torchrun's message within the
`join_timeout` the docs name. CPU, gloo, a tiny `train lm`; the runs that can overlap do."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from safetensors.torch import load_file

TIMEOUT_S = 120
WORKER = Path(__file__).resolve().parent / "hashseed_worker.py"
TINY = ["--set", "data.context=16", "--set", "data.batch_size=8", "--set", "data.eval_windows=4",
        "--set", "model.transformer.d_model=32", "--set", "model.transformer.n_heads=2",
        "--set", "model.transformer.d_ff=64", "--set", "model.transformer.n_layers=1",
        "--set", "train.progress=false", "--set", "train.eval_every=2"]


def _env(tmp: Path) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "SCRATCHFORMER_DIST_TIMEOUT_S": "60",
           "SCRATCHFORMER_CACHE": str(tmp / "cache")}
    env.pop("SCRATCHFORMER_DIST_VERBOSE", None)
    return env


def _train(tmp: Path, run: Path, *extra: str, procs: int = 2) -> list[str]:
    args = ["train", "lm", "--data", str(tmp / "text.txt"), "--out", str(run), *TINY, *extra]
    if procs == 1:
        return [sys.executable, "-m", "scratchformer.cli", *args]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc-per-node",
            str(procs), "--max-restarts", "0", str(WORKER), *args]


def _ok(cmd: list[str], tmp: Path) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, env=_env(tmp), cwd=tmp)
    assert res.returncode == 0, res.stderr[-3000:]
    return res


def _step(run: Path) -> int:
    return json.loads((run / "checkpoint.json").read_text())["step"]


def _half_written(run: Path) -> list[str]:
    """Temp files and staging folders of fileio's atomic writes (a dot name ending .tmp or holding tmp)."""
    return [str(p.relative_to(run)) for p in run.rglob("*")
            if (p.name.startswith(".") or ".tmp" in p.name) and p.name != ".lock"]  # .lock: the folder's lock, kept


def _sigterm_after_first_checkpoint(tmp: Path, run: Path, strategy: str) -> str:
    """A long run under torchrun, SIGTERM to the agent once the first checkpoint is written; stderr."""
    agent = subprocess.Popen(_train(tmp, run, "--set", f"train.strategy={strategy}", "--set", "train.max_steps=100000"),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_env(tmp), cwd=tmp)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not (run / "checkpoint.json").exists() and agent.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert agent.poll() is None, agent.stderr.read()[-3000:]
        agent.send_signal(signal.SIGTERM)
        err = agent.communicate(timeout=TIMEOUT_S)[1]
    finally:
        agent.kill()
    assert agent.returncode != 0
    return err


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    import random

    tmp = tmp_path_factory.mktemp("order")
    rng = random.Random(0)
    (tmp / "text.txt").write_text("\n".join("".join(rng.choice("天地人和春夏秋冬") for _ in range(30))
                                            for _ in range(60)) + "\n", encoding="utf-8")
    out = {}
    # fsdp: interrupted by SIGTERM to the agent, then resumed in 2 processes (what crashed) and in 1
    out["fsdp_err"] = _sigterm_after_first_checkpoint(tmp, tmp / "fsdp", "fsdp")
    out["fsdp_stopped_at"] = _step(tmp / "fsdp")
    out["fsdp_half"] = _half_written(tmp / "fsdp")
    shutil.copytree(tmp / "fsdp", tmp / "fsdp_one")
    goal = out["fsdp_stopped_at"] + 2
    with ThreadPoolExecutor(2) as pool:
        two = pool.submit(_ok, _train(tmp, tmp / "fsdp", "--resume", "--set", f"train.max_steps={goal}"), tmp)
        one = pool.submit(_ok, _train(tmp, tmp / "fsdp_one", "--resume", "--set", f"train.max_steps={goal}", procs=1), tmp)
        two.result(), one.result()
    # ddp: finished in 2 processes, resumed further in 2 and in 1 (and the fsdp run, now finished, in 1)
    _ok(_train(tmp, tmp / "ddp", "--set", "train.strategy=ddp", "--set", "train.max_steps=2"), tmp)
    shutil.copytree(tmp / "ddp", tmp / "ddp_one")
    with ThreadPoolExecutor(3) as pool:
        jobs = [pool.submit(_ok, _train(tmp, tmp / "ddp", "--resume", "--set", "train.max_steps=4"), tmp),
                pool.submit(_ok, _train(tmp, tmp / "ddp_one", "--resume", "--set", "train.max_steps=4", procs=1), tmp),
                pool.submit(_ok, _train(tmp, tmp / "fsdp_one", "--resume", "--set", f"train.max_steps={goal + 2}",
                                        procs=1), tmp)]
        [j.result() for j in jobs]
    out.update(tmp=tmp, goal=goal)
    return out


def test_the_workers_really_iterate_sets_in_different_orders(runs):
    keys = sorted(load_file(runs["tmp"] / "fsdp" / "model.safetensors"))
    orders = [subprocess.run([sys.executable, "-c", f"print(list(set({keys!r})))"], capture_output=True, text=True,
                             env={**os.environ, "PYTHONHASHSEED": str(11 + rank)}).stdout for rank in (0, 1)]
    assert orders[0] != orders[1]  # the fault this file plants: a set's order per process


def test_sigterm_to_the_agent_leaves_no_half_written_file(runs):
    assert runs["fsdp_stopped_at"] >= 2 and runs["fsdp_half"] == []


def test_sigterm_in_the_middle_of_a_write_removes_its_temp_file(tmp_path):
    """Deterministic where the agent's SIGTERM above lands where it may: a worker (WORLD_SIZE 2) is
    terminated while fileio writes a file; the temp file goes, the old file stays, exit 143."""
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "report.json").write_text("old")
    code = ("import argparse, os, signal\n"
            "from scratchformer.commands.common import under_torchrun\n"
            "from scratchformer.fileio import atomic_write\n"
            "under_torchrun(argparse.Namespace())\n"
            "def write(f):\n"
            "    f.write(b'half')\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    f.write(b' and the rest')\n"
            f"atomic_write({str(tmp_path / 'run' / 'report.json')!r}, write)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=TIMEOUT_S,
                         env={**_env(tmp_path), "WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"})
    assert res.returncode == 143, res.stderr[-2000:]
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["report.json"]
    assert (tmp_path / "run" / "report.json").read_text() == "old"


@pytest.mark.parametrize("run, step", [("fsdp", 0), ("fsdp_one", 2), ("ddp", None), ("ddp_one", None)])
def test_interrupted_and_finished_runs_resume_in_two_processes_and_in_one(runs, run, step):
    folder = runs["tmp"] / run
    want = 4 if step is None else runs["goal"] + step
    status = json.loads((folder / "train_status.json").read_text())
    assert status == {"finished": True, "step": want, "stop_reason": "max_steps"}
    steps = [json.loads(line)["step"] for line in (folder / "metrics.jsonl").read_text().splitlines()
             if json.loads(line)["split"] == "train"]
    assert steps == sorted(set(steps)) and steps[-1] == want  # each logged step once, across the resumes
    assert _half_written(folder) == []


def test_a_second_node_that_never_joins_ends_within_the_join_timeout(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                          "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "alone",
                          "--rdzv-conf", "join_timeout=5", "-m", "scratchformer.cli", "--help"],
                         capture_output=True, text=True, timeout=TIMEOUT_S, env=_env(tmp_path))
    took = time.monotonic() - t0
    assert res.returncode != 0 and "RendezvousTimeoutError" in res.stderr, res.stderr[-2000:]
    assert took < 5 + 60, f"the job ended {took:.0f} s after it started; join_timeout was 5 s"
