"""The checkpoint format: older runs still resume, re-saving a step keeps the one in use, and a
damaged checkpoint is a one-line error."""
from __future__ import annotations

import json
import shutil

import pytest
import torch
from train_toy import ToyTask, batch_fn, make_data

from scratchformer.errors import UserError
from scratchformer.train import TrainConfig, Trainer
from scratchformer.train.checkpoint_store import CheckpointStore, has_checkpoint

pytestmark = pytest.mark.usefixtures("quick_toy")
X, Y = make_data(40, seed=1)


def _trainer(run, steps, seed=5):
    cfg = TrainConfig(lr=0.02, accumulation=2, max_steps=steps, save_every=2, seed=3,
                      schedule="constant", progress=False)
    return Trainer(ToyTask(seed=seed, dropout=0.2), batch_fn(X, Y, [7, 6, 9, 8, 10], seed=2), None, cfg, run)


def _same(a, b):
    return all(torch.equal(v, b.model.state_dict()[k]) for k, v in a.model.state_dict().items())


def test_a_run_in_the_old_layout_resumes_bit_exactly_and_is_converted(tmp_path):
    ref = _trainer(tmp_path / "ref", 6)
    ref.fit()
    run = tmp_path / "old"
    _trainer(run, 4).fit()
    ck = CheckpointStore(run).latest()  # turn it into what the previous version wrote
    shutil.copy(ck.weights, run / "last.safetensors")
    shutil.copy(ck.state, run / "trainer_state.pt")
    (run / "checkpoint.json").unlink()
    shutil.rmtree(run / "checkpoints")
    assert has_checkpoint(run) and CheckpointStore(run).latest().legacy

    again = _trainer(run, 6, seed=9)
    assert again.fit(resume=True)["step"] == 6
    assert _same(again, ref)
    assert not (run / "last.safetensors").exists() and not (run / "trainer_state.pt").exists()
    assert CheckpointStore(run).latest().step == 6


def test_resaving_the_same_step_never_touches_the_checkpoint_in_use(tmp_path):
    run = tmp_path / "run"
    _trainer(run, 4).fit()
    first = json.loads((run / "checkpoint.json").read_text())["dir"]
    _trainer(run, 4).fit(resume=True)  # already at max_steps: saves step 4 again
    second = json.loads((run / "checkpoint.json").read_text())["dir"]
    assert {first, second} == {"checkpoints/step-00000004", "checkpoints/step-00000004-1"}
    assert [p.name for p in (run / "checkpoints").iterdir()] == [second.split("/")[1]]
    _trainer(run, 4).fit(resume=True)
    assert json.loads((run / "checkpoint.json").read_text())["dir"] == first


@pytest.mark.parametrize("damage", ["truncate", "remove_dir", "corrupt_pointer", "nothing_saved"])
def test_a_damaged_checkpoint_is_one_line(tmp_path, damage):
    run = tmp_path / "run"
    _trainer(run, 2).fit()
    ck = CheckpointStore(run).latest()
    if damage == "truncate":
        ck.weights.write_bytes(ck.weights.read_bytes()[:100])
    elif damage == "remove_dir":
        shutil.rmtree(ck.weights.parent)
    elif damage == "corrupt_pointer":
        (run / "checkpoint.json").write_text('{"dir": ')
    else:
        (run / "checkpoint.json").unlink()
        shutil.rmtree(run / "checkpoints")
    with pytest.raises(UserError) as e:
        _trainer(run, 4).fit(resume=True)
    msg = str(e.value)
    assert "\n" not in msg and str(run) in msg
    expected = {"truncate": "recorded", "remove_dir": "missing", "corrupt_pointer": "corrupt",
                "nothing_saved": "nothing to resume"}[damage]
    assert expected in msg
