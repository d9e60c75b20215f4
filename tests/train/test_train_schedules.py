"""Learning-rate schedules and TrainConfig validation."""

import json
import math

import pytest
import torch

from scratchformer.errors import UserError
from scratchformer.train import TrainConfig, schedules
from scratchformer.train.schedules import (
    constant_with_warmup,
    make_lr_lambda,
    noam,
    noam_peak,
    warmup_cosine,
    warmup_linear,
)


def test_warmup_is_linear_and_exact():
    for f in (
        lambda s: warmup_cosine(s, 4, 20, 0.1),
        lambda s: warmup_linear(s, 4, 20, 0.1),
        lambda s: constant_with_warmup(s, 4),
    ):
        assert [f(s) for s in (1, 2, 3, 4)] == [0.25, 0.5, 0.75, 1.0]


def test_cosine_shape_and_end():
    assert warmup_cosine(4, 4, 20, 0.1) == 1.0
    assert warmup_cosine(12, 4, 20, 0.1) == pytest.approx(0.55)  # halfway: (1 + 0.1) / 2
    assert warmup_cosine(20, 4, 20, 0.1) == pytest.approx(0.1)  # ends exactly at min_ratio
    assert warmup_cosine(25, 4, 20, 0.1) == pytest.approx(0.1)  # and stays there
    values = [warmup_cosine(s, 4, 20, 0.1) for s in range(4, 21)]
    assert all(a > b for a, b in zip(values, values[1:]))  # strictly decreasing after warmup
    assert warmup_cosine(1, 0, 10, 0.0) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.1)))


def test_linear_and_constant():
    assert warmup_linear(12, 4, 20, 0.0) == pytest.approx(0.5)
    assert warmup_linear(20, 4, 20, 0.2) == pytest.approx(0.2)
    assert constant_with_warmup(1000, 4) == 1.0
    assert constant_with_warmup(1, 0) == 1.0


def test_noam_peaks_at_one_and_decays_as_inverse_sqrt():
    w = 100
    assert noam(w, 512, w) == 1.0
    assert noam(50, 512, w) == pytest.approx(0.5)  # linear warmup
    assert max(noam(s, 512, w) for s in range(1, 2000)) == 1.0
    assert noam(400, 512, w) == pytest.approx(0.5)  # (100 / 400) ** 0.5
    for s in (200, 900, 1600):
        assert noam(s, 512, w) == pytest.approx((s / w) ** -0.5)
    assert noam(300, 64, w) == noam(300, 512, w)  # d_model cancels after normalisation
    # The paper's formula divided by its peak value:
    d = 512
    paper = lambda s: d**-0.5 * min(s**-0.5, s * w**-1.5)  # noqa: E731
    for s in (1, 37, 100, 555):
        assert noam(s, d, w) * noam_peak(d, w) == pytest.approx(paper(s))


def _lrs(cfg, total, n):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=cfg.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, make_lr_lambda(cfg, total))
    out = []
    for _ in range(n):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_make_lr_lambda_drives_lambdalr_with_one_based_steps():
    cfg = TrainConfig(lr=1.0, schedule="cosine", warmup_steps=2, min_lr_ratio=0.0, max_steps=6)
    lrs = _lrs(cfg, 6, 6)
    assert lrs[:2] == [0.5, 1.0]
    assert lrs[-1] == pytest.approx(0.0, abs=1e-12)  # the last step is at min_ratio
    cfg = TrainConfig(lr=2.0, schedule="noam", warmup_steps=4, noam_d_model=None, max_steps=9)
    assert _lrs(cfg, None, 5)[3] == 2.0  # peak == lr
    cfg = TrainConfig(lr=2.0, schedule="noam", warmup_steps=4, noam_d_model=256, max_steps=9)
    assert _lrs(cfg, None, 5)[3] == pytest.approx(2.0 * 256**-0.5 * 4**-0.5)
    assert schedules.make_lr_lambda is make_lr_lambda


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"lr": -1e-3}, "lr=-0.001"),
        ({"lr": 0}, "lr=0"),
        ({"schedule": "exponential"}, "schedule='exponential'"),
        ({"precision": "fp16"}, "CUDA"),
        ({"precision": "int8"}, "precision"),
        ({"accumulation": 0}, "accumulation"),
        ({"betas": (0.9, 1.5)}, "betas"),
        ({"schedule": "noam", "warmup_steps": 0}, "warmup_steps"),
        ({"metric_mode": "up"}, "metric_mode"),
        ({"max_steps": 0}, "max_steps"),
        ({"lr": "fast"}, "lr"),
    ],
)
def test_invalid_config_is_a_one_line_user_error(kwargs, needle):
    with pytest.raises(UserError) as e:
        TrainConfig(**kwargs)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_config_json_round_trip(tmp_path):
    cfg = TrainConfig(lr=1e-3, betas=(0.8, 0.95), schedule="noam", warmup_steps=10, max_steps=7,
                      precision="bf16", early_stopping_patience=3, metric="accuracy", metric_mode="max")
    again = TrainConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg and again.betas == (0.8, 0.95)
    cfg.save_json(tmp_path / "c.json")
    assert TrainConfig.load_json(tmp_path / "c.json") == cfg
    with pytest.raises(UserError, match="unknown key"):
        TrainConfig.from_dict({"lr": 1e-3, "learning_rate": 3})
