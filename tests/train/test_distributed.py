"""Several processes (torch.distributed, gloo on loopback, forked) against one process: the
decisions are rank 0's, ddp and fsdp give one process's numbers, an fsdp checkpoint loads into
one process and resumes bit-exactly. Tiny: an MLP of 8-16-3, a few steps, one thread each."""
import dataclasses
import json
import os
import socket
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from scratchformer.errors import UserError
from scratchformer.train import TrainConfig, Trainer
from scratchformer.train import evaluation as evaluation_mod  # noqa: E402
from scratchformer.train import trainer as trainer_mod
from scratchformer.train.checkpoint import load_weights
from scratchformer.train.checkpoint_store import CheckpointStore
from scratchformer.train.distributed import agree, main_first

from train_toy import ToyTask, batch_fn, make_data, valid_fn, weights

X, Y = make_data(48)
VX, VY = make_data(16, seed=2)
B = 4  # each process's batch; the one-process run takes 2B


class LeanToy(ToyTask):
    """Evaluates by reading the weights, without calling forward, as translation's lean decoder
    does: under fsdp the weights must be gathered for it."""

    def evaluate(self, batches) -> dict[str, float]:
        m = self.model
        total, n, correct = 0.0, 0, 0
        for b in batches:
            h = F.layer_norm(F.linear(b.x, m[0].weight, m[0].bias), (16,), m[1].weight, m[1].bias, m[1].eps)
            logits = F.linear(F.relu(h), m[4].weight, m[4].bias)
            total += F.cross_entropy(logits.float(), b.y, reduction="sum").item()
            correct += (logits.argmax(-1) == b.y).sum().item()
            n += len(b.y)
        return {"loss": total / n, "accuracy": correct / n}

    def after_step(self, step: int, total_steps) -> None:
        """Sums of that step's weights (a plain module's, on rank 0, as translation's snapshots)."""
        self.seen = getattr(self, "seen", []) + [[float(v.sum()) for v in self.model.state_dict().values()]]


def _toy(seed: int) -> ToyTask:
    """The toy task with its first layer at a tenth of the learning rate (`lr_scale`, as a
    pretrained encoder under a fresh head): fsdp makes new parameters and must keep it."""
    task = LeanToy(seed=seed)
    task.model[0].weight.lr_scale = 0.1
    return task


def _cfg(**kw) -> TrainConfig:
    base = dict(lr=0.05, schedule="constant", max_steps=6, seed=5, eval_every=2, log_every=1, progress=False)
    return TrainConfig(**{**base, **kw})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, port: int, run_dir: str, cfg: dict, resume_at: int | None, fast_rank: int | None) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    evaluation_mod.plot_curves = lambda *a, **k: None  # a plot per evaluation would dominate
    out: dict = {"rank": rank}
    if fast_rank == rank:  # this process's clock gains an hour at every reading; its evaluations differ
        ticks = iter(range(10**9))
        trainer_mod.time = type("Clock", (), {"monotonic": staticmethod(lambda: time.monotonic() + 3600.0 * next(ticks))})
    task = _toy(seed=3 + rank)  # different inits: the Trainer must start from rank 0's
    if fast_rank == rank:
        evaluate = task.evaluate
        task.evaluate = lambda batches: {k: v + 10.0 * rank for k, v in evaluate(batches).items()}
    out["agreed"] = agree(lambda: {"from": rank, "nan": float("nan")})["from"]
    train = batch_fn(X, Y, [B] * 12)
    if resume_at is not None:  # stop early, then a new Trainer resumes to the end
        Trainer(task, train, valid_fn(VX, VY), TrainConfig(**{**cfg, "max_steps": resume_at}), run_dir).fit()
        task = _toy(seed=11)
    trainer = Trainer(task, train, valid_fn(VX, VY), TrainConfig(**cfg), run_dir)
    out["summary"] = {k: v for k, v in trainer.fit(resume=resume_at is not None).items() if k != "elapsed"}
    out["plain_after_fit"] = not hasattr(task.model, "unshard")  # fsdp hands a plain module back
    out["after_step"] = getattr(task, "seen", None)
    torch.save(weights(task.model), Path(run_dir) / f"weights-{rank}.pt")
    Path(run_dir, f"result-{rank}.json").write_text(json.dumps(out))
    dist.destroy_process_group()


