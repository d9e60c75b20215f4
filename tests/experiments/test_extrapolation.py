"""The `position-extrapolation` experiment's parts: the one-cell `value` check, the LM
extrapolation measure (several columns from one run) and the loss-vs-position figure."""
import json
import math
import random

import pandas as pd
import pytest
from scipy import stats

from scratchformer.cli import main
from scratchformer.experiments.extrapolation import lm_extrapolation, plot_loss_vs_position
from scratchformer.experiments.grid import Cell
from scratchformer.experiments.runner import RunSlot
from scratchformer.experiments.spec import ExperimentSpec
from scratchformer.experiments.verdict import INCONCLUSIVE, NOT_RUN, NOT_SUPPORTED, SUPPORTED, evaluate_check


def _runs(values: dict) -> pd.DataFrame:
    return pd.DataFrame([{"cell": f"p={p}", "p": p, "seed": i, "diverged": v is None, "gap": v}
                         for p, vs in values.items() for i, v in enumerate(vs)])


def test_value_check_is_a_one_sample_t_interval_against_the_region():
    runs = _runs({"sin": [0.02, 0.04, 0.03], "learned": [1.2, 1.5, 1.3], "rope": [0.05, None]})
    ok = evaluate_check({"kind": "value", "column": "gap", "a": {"p": "sin"}, "region": {"<": 0.1}}, runs, ["p"])
    half = stats.t.ppf(0.975, 2) * 0.01 / math.sqrt(3)
    assert ok.verdict == SUPPORTED and ok.estimate == pytest.approx(0.03)
    assert ok.high == pytest.approx(0.03 + half)
    broke = evaluate_check({"kind": "value", "column": "gap", "a": {"p": "sin"}, "region": {">": 0.5}}, runs, ["p"])
    assert broke.verdict == NOT_SUPPORTED
    wide = evaluate_check({"kind": "value", "column": "gap", "a": {"p": "learned"}, "region": {">": 1.3}}, runs, ["p"])
    assert wide.verdict == INCONCLUSIVE
    one = evaluate_check({"kind": "value", "column": "gap", "a": {"p": "rope"}, "region": {"<": 0.1}}, runs, ["p"])
    assert one.verdict == INCONCLUSIVE and "fewer than 2" in one.measured  # the diverged seed is left out
    assert evaluate_check({"kind": "value", "column": "gap", "a": {"p": "alibi"}, "region": {"<": 0.1}},
                          runs, ["p"]).verdict == NOT_RUN


def test_the_spec_loads_and_its_checks_name_its_axes():
    spec = ExperimentSpec.load("position-extrapolation")
    assert spec.figures == ["loss_vs_position"] and spec.measures == ["extrapolation"]
    axes = {k.split(".")[-1] for k in spec.grid}
    assert all(set(c["a"]) <= axes and set(c.get("b", {})) <= axes for c in spec.checks)


@pytest.mark.parametrize("position,max_len", [("rope", 256), ("learned", 48)])
def test_extrapolation_measure_gives_every_column_and_the_figure(tmp_path, position, max_len):
    rng = random.Random(0)
    for name, n in (("train.txt", 4000), ("valid.txt", 3000)):
        (tmp_path / name).write_text("".join(rng.choice("abcdef \n") for _ in range(n)))
    run = tmp_path / "cells" / f"position={position}" / "seed0"
    assert main(["train", "lm", "--data", str(tmp_path / "train.txt"), "--valid", str(tmp_path / "valid.txt"),
                 "--out", str(run), "--set", f"model.transformer.position={position}",
                 "--set", f"model.transformer.max_len={max_len}", "--set", "model.transformer.d_model=16",
                 "--set", "model.transformer.n_heads=2", "--set", "model.transformer.d_ff=32",
                 "--set", "model.transformer.n_layers=1", "--set", "data.context=16", "--set", "train.max_steps=3",
                 "--set", "train.eval_every=0", "--set", "train.progress=false"]) == 0
    cols = lm_extrapolation(run, [])
    assert cols["loss_at_1L"] > 0 and cols["beyond_2L"] == cols["beyond_2L"]
    if position == "rope":  # 8L = 128: every column, plus the RoPE-scaled ones
        assert all(math.isfinite(cols[k]) for k in ("loss_at_8L", "beyond_8L", "loss_at_8L_linear", "loss_at_8L_ntk"))
        assert (run / "context_128.json").exists()
    else:  # a table of 48 rows stops at 48: no 4L, 8L
        assert math.isnan(cols["loss_at_4L"]) and math.isnan(cols["beyond_8L"]) and "loss_at_8L_ntk" not in cols
        assert json.loads((run / "context_48.json").read_text())["context"] == 48
    slot = RunSlot(Cell((("position", position),), ()), 0, run.parent)
    assert plot_loss_vs_position([slot], tmp_path / "f.png").stat().st_size > 5000
