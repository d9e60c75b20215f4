"""Per-parameter learning rates: a parameter's `lr_scale` attribute scales its lr."""
import torch

from scratchformer.train import TrainConfig, Trainer
from scratchformer.train import trainer as trainer_mod
from train_toy import ToyTask, batch_fn, make_data


def test_lr_scale_makes_its_own_groups_under_the_same_schedule(tmp_path):
    task = ToyTask()
    first = task.model[0]
    first.weight.lr_scale = first.bias.lr_scale = 0.1
    groups = trainer_mod.param_groups(task.model, 0.1)
    assert [(g["lr_scale"], g["weight_decay"]) for g in groups] == [(1.0, 0.1), (1.0, 0.0), (0.1, 0.1), (0.1, 0.0)]
    x, y = make_data(64)
    cfg = TrainConfig(max_steps=4, lr=1e-2, warmup_steps=2, schedule="constant", progress=False)
    trainer = Trainer(task, batch_fn(x, y, [16] * 4), None, cfg, tmp_path)
    lrs = {g["lr_scale"]: g["lr"] for g in trainer.optimizer.param_groups}
    assert lrs[0.1] == lrs[1.0] * 0.1  # during warmup too
    before = first.weight.detach().clone()
    trainer.fit()
    assert not torch.equal(before, first.weight)
    lrs = {g["lr_scale"]: g["lr"] for g in trainer.optimizer.param_groups}
    assert abs(lrs[1.0] - 1e-2) < 1e-12 and abs(lrs[0.1] - 1e-3) < 1e-12