def _two_processes(run_dir: Path, cfg: TrainConfig, resume_at: int | None = None,
                   fast_rank: int | None = None) -> list[dict]:
    run_dir.mkdir()
    mp.start_processes(_worker, args=(_free_port(), str(run_dir), cfg.to_dict(), resume_at, fast_rank),
                       nprocs=2, start_method="fork")
    return [json.loads((run_dir / f"result-{r}.json").read_text()) for r in (0, 1)]


def _one_process(run_dir: Path, cfg: TrainConfig) -> tuple[dict, ToyTask]:
    task = _toy(seed=3)
    summary = Trainer(task, batch_fn(X, Y, [2 * B] * 6), valid_fn(VX, VY), cfg, run_dir).fit()
    return {k: v for k, v in summary.items() if k != "elapsed"}, task


def _train_losses(run_dir: Path) -> list[float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["loss"] for r in rows if r["split"] == "train"]


def _max_diff(a: dict, b: dict) -> float:
    return max((a[k].float() - b[k].float()).abs().max().item() for k in a)


@pytest.fixture(autouse=True)
def _no_plots(monkeypatch):
    monkeypatch.setattr(evaluation_mod, "plot_curves", lambda *a, **k: None)


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_two_processes_with_batch_b_give_the_losses_of_one_process_with_batch_2b(tmp_path, strategy):
    cfg = _cfg(strategy=strategy)
    results = _two_processes(tmp_path / "two", cfg)
    single, task = _one_process(tmp_path / "one", _cfg())
    two, one = _train_losses(tmp_path / "two"), _train_losses(tmp_path / "one")
    assert len(two) == len(one) == 6
    assert max(abs(a - b) for a, b in zip(two, one)) < 1e-6  # float32 sums in another order
    assert one[-1] < one[0] - 0.05  # it learned something: the comparison is not of two constants
    w0 = torch.load(tmp_path / "two" / "weights-0.pt")
    assert _max_diff(w0, weights(task.model)) < 1e-6
    assert _max_diff(torch.load(tmp_path / "two" / "weights-1.pt"), w0) == 0.0  # the processes agree
    assert results[0]["summary"] == results[1]["summary"]
    assert all(r["plain_after_fit"] for r in results)
    seen = torch.tensor(results[0]["after_step"])  # (steps, tensors): the hook ran on rank 0 alone
    assert seen.shape == (6, 6) and results[1]["after_step"] is None
    assert (seen - torch.tensor(task.seen)).abs().max().item() < 1e-5
    # one writer: the best model written by rank 0 loads into a one-process model
    plain = ToyTask(seed=99)
    load_weights(plain.model, tmp_path / "two" / "model.safetensors")
    best_step = results[0]["summary"]["best_step"]
    assert best_step == single["best_step"]
    assert plain.evaluate(valid_fn(VX, VY)())["loss"] == pytest.approx(results[0]["summary"]["best_metric"], abs=1e-6)


def test_fsdp_in_bf16_stays_within_bf16_rounding_of_one_process(tmp_path):
    _two_processes(tmp_path / "two", _cfg(strategy="fsdp", precision="bf16"))
    _, task = _one_process(tmp_path / "one", _cfg(precision="bf16"))
    two, one = _train_losses(tmp_path / "two"), _train_losses(tmp_path / "one")
    # bf16 keeps 8 bits of mantissa (relative 2^-8 = 0.004 per rounding); the weights stay fp32
    assert max(abs(a - b) / abs(b) for a, b in zip(two, one)) < 0.01
    assert _max_diff(torch.load(tmp_path / "two" / "weights-0.pt"), weights(task.model)) < 0.01


