"""The Trainer on a toy task: exact accumulation, exact resume, divergence, precision, outputs."""

import json
import math

import pytest
import torch
from train_toy import Batch, ToyTask, batch_fn, make_data, valid_fn, weights

from scratchformer.errors import UserError
from scratchformer.train import TrainConfig, Trainer, TrainingDiverged, load_weights, trainer as trainer_mod
from scratchformer.train.checkpoint_store import CheckpointStore

QUIET = {"progress": False}


def _max_diff(a, b):
    return max((a[k] - b[k]).abs().max().item() for k in a)


# ---------------------------------------------------------------------------- accumulation
class MeanOfMeans(ToyTask):
    """The naive alternative: every micro-batch's mean loss weighs the same."""

    def count(self, batch):
        return 1

    def loss_sum(self, batch):
        loss, extra = super().loss_sum(batch)
        return loss / len(batch.y), extra


def test_accumulated_step_equals_one_big_batch(tmp_path):
    sizes = [3, 5, 7, 9]  # unequal micro-batches
    x, y = make_data(24)
    cfg = dict(lr=0.05, schedule="constant", epochs=4, grad_clip=1.0, **QUIET)

    big = ToyTask(seed=3)
    Trainer(big, batch_fn(x, y, [24], shuffle=False), None,
            TrainConfig(accumulation=1, **cfg), tmp_path / "big").fit()
    acc = ToyTask(seed=3)
    Trainer(acc, batch_fn(x, y, sizes, shuffle=False), None,
            TrainConfig(accumulation=4, **cfg), tmp_path / "acc").fit()
    naive = MeanOfMeans(seed=3)
    Trainer(naive, batch_fn(x, y, sizes, shuffle=False), None,
            TrainConfig(accumulation=4, **cfg), tmp_path / "naive").fit()

    w_big, w_acc, w_naive = weights(big.model), weights(acc.model), weights(naive.model)
    assert _max_diff(w_big, weights(ToyTask(seed=3).model)) > 0.1  # it did train
    assert _max_diff(w_acc, w_big) < 1e-6
    assert _max_diff(w_naive, w_big) > 1e-4  # mean of means is a different gradient


# ---------------------------------------------------------------------------- exact resume
X, Y = make_data(40, seed=1)
VX, VY = make_data(32, seed=2)
SIZES = [7, 6, 9, 8, 10]  # 5 micro-batches per epoch; accumulation 2 -> steps of 2, 2, 1


def _resume_cfg(**kw):
    base = dict(lr=0.02, accumulation=2, eval_every=4, log_every=3, seed=11, **QUIET)
    base.update(kw)
    return TrainConfig(**base)


def _run(run_dir, cfg, resume=False, task_seed=5, batches=None):
    task = ToyTask(seed=task_seed, dropout=0.3)
    tr = Trainer(task, batches or batch_fn(X, Y, SIZES, seed=4), valid_fn(VX, VY), cfg, run_dir)
    summary = tr.fit(resume=resume)
    return task, tr, summary


def _assert_same_weights(a, b):
    for k, v in a.model.state_dict().items():
        assert torch.equal(v, b.model.state_dict()[k]), k


def test_resume_after_max_steps_is_bit_identical(tmp_path, monkeypatch):
    kw = dict(schedule="constant", warmup_steps=3)
    ref, _, ref_summary = _run(tmp_path / "ref", _resume_cfg(max_steps=10, **kw))

    _, first, _ = _run(tmp_path / "run", _resume_cfg(max_steps=5, **kw))
    assert (first.state.epoch, first.state.batch_in_epoch) == (1, 4)  # stopped mid-epoch
    # A new process: a different init, which the checkpoint must overwrite.
    resumed, tr, summary = _run(tmp_path / "run", _resume_cfg(max_steps=10, **kw), resume=True, task_seed=99)
    assert summary["step"] == 10 and summary["stop_reason"] == "max_steps"
    _assert_same_weights(resumed, ref)
    assert summary["valid_loss"] == ref_summary["valid_loss"]

    # The test can fail: without restoring the RNG, dropout masks differ after the resume.
    monkeypatch.setattr(trainer_mod, "set_rng_state", lambda rng, device: None)
    broken, _, _ = _run(tmp_path / "run2", _resume_cfg(max_steps=5, **kw))
    broken, _, _ = _run(tmp_path / "run2", _resume_cfg(max_steps=10, **kw), resume=True)
    assert not all(torch.equal(v, ref.model.state_dict()[k]) for k, v in broken.model.state_dict().items())


