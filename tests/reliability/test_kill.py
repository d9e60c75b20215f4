"""A real `kill -9` of a training process at random moments; `--resume` always finishes the run
bit for bit like one never interrupted.

Each kill (SIGKILL) hits a child process (kill_child.py: the toy task, a checkpoint after every
step, real fsyncs) at a random instant after it started training; the next child resumes from
whatever the disk holds, and is killed in turn; the test process finishes the run. The seed of
the moments is printed (SCRATCHFORMER_KILL_SEED=N replays one).
"""
from __future__ import annotations

import multiprocessing
import os
import random
import time

import pytest
import torch
from kill_child import make_trainer, run_child

from scratchformer.train.checkpoint import load_state
from scratchformer.train.checkpoint_store import CheckpointStore

KILLS = 6


@pytest.fixture(scope="module")
def forkserver():
    ctx = multiprocessing.get_context("forkserver")
    # torch imported once, children fork from it (3.11's forkserver ignores our sys.path, so only
    # installed modules can be preloaded; kill_child itself imports in the child in milliseconds)
    ctx.set_forkserver_preload(["torch", "torch._dynamo", "scratchformer.train"])  # AdamW imports _dynamo
    return ctx


def _step(run) -> int | None:
    store = CheckpointStore(run)
    return load_state(store.latest().state)["train"]["step"] if store.exists() else None


def test_kill_9_at_random_moments_then_resume_is_bit_exact(tmp_path, forkserver, monkeypatch, quick_toy):
    seed = int(os.environ.get("SCRATCHFORMER_KILL_SEED", time.time_ns() % 10**6))
    rng = random.Random(seed)
    threads = torch.get_num_threads()
    try:
        run, steps, partial = tmp_path / "run", [], 0
        for k in range(KILLS):
            ready, tell = forkserver.Pipe(duplex=False)
            child = forkserver.Process(target=run_child, args=(str(run), _step(run) is not None, tell))
            child.start()
            assert ready.poll(60) and ready.recv() == "ready", "the child did not start"
            time.sleep(rng.uniform(0.0, 0.3))
            child.kill()  # SIGKILL: no clean-up of any kind
            child.join(30)
            assert child.exitcode in (-9, 0), child.exitcode  # 0: it finished before the kill
            if (run / "checkpoints").is_dir():
                partial += any(p.name.startswith(".tmp-") for p in (run / "checkpoints").iterdir())
            steps.append(_step(run))
        print(f"kill seed {seed}: checkpoint steps after each kill {steps}; "
              f"{partial} kills left a partial save behind")

        monkeypatch.setattr(os, "fsync", lambda fd: None)  # only time, in this process
        ref = make_trainer(tmp_path / "ref")
        ref.fit()
        resumed = make_trainer(run, seed=99)
        resumed.fit(resume=_step(run) is not None, overwrite=_step(run) is None)
        assert resumed.state.step == ref.state.step
        for k, v in ref.model.state_dict().items():
            assert torch.equal(v, resumed.model.state_dict()[k]), f"{k} differs (kill seed {seed})"
        assert resumed.state.best_metric == ref.state.best_metric
    finally:
        torch.set_num_threads(threads)
