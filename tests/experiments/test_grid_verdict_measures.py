"""Grid parsing, Welch intervals and verdicts, head redundancy, oscillation: fast, no training."""
import math

import numpy as np
import pandas as pd
import pytest
import torch
from scipy import stats

from scratchformer.errors import UserError
from scratchformer.experiments.grid import Axis, axes_from, cells, parse_grid_arg
from scratchformer.experiments.measures import head_redundancy, mean_pairwise_cosine
from scratchformer.experiments.results import fmt, oscillation, time_per_step
from scratchformer.experiments.verdict import (
    INCONCLUSIVE, NOT_RUN, NOT_SUPPORTED, SUPPORTED, classify_interval, evaluate_check, welch_ci)


def test_grid_argument_parses_json_values_and_keeps_brackets_whole():
    assert parse_grid_arg("train.lr=1e-3,3e-4") == ("train.lr", [0.001, 0.0003])
    assert parse_grid_arg("model.encoder.position=rope,alibi") == ("model.encoder.position", ["rope", "alibi"])
    assert parse_grid_arg("train.betas=[0.9,0.99],[0.9,0.999]")[1] == [[0.9, 0.99], [0.9, 0.999]]
    with pytest.raises(UserError, match="KEY=V1"):
        parse_grid_arg("train.lr")


def test_cells_are_the_cross_product_with_readable_names_and_typed_sets():
    axes = axes_from({"model.encoder.n_heads": [1, 8], "train.lr": [0.001],
                      "ablation": {"none": {}, "no-pos": {"model.encoder.position": "none"}}})
    cs = cells(axes)
    assert [c.name for c in cs] == ["n_heads=1,lr=0.001,ablation=none", "n_heads=1,lr=0.001,ablation=no-pos",
                                    "n_heads=8,lr=0.001,ablation=none", "n_heads=8,lr=0.001,ablation=no-pos"]
    assert cs[1].sets == ("model.encoder.n_heads=1", "train.lr=0.001", "model.encoder.position=none")
    assert cs[3].matches({"n_heads": 8, "ablation": "no-pos"}) and not cs[3].matches({"n_heads": 1})
    # two keys with the same last part keep their full names
    assert [a.name for a in axes_from({"a.dropout": [0], "b.dropout": [0]})] == ["a.dropout", "b.dropout"]
    with pytest.raises(UserError, match="repeat"):
        Axis.from_key("train.lr", [1, 1])


