"""The trainer's AdamW: fused where torch has the kernel, the same update as the readable loop."""
import torch

from scratchformer.train import TrainConfig, Trainer
from scratchformer.train.optim import adamw, param_groups, why_not_fused
from train_toy import ToyTask, batch_fn, make_data


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Embedding(500, 16), torch.nn.Linear(16, 32), torch.nn.LayerNorm(32),
                               torch.nn.Linear(32, 3))


def _train(model, opt, steps: int = 20) -> list[float]:
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        ids = torch.randint(0, 500, (8, 5), generator=g)
        y = torch.randint(0, 3, (8,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(ids).mean(1), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


def test_fused_adamw_follows_the_single_tensor_loop_within_1e_6():
    fast, slow = _model(0), _model(0)
    opt_fast, why = adamw(param_groups(fast, 0.01), 1e-2, (0.9, 0.98), 1e-8)
    assert why is None and all(g["fused"] for g in opt_fast.param_groups)
    opt_slow = torch.optim.AdamW(param_groups(slow, 0.01), lr=1e-2, betas=(0.9, 0.98), eps=1e-8,
                                 foreach=False, fused=False)
    lf, ls = _train(fast, opt_fast), _train(slow, opt_slow)
    assert ls[-1] < ls[0] - 0.1  # it learned: the comparison is over real updates
    assert max(abs(a - b) for a, b in zip(lf, ls)) < 1e-6
    for a, b in zip(fast.parameters(), slow.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


def test_the_reason_fused_is_not_taken_is_said():
    p = [torch.nn.Parameter(torch.zeros(2))]
    assert why_not_fused(p, sharded=False) is None
    assert "fsdp" in why_not_fused(p, sharded=True)
    meta = [torch.nn.Parameter(torch.zeros(2, device="meta"))]
    assert why_not_fused(meta, sharded=False) == "torch has no fused AdamW on meta"


def test_the_trainer_steps_fused_and_stays_fused_after_resuming_an_unfused_checkpoint(tmp_path):
    x, y = make_data(64)
    def cfg(steps: int) -> TrainConfig:
        return TrainConfig(max_steps=steps, lr=1e-2, warmup_steps=0, schedule="constant", progress=False)

    first = Trainer(ToyTask(), batch_fn(x, y, [16] * 4), None, cfg(2), tmp_path)
    assert all(g["fused"] for g in first.optimizer.param_groups)
    for g in first.optimizer.param_groups:  # a checkpoint as an older version wrote it
        g["fused"] = None
    first.fit()
    resumed = Trainer(ToyTask(), batch_fn(x, y, [16] * 4), None, cfg(4), tmp_path)
    resumed.fit(resume=True)
    assert resumed.state.step == 4
    assert all(g["fused"] for g in resumed.optimizer.param_groups)