def test_fsdp_resume_continues_bit_exactly(tmp_path):
    """A sharded run stopped at step 3 and resumed (weights and AdamW state gathered into the
    checkpoint, then sharded again) ends with the weights of the uninterrupted run."""
    cfg = _cfg(strategy="fsdp", eval_every=0, save_every=1)
    _two_processes(tmp_path / "whole", cfg)
    resumed = _two_processes(tmp_path / "resumed", cfg, resume_at=3)
    whole_w, resumed_w = (torch.load(tmp_path / d / "weights-0.pt") for d in ("whole", "resumed"))
    assert all(torch.equal(whole_w[k], resumed_w[k]) for k in whole_w)
    assert resumed[0]["summary"]["step"] == 6
    # the checkpoint resumes anywhere: one process maps the fsdp optimizer state (by name) to its own
    more = dataclasses.replace(cfg, max_steps=8)
    with pytest.raises(UserError, match="its optimizer groups hold other parameters than this model's"):
        Trainer(ToyTask(), batch_fn(X, Y, [2 * B] * 6), None, more, tmp_path / "resumed").fit(resume=True)  # no lr_scale
    Trainer(_toy(0), batch_fn(X, Y, [B] * 12), None, more, tmp_path / "resumed").fit(resume=True)  # 12 batches read
    assert CheckpointStore(tmp_path / "resumed").latest().step == 8


def test_optimizer_state_by_name_and_by_number_map_each_parameter_to_its_own_moments():
    """fsdp checkpoints key AdamW's state by parameter name, one process by number: the two maps
    (train/sharding.py) send each moment to its own parameter, a tied weight under its first name."""
    from scratchformer.train.sharding import optimizer_state_by_name, optimizer_state_by_number

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(5, 4), torch.nn.Linear(4, 3), torch.nn.Linear(3, 5))
    model[2].weight = torch.nn.Parameter(torch.randn(5, 3))
    decay = [model[1].weight, model[2].weight, model[0].weight]  # not the registration order
    opt = torch.optim.AdamW([{"params": decay}, {"params": [model[1].bias, model[2].bias], "weight_decay": 0.0}])
    model(torch.tensor([[1, 2]])).sum().backward()
    opt.step()
    by_number = opt.state_dict()
    by_name = optimizer_state_by_name(by_number, model, opt)
    assert by_name["param_groups"][0]["params"] == ["1.weight", "2.weight", "0.weight"]
    for name, p in model.named_parameters():
        assert torch.equal(by_name["state"][name]["exp_avg"], opt.state[p]["exp_avg"])
    back = optimizer_state_by_number(by_name, model, opt)
    assert back["param_groups"] == by_number["param_groups"]
    assert all(torch.equal(back["state"][i]["exp_avg_sq"], by_number["state"][i]["exp_avg_sq"]) for i in by_number["state"])


@pytest.mark.parametrize("fast_rank", [0, 1])
def test_every_decision_is_rank_0s_and_all_processes_stop_at_the_same_step(tmp_path, fast_rank):
    """One process's clock gains an hour at each reading (past `max_minutes` at once) and its evaluations
    differ: the run stops when rank 0's clock says so, on every process at the same step, and the
    best checkpoint and early stopping follow rank 0's numbers."""
    cfg = _cfg(max_minutes=30, early_stopping_patience=1)
    results = _two_processes(tmp_path / "two", cfg, fast_rank=fast_rank)
    assert [r["agreed"] for r in results] == [0, 0]  # agree(): rank 0's value on both
    assert results[0]["summary"] == results[1]["summary"]
    if fast_rank == 0:
        assert results[0]["summary"]["step"] == 0 and results[0]["summary"]["stop_reason"] == "max_minutes"
    else:
        single, _ = _one_process(tmp_path / "one", cfg)
        assert results[0]["summary"]["stop_reason"] == single["stop_reason"]
        assert results[0]["summary"]["step"] == single["step"] > 0
        assert results[0]["summary"]["best_metric"] == pytest.approx(single["best_metric"], abs=1e-6)


def _main_first_worker(rank: int, port: int, folder: str, fail: str | None) -> None:
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    order = Path(folder, "order.txt")

    def work() -> int:
        with open(order, "a") as f:
            f.write(f"start {rank}\n")
        if rank == 0:
            time.sleep(0.3)  # rank 1, were it not waiting, would start meanwhile
            if fail:
                raise UserError(fail) if fail.endswith(".tsv:3: empty label") else ValueError(fail)
        with open(order, "a") as f:
            f.write(f"end {rank}\n")
        return 10 + rank

    try:
        out = {"value": main_first(work)}
    except Exception as e:  # noqa: BLE001 - what each process ended with is the point
        out = {"error": type(e).__name__, "message": str(e)}
    Path(folder, f"r{rank}.json").write_text(json.dumps(out))
    dist.destroy_process_group()


