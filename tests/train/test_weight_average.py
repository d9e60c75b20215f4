"""`train.ema`: the kept and evaluated model is the moving average of the weights, computed here by
hand from the weights after each step; training goes on from the raw weights; resume is exact."""
import json

import pytest
import torch
from train_toy import ToyTask, batch_fn, make_data, valid_fn, weights

from scratchformer.errors import UserError
from scratchformer.train import TrainConfig, Trainer, load_weights

X, Y = make_data(40, seed=1)
VX, VY = make_data(32, seed=2)
SIZES = [7, 6, 9, 8, 10]
EMA = 0.8


class Recorded(ToyTask):
    """Keeps the raw weights after every optimizer step (the hook runs after the update)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.after = {}

    def after_step(self, step, total):
        self.after[step] = weights(self.model)


def by_hand(after: dict, upto: int, ema: float = EMA) -> dict:
    avg = {k: v.clone() for k, v in after[1].items()}  # the first step copies
    for s in range(2, upto + 1):
        avg = {k: ema * avg[k] + (1 - ema) * after[s][k] for k in avg}
    return avg


def cfg(**kw):
    base = dict(lr=0.05, schedule="constant", ema=EMA, seed=3, progress=False, log_every=2)
    base.update(kw)
    return TrainConfig(**base)


def saved(run_dir) -> dict:
    m = ToyTask(seed=77)
    load_weights(m.model, run_dir / "model.safetensors")
    return weights(m.model)


def close(a, b, tol=1e-6) -> bool:
    return max((a[k] - b[k]).abs().max().item() for k in a) <= tol


def test_without_validation_the_kept_model_is_the_moving_average(tmp_path):
    task = Recorded(seed=5, dropout=0.2)
    Trainer(task, batch_fn(X, Y, SIZES, seed=4), None, cfg(max_steps=9), tmp_path / "r").fit()
    expected = by_hand(task.after, 9)
    assert close(saved(tmp_path / "r"), expected)
    assert not close(expected, task.after[9], 1e-3)  # the average is not the last weights
    assert close(weights(task.model), task.after[9], 0)  # training ends holding its own weights


def test_evaluation_judges_the_average_and_keeps_it_at_the_best_step(tmp_path):
    task = Recorded(seed=5)
    tr = Trainer(task, batch_fn(X, Y, SIZES, seed=4), valid_fn(VX, VY),
                 cfg(max_steps=12, eval_every=3, metric="loss", metric_mode="min"), tmp_path / "r")
    summary = tr.fit()
    best = summary["best_step"]
    assert close(saved(tmp_path / "r"), by_hand(task.after, best))
    assert summary["weights"] == f"exponential moving average, decay {EMA}"
    # the logged validation loss is the average's, not the raw weights'
    rows = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    logged = {r["step"]: r["loss"] for r in rows if r["split"] == "valid"}
    probe = ToyTask(seed=0)
    for step in (6, 12):
        probe.model.load_state_dict(by_hand(task.after, step))
        assert abs(probe.evaluate(valid_fn(VX, VY)())["loss"] - logged[step]) < 1e-5
        probe.model.load_state_dict(task.after[step])
        assert abs(probe.evaluate(valid_fn(VX, VY)())["loss"] - logged[step]) > 1e-4


def test_resume_keeps_the_average_exactly(tmp_path):
    def run(out, steps, resume=False, seed=5):
        task = ToyTask(seed=seed, dropout=0.3)
        # no validation set: model.safetensors is the average at the last step, resumed or not
        Trainer(task, batch_fn(X, Y, SIZES, seed=4), None, cfg(max_steps=steps), out).fit(resume=resume)
        return task

    ref = run(tmp_path / "ref", 10)
    run(tmp_path / "run", 5)
    resumed = run(tmp_path / "run", 10, resume=True, seed=99)
    assert close(weights(resumed.model), weights(ref.model), 0)
    assert close(saved(tmp_path / "run"), saved(tmp_path / "ref"), 0)


def test_bad_settings_are_one_line_errors(tmp_path):
    with pytest.raises(UserError, match="ema=1.0 must be in"):
        TrainConfig(ema=1.0)
    Trainer(ToyTask(seed=1), batch_fn(X, Y, SIZES), None, cfg(ema=0.0, max_steps=3), tmp_path / "r").fit()
    with pytest.raises(UserError, match="holds no weight average .* resume with ema=0"):
        Trainer(ToyTask(seed=1), batch_fn(X, Y, SIZES), None, cfg(max_steps=6), tmp_path / "r").fit(resume=True)