def test_resume_after_a_crash_is_bit_identical(tmp_path):
    kw = dict(schedule="cosine", warmup_steps=3, max_steps=10, save_every=2)
    ref, _, _ = _run(tmp_path / "ref", _resume_cfg(**kw))

    good = batch_fn(X, Y, SIZES, seed=4)
    served = {"n": 0}

    def crashing(epoch):
        for b in good(epoch):
            served["n"] += 1
            if served["n"] == 14:  # during step 8; the last checkpoint is from step 6
                raise RuntimeError("killed")
            yield b

    with pytest.raises(RuntimeError, match="killed"):
        _run(tmp_path / "run", _resume_cfg(**kw), batches=crashing)
    state = torch.load(CheckpointStore(tmp_path / "run").latest().state, weights_only=True)
    assert state["train"]["step"] == 6 and state["train"]["batch_in_epoch"] == 5

    resumed, _, summary = _run(tmp_path / "run", _resume_cfg(**kw), resume=True, task_seed=42)
    assert summary["step"] == 10
    _assert_same_weights(resumed, ref)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train_steps = [r["step"] for r in rows if r["split"] == "train"]
    assert train_steps == sorted(set(train_steps))  # lines after the checkpoint were not duplicated


def test_resume_without_checkpoint_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="nothing to resume"):
        _run(tmp_path / "empty", _resume_cfg(max_steps=3), resume=True)


# ---------------------------------------------------------------------------- divergence
def test_nan_loss_stops_with_the_step_and_keeps_finite_weights(tmp_path):
    good = batch_fn(X, Y, SIZES, seed=4)

    def poisoned(epoch):
        for i, b in enumerate(good(epoch)):
            if epoch == 1 and i == 2:  # first micro-batch of step 5
                b = Batch(b.x.clone(), b.y)
                b.x[0, 0] = float("nan")
            yield b

    task = ToyTask(seed=5)
    tr = Trainer(task, poisoned, None, TrainConfig(lr=0.02, accumulation=2, max_steps=20,
                                                   save_every=1, **QUIET), tmp_path)
    with pytest.raises(TrainingDiverged) as e:
        tr.fit()
    msg = str(e.value)
    assert isinstance(e.value, UserError) and "\n" not in msg
    assert "step 5" in msg and "learning rate" in msg and "fp16" in msg and "bad data" in msg
    assert "step 4" in msg  # the checkpoint that was kept
    saved = ToyTask(seed=0)
    load_weights(saved.model, tmp_path / "model.safetensors")
    assert all(torch.isfinite(p).all() for p in saved.model.parameters())
    _assert_same_weights(saved, task)  # the weights after step 4: the bad update never happened


# ---------------------------------------------------------------------------- precision
def test_bf16_runs_on_cpu_with_a_finite_loss(tmp_path):
    task = ToyTask(seed=5)
    summary = Trainer(task, batch_fn(X, Y, SIZES), valid_fn(VX, VY),
                      TrainConfig(precision="bf16", max_steps=6, log_every=2, **QUIET), tmp_path).fit()
    assert math.isfinite(summary["train_loss"]) and math.isfinite(summary["valid_loss"])
    assert all(p.dtype == torch.float32 for p in task.model.parameters())  # master weights stay fp32


@pytest.mark.parametrize("native", [False, True])
def test_auto_precision_follows_the_hardware_says_so_and_trains_as_its_choice(tmp_path, monkeypatch, capsys, native):
    """`auto` is bf16 where the device computes bf16, fp32 elsewhere: the run prints its choice and
    its weights equal (bit for bit) those of the same run asked for that precision."""
    from scratchformer.train import device as precision

    monkeypatch.setattr(precision, "native_bf16", lambda device: native)
    chosen = "bf16" if native else "fp32"
    runs = {}
    for asked in ("auto", chosen):
        task = ToyTask(seed=5)
        Trainer(task, batch_fn(X, Y, SIZES), valid_fn(VX, VY),
                TrainConfig(precision=asked, max_steps=4, log_every=2, **QUIET), tmp_path / asked).fit()
        runs[asked] = {k: v.clone() for k, v in task.model.state_dict().items()}
        err = capsys.readouterr().err
        if asked == "auto":
            assert f"train: precision auto: {chosen} (" in err
    assert _max_diff(runs["auto"], runs[chosen]) == 0.0
    if not native:  # asked for bf16 explicitly on such a CPU: it runs, and says what it costs
        Trainer(ToyTask(seed=5), batch_fn(X, Y, SIZES), valid_fn(VX, VY),
                TrainConfig(precision="bf16", max_steps=1, **QUIET), tmp_path / "bf16").fit()
        assert "without bf16 instructions" in capsys.readouterr().err