def test_welch_interval_matches_scipy_ttest():
    a, b = np.array([0.81, 0.83, 0.80, 0.84]), np.array([0.78, 0.80, 0.79])
    d, low, high, p = welch_ci(a, b)
    ref = stats.ttest_ind(a, b, equal_var=False)
    assert p == pytest.approx(ref.pvalue, rel=1e-9)
    assert d == pytest.approx(a.mean() - b.mean())
    ci = ref.confidence_interval(0.95)
    assert (low, high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert welch_ci(a, b[:1]) is None  # one seed: no interval


@pytest.mark.parametrize("low,high,region,verdict", [
    (0.01, 0.03, (">", 0.0), SUPPORTED), (-0.03, -0.01, (">", 0.0), NOT_SUPPORTED), (-0.01, 0.02, (">", 0.0), INCONCLUSIVE),
    (-0.02, 0.005, ("<", 0.01), SUPPORTED), (0.02, 0.04, ("<", 0.01), NOT_SUPPORTED),
    (-0.004, 0.006, ("within", 0.01), SUPPORTED), (0.02, 0.05, ("within", 0.01), NOT_SUPPORTED),
    (0.0, 0.02, ("within", 0.01), INCONCLUSIVE)])
def test_verdict_is_where_the_interval_lies_against_the_claimed_region(low, high, region, verdict):
    assert classify_interval(low, high, *region) == verdict


def _runs(values: dict) -> pd.DataFrame:
    rows = [{"cell": f"h={h}", "h": str(h), "seed": i, "diverged": v is None, "acc": v}
            for h, vs in values.items() for i, v in enumerate(vs)]
    return pd.DataFrame(rows)


def test_checks_on_a_runs_table():
    runs = _runs({1: [0.70, 0.71, 0.69], 8: [0.80, 0.81, 0.79], 32: [0.80, None, 0.81]})
    better = evaluate_check({"says": "8 > 1", "column": "acc", "a": {"h": 8}, "b": {"h": 1}, "region": {">": 0}}, runs, ["h"])
    assert better.verdict == SUPPORTED and better.estimate == pytest.approx(0.10)
    ratio = evaluate_check({"kind": "ratio", "column": "acc", "a": {"h": 8}, "b": {"h": 1}, "region": {">": 2}}, runs, ["h"])
    assert ratio.verdict == NOT_SUPPORTED and ratio.estimate == pytest.approx(1.14, abs=0.01)
    assert "ratio a/b" in ratio.measured
    # the diverged seed of h=32 is left out of its mean
    gain = evaluate_check({"column": "acc", "a": {"h": 32}, "b": {"h": 8}, "region": {"<": 0.01}}, runs, ["h"])
    assert "n = 2 vs 3" in gain.measured
    missing = evaluate_check({"column": "acc", "a": {"h": 16}, "b": {"h": 8}, "region": {">": 0}}, runs, ["h"])
    assert missing.verdict == NOT_RUN
    assert evaluate_check({"column": "acc", "a": {"depth": 6}, "b": {"h": 8}, "region": {">": 0}}, runs, ["h"]).verdict == NOT_RUN
    div = evaluate_check({"kind": "diverged_more", "a": {"h": 32}, "b": {"h": 8}}, runs, ["h"])
    assert div.verdict == INCONCLUSIVE and "1/3 vs 0/3" in div.measured


def test_head_redundancy_is_one_for_identical_heads_and_zero_for_disjoint_ones():
    same = torch.softmax(torch.randn(1, 5, 5), -1).expand(4, 5, 5)
    assert mean_pairwise_cosine(same) == pytest.approx(1.0)
    disjoint = torch.zeros(2, 3, 3)
    disjoint[0, :, 0] = 1  # head 0 always looks at token 0, head 1 at token 1
    disjoint[1, :, 1] = 1
    assert mean_pairwise_cosine(disjoint) == pytest.approx(0.0)
    assert math.isnan(mean_pairwise_cosine(same[:1]))
    assert head_redundancy([same, disjoint]) == pytest.approx(0.5)


def test_oscillation_ignores_a_straight_trend_and_sees_a_zigzag():
    trend = [3.0 - 0.01 * i for i in range(40)]
    assert oscillation(trend) == pytest.approx(0.0, abs=1e-12)
    zigzag = [t + (0.1 if i % 2 else -0.1) for i, t in enumerate(trend)]
    assert oscillation(zigzag) == pytest.approx(0.1, rel=0.1)
    assert oscillation(trend[:5]) is None


def test_time_per_step_leaves_out_intervals_with_an_evaluation():
    train = [{"step": s, "elapsed": e} for s, e in [(10, 1.0), (20, 2.0), (30, 8.0), (40, 9.0)]]
    assert time_per_step(train, valid_steps={25}) == pytest.approx(0.1)


def test_number_formats():
    assert fmt(0.81234, 0.0041, "test_accuracy") == "0.8123 ± 0.0041"
    assert fmt(0.0123, 0.001, "time_per_step_s") == "12.3 ± 1.0 ms"
    assert fmt(1_234_567, 0.0, "params") == "1.235M"
    assert fmt(34438.6, 6572.27, "tokens_per_s") == "34439 ± 6572 tok/s"  # a rate, not milliseconds
    assert fmt(48.8385, 0.8054, "wall_s") == fmt(48.8385, 0.8054, "epoch_s") == "48.8 ± 0.8 s"
    assert fmt(float("nan"), None, "x") == "—"


def test_each_run_is_an_ordinary_train_command(tmp_path):
    from scratchformer.experiments.runner import SweepSpec

    spec = SweepSpec("lm", tmp_path, axes_from({"train.lr": [0.001]}), seeds=2, data="sanguo",
                     sets=["train.max_steps=5"], time_budget=2.5)
    cell = spec.cells()[0]
    argv = spec.argv(cell, 1, tmp_path / "run", resume=True)
    assert argv[:4] == ["train", "lm", "--data", "sanguo"]
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    assert sets == ["train.max_steps=5", "train.lr=0.001", "train.seed=1", "train.progress=false", "train.max_minutes=2.5"]
    assert argv[-3:] == ["--out", str(tmp_path / "run"), "--resume"] and "--no-baseline" not in argv
    clf = SweepSpec("classify", tmp_path, axes_from({"train.lr": [0.001]}), seeds=1, data="thucnews")
    argv = clf.argv(clf.cells()[0], 0, tmp_path / "c", resume=False)
    assert "--no-baseline" in argv  # fitted once, not per cell
    sets = [argv[i + 1] for i, a in enumerate(argv) if a == "--set"]
    assert sets[0] == "ensemble=1"  # no --config: one run per cell, not the adaptive default's seeds
    with pytest.raises(UserError, match="--task"):
        SweepSpec("mlm", tmp_path, [])
