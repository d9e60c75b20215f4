"""A failure at every file-system boundary of a checkpoint save never costs the run.

For each boundary `n` of the save at step 2 (each byte write, fsync, mkdir, rename, unlink,
file creation: see faults.py) we fail there, in three ways:
  - a crash (an exception) and then nothing more reaches the disk: a kill -9 at that instant;
  - a crash, with the clean-up code still running;
  - ENOSPC once (a disk that filled up): the error is one line that says how many bytes;
then resume in a new Trainer and finish: the final weights and `model.safetensors` equal those
of a run never interrupted, bit for bit.
"""
from __future__ import annotations

import errno

import pytest
import torch
from safetensors import safe_open
from faults import Faults, Injected
from train_toy import ToyTask, batch_fn, make_data

from scratchformer.errors import UserError
from scratchformer.fileio import DiskFull
from scratchformer.train import TrainConfig, Trainer
from scratchformer.train import trainer as trainer_mod
from scratchformer.train.checkpoint import load_state
from scratchformer.train.checkpoint_store import CheckpointStore

X, Y = make_data(40, seed=1)
SIZES = [7, 6, 9, 8, 10]
STEPS, CRASH_SAVE = 4, 2  # fail inside the save of step 2 (step 1's checkpoint exists)


def _cfg():
    return TrainConfig(lr=0.02, accumulation=2, max_steps=STEPS, save_every=1, seed=3, schedule="cosine",
                       warmup_steps=1, progress=False)


def _trainer(run_dir, seed=5):
    return Trainer(ToyTask(seed=seed, dropout=0.2), batch_fn(X, Y, SIZES, seed=2), None, _cfg(), run_dir)


pytestmark = pytest.mark.usefixtures("quick_toy")


@pytest.fixture
def reference(tmp_path, quick_toy):
    run = tmp_path / "ref"
    tr = _trainer(run)
    tr.fit()
    return {k: v.clone() for k, v in tr.model.state_dict().items()}, _read(run / "model.safetensors")


def _read(path):
    """Tensors and metadata of a safetensors file (its header's key order is not fixed)."""
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, f.metadata()


@pytest.fixture
def faults(monkeypatch):
    f = Faults(monkeypatch)
    real_save = trainer_mod.Trainer._save
    calls = {"n": 0}

    def save(self):  # armed during the CRASH_SAVE-th save only
        calls["n"] += 1
        f.armed = calls["n"] == CRASH_SAVE
        try:
            real_save(self)
        finally:
            f.armed = False

    monkeypatch.setattr(trainer_mod.Trainer, "_save", save)
    f.calls = calls
    return f


def _boundaries(faults, tmp_path) -> list[str]:
    faults.reset()
    faults.calls["n"] = 0
    _trainer(tmp_path / "count").fit()
    assert faults.ops, "the save touched no file?"
    return faults.ops


def _finish_and_compare(run, reference, faults):
    faults.reset()
    faults.calls["n"] = 10**6  # never arm again
    tr = _trainer(run, seed=77)  # another init: the checkpoint must replace it
    summary = tr.fit(resume=True)
    assert summary["step"] == STEPS
    ref_weights, ref_file = reference
    for k, v in tr.model.state_dict().items():
        assert torch.equal(v, ref_weights[k]), k
    tensors, meta = _read(run / "model.safetensors")
    assert meta == ref_file[1] and tensors.keys() == ref_file[0].keys()
    assert all(torch.equal(tensors[k], ref_file[0][k]) for k in tensors)


def test_the_save_has_the_boundaries_we_think(faults, tmp_path):
    ops = _boundaries(faults, tmp_path)
    names = " | ".join(ops)
    # the two files of the step directory, its rename, the pointer's rename, the latest model
    assert "write weights.safetensors" in names and "write state.pt" in names
    assert "replace .tmp-step-00000002" in names and "replace .checkpoint.json" in names
    assert "replace .model.safetensors" in names
    assert len(ops) >= 15


@pytest.mark.parametrize("mode", ["killed", "crash", "disk_full"])
def test_failure_at_every_boundary_of_a_save_then_resume_is_bit_exact(faults, tmp_path, reference, mode):
    n_ops = len(_boundaries(faults, tmp_path))
    outcomes = []
    for n in range(1, n_ops + 1):
        run = tmp_path / f"{mode}-{n}"
        if mode == "disk_full":
            faults.reset(n, lambda: OSError(errno.ENOSPC, "No space left on device"))
        else:
            faults.reset(n, lambda: Injected("crash"), dead_after=(mode == "killed"))
        faults.calls["n"] = 0
        try:
            _trainer(run).fit()
            outcomes.append("finished")  # e.g. a failure while pruning old checkpoints
        except Injected:
            outcomes.append("crashed")
        except DiskFull as e:
            msg = str(e)
            assert "\n" not in msg and "no space left on the device" in msg and "needs" in msg, msg
            assert any(unit in msg for unit in ("bytes", "KiB", "MiB")), msg
            outcomes.append("disk full")
        except UserError as e:  # pragma: no cover - any other one-line error is a failure here
            pytest.fail(f"boundary {n} ({faults.ops[-1]}): {e}")
        step = load_state(CheckpointStore(run).latest().state)["train"]["step"]  # always one to resume
        assert step in ((STEPS,) if outcomes[-1] == "finished" else (1, 2)), (n, faults.ops[-1], step)
        _finish_and_compare(run, reference, faults)
    assert "crashed" in outcomes or "disk full" in outcomes