def test_fp16_on_cpu_is_a_user_error():
    with pytest.raises(UserError, match="CUDA"):
        TrainConfig(precision="fp16", device="cpu", max_steps=1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_fp16_on_cuda(tmp_path):
    task = ToyTask(seed=5)
    cfg = TrainConfig(precision="fp16", device="cuda", max_steps=6, log_every=2, **QUIET)
    summary = Trainer(task, batch_fn(X, Y, SIZES), valid_fn(VX, VY), cfg, tmp_path).fit()
    assert math.isfinite(summary["train_loss"])
    _, first, _ = _run(tmp_path / "a", _resume_cfg(max_steps=3, device="cuda", precision="fp16"))
    assert first.scaler.is_enabled()


# ---------------------------------------------------------------------------- outputs
def test_fit_writes_metrics_curves_and_checkpoints(tmp_path):
    task = ToyTask(seed=5)
    cfg = TrainConfig(lr=0.05, epochs=3, accumulation=2, log_every=1, warmup_steps=2, **QUIET)
    tr = Trainer(task, batch_fn(X, Y, SIZES), valid_fn(VX, VY), cfg, tmp_path)
    assert tr.total_steps == 9  # 3 epochs x ceil(5 / 2), counted from the generator
    summary = tr.fit()
    assert summary["epoch"] == 3 and summary["step"] == 9 and summary["stop_reason"] == "epochs"
    assert task.saved_to == tmp_path and (tmp_path / "task.json").exists()
    assert TrainConfig.load_json(tmp_path / "train_config.json") == cfg
    for name in ("metrics.jsonl", "curves.png", "model.safetensors", "checkpoint.json", "checkpoints/step-00000009"):
        assert (tmp_path / name).exists(), name
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if r["split"] == "train"]
    valid = [r for r in rows if r["split"] == "valid"]
    assert [r["step"] for r in train] == list(range(1, 10))
    assert [r["step"] for r in valid] == [3, 6, 9]  # eval_every=0: once per epoch
    assert {"step", "epoch", "split", "loss", "lr", "tokens_per_s", "elapsed", "accuracy"} <= set(train[0])
    assert {"loss", "accuracy", "elapsed"} <= set(valid[0])
    assert train[0]["lr"] == pytest.approx(0.025) and train[1]["lr"] == pytest.approx(0.05)
    assert 0 <= train[0]["accuracy"] <= 1
    assert summary["best_metric"] == min(r["loss"] for r in valid)

    state = torch.load(CheckpointStore(tmp_path).latest().state, weights_only=True)
    assert state["train"]["step"] == 9 and state["train"]["best_step"] == summary["best_step"]


def test_early_stopping_and_best_checkpoint(tmp_path):
    class Worsening(ToyTask):
        """Validation accuracy that peaks at the second evaluation, then falls."""

        calls = 0

        def evaluate(self, batches):
            out = super().evaluate(batches)
            Worsening.calls += 1
            out["accuracy"] = [0.5, 0.9, 0.8, 0.7, 0.6, 0.5][Worsening.calls - 1]
            return out

    task = Worsening(seed=5)
    cfg = TrainConfig(lr=0.05, max_steps=100, eval_every=2, early_stopping_patience=2,
                      metric="accuracy", metric_mode="max", **QUIET)
    tr = Trainer(task, batch_fn(X, Y, SIZES), valid_fn(VX, VY), cfg, tmp_path)
    summary = tr.fit()
    assert summary["stop_reason"] == "early_stopping"
    assert summary["step"] == 8 and summary["best_step"] == 4 and summary["best_metric"] == 0.9
    best, last = ToyTask(), ToyTask()
    load_weights(best.model, tmp_path / "model.safetensors")
    load_weights(last.model, CheckpointStore(tmp_path).latest().weights)
    _assert_same_weights(last, task)
    assert not torch.equal(best.model[0].weight, last.model[0].weight)


def test_config_errors_at_construction(tmp_path):
    task = ToyTask()
    batches = batch_fn(X, Y, SIZES)
    with pytest.raises(UserError, match="no end"):
        Trainer(task, batches, None, TrainConfig(**QUIET), tmp_path)
    with pytest.raises(UserError, match="set_gradient_checkpointing"):
        Trainer(task, batches, None, TrainConfig(max_steps=1, grad_checkpointing=True, **QUIET), tmp_path)
    with pytest.raises(UserError, match="needs the length of the run"):
        Trainer(task, batches, None, TrainConfig(max_minutes=1, **QUIET), tmp_path)
    with pytest.raises(UserError, match="metric 'bleu' is not among"):
        Trainer(task, batches, valid_fn(VX, VY), TrainConfig(max_steps=2, metric="bleu", **QUIET), tmp_path).fit()


def test_time_budget_stops_the_run(tmp_path):
    cfg = TrainConfig(max_minutes=1e-4, schedule="constant", **QUIET)  # 6 ms
    summary = Trainer(ToyTask(), batch_fn(X, Y, SIZES), None, cfg, tmp_path).fit()
    assert summary["stop_reason"] == "max_minutes" and summary["step"] >= 1
    assert (tmp_path / "model.safetensors").exists()  # no valid set: the latest weights


def test_grad_checkpointing_is_switched_on(tmp_path):
    task = ToyTask()
    calls = []
    task.model.set_gradient_checkpointing = lambda on: calls.append(on)
    Trainer(task, batch_fn(X, Y, SIZES), None, TrainConfig(max_steps=1, grad_checkpointing=True, **QUIET), tmp_path)
    assert calls == [True]


def test_weight_decay_skips_biases_and_norms():
    groups = trainer_mod.param_groups(ToyTask().model, 0.1)
    decayed = {p.ndim for p in groups[0]["params"]}
    assert groups[0]["weight_decay"] == 0.1 and decayed == {2} and len(groups[0]["params"]) == 2
    assert groups[1]["weight_decay"] == 0.0 and {p.ndim for p in groups[1]["params"]} == {1}