@pytest.mark.parametrize("fail", [None, "data.tsv:3: empty label", "boom"])
def test_main_first_runs_rank_0_to_the_end_before_the_others_and_hands_on_its_failure(tmp_path, fail):
    mp.start_processes(_main_first_worker, args=(_free_port(), str(tmp_path), fail), nprocs=2, start_method="fork")
    r0, r1 = (json.loads((tmp_path / f"r{r}.json").read_text()) for r in (0, 1))
    order = (tmp_path / "order.txt").read_text().splitlines()
    if fail is None:  # each process's own value; rank 1 started after rank 0 ended
        assert (r0, r1) == ({"value": 10}, {"value": 11}) and order == ["start 0", "end 0", "start 1", "end 1"]
    elif fail.endswith("empty label"):  # the same one line on both; rank 1 never ran the work
        assert r0 == r1 == {"error": "UserError", "message": fail} and order == ["start 0"]
    else:  # a bug's traceback is rank 0's; the others stop with one line naming it
        assert r0 == {"error": "ValueError", "message": "boom"} and order == ["start 0"]
        assert r1 == {"error": "UserError", "message": "rank 0 stopped: ValueError: boom (its log has the details)"}


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs: nccl gives each process its own GPU")
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_on_two_gpus_nccl_gives_one_gpus_numbers(tmp_path, strategy):
    """The CUDA path: nccl for the gradients (gloo beside it for the decisions), one GPU per
    process by LOCAL_RANK, bf16 autocast. The parent starts CUDA only after the fork."""
    _two_processes(tmp_path / "two", _cfg(strategy=strategy, device="cuda", precision="bf16"))
    _, task = _one_process(tmp_path / "one", _cfg(device="cuda", precision="bf16"))
    two, one = _train_losses(tmp_path / "two"), _train_losses(tmp_path / "one")
    assert max(abs(a - b) / abs(b) for a, b in zip(two, one)) < 0.01


def test_a_set_model_key_means_the_user_chose_the_model_and_e5_is_no_candidate():
    from scratchformer.tasks.classify import auto

    assert auto.user_chosen_model(["train.lr=1e-3", " model.encoder.d_model = 64"]) == "model.encoder.d_model"
    assert auto.user_chosen_model(["train.lr=1e-3", "data.max_len=64"]) is None
    lines: list[str] = []
    fast = auto.E5Estimate(minutes=1.0, gflops=300.0)  # it would fit: only the --set stops it
    assert auto.e5_decision(["新闻"] * 300, 2, 8.0, lines.append, fast, n_valid=500,
                            sets=["model.encoder.n_layers=1"]) is None
    assert lines == ["adaptive default: e5 not considered: --set model.encoder.n_layers chose the model "
                     "(today's choice with your settings trains alone; --init e5 asks for e5)"]
    assert auto.e5_decision(["新闻"] * 300, 2, 8.0, lines.append, fast, n_valid=500) is fast


@pytest.mark.parametrize("task", ["classify", "translate"])
def test_an_ensemble_under_torchrun_is_refused_before_anything_is_read_or_written(tmp_path, monkeypatch, task):
    """Members train one after another in one process (`tasks.runs.train_members`): under torchrun
    the ranks would each write members.json and the members' folders; refused with one line."""
    from scratchformer.tasks.classify import ClassifyRecipe, train_classifier
    from scratchformer.tasks.translate import TranslateRecipe, train_translator

    monkeypatch.setenv("WORLD_SIZE", "2")
    recipe = (ClassifyRecipe if task == "classify" else TranslateRecipe)()
    recipe.ensemble, recipe.data.dataset = 2, str(tmp_path / "missing.tsv")  # never read
    out = tmp_path / "run"
    with pytest.raises(UserError, match="under torchrun train one run"):
        (train_classifier if task == "classify" else train_translator)(recipe, out)
    assert not out.exists()
