"""Every shipped experiment in --quick mode: the report quotes the claim, its table matches the
runs, and each check has a verdict. (Data: the registered sets, fetched once and cached.)"""
import json
import re

import pandas as pd
import pytest

from scratchformer.cli import main
from scratchformer.experiments.results import fmt
from scratchformer.experiments.spec import ExperimentSpec, available
from scratchformer.experiments.verdict import INCONCLUSIVE, NOT_RUN, NOT_SUPPORTED, SMOKE, SUPPORTED

VERDICTS = {SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE, NOT_RUN}
SHIPPED = available()


def test_the_issue_s_experiments_are_shipped():
    for name in ("norm-placement", "heads", "ffn-width", "depth", "lr-warmup", "positions", "tokenization", "efficiency", "ablations", "rnn-baseline"):
        assert name in SHIPPED


@pytest.mark.network
@pytest.mark.parametrize("name", SHIPPED)
def test_quick_experiment_report(name, tmp_path, capsys):
    spec = ExperimentSpec.load(name)
    out = tmp_path / name
    assert main(["experiment", name, "--quick", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    report = (out / "report.md").read_text(encoding="utf-8")
    assert spec.claim["zh"] in report and spec.claim["en"] in report
    assert "quick" in report and f"scratchformer experiment {name} --quick" in report

    # the table has one row per cell of the quick grid, with the numbers of results.csv
    plan = spec.resolved(quick=True, seeds=None)
    summary = pd.read_csv(out / "results.csv")
    runs = pd.read_csv(out / "runs.csv")
    n_cells = 1
    for values in plan.grid.values():
        n_cells *= len(values)
    assert len(summary) == n_cells and len(runs) == n_cells * plan.seeds
    assert (runs["status"].isin(["done", "diverged"])).all()
    column = next(c for c in spec.columns if f"{c}_mean" in summary.columns and summary[f"{c}_mean"].notna().all())
    for _, row in summary.iterrows():
        assert fmt(row[f"{column}_mean"], row[f"{column}_std"], column) in report
    # a smoke run judges nothing: one line per check, none a verdict word, at least one check measured
    verdicts = re.findall(r"\| \*\*([^*]+)\*\* \|", report)
    assert len(verdicts) == len(spec.checks) and set(verdicts) <= {SMOKE, NOT_RUN}
    assert any(v == SMOKE for v in verdicts), "the quick grid should exercise a check"
    assert not {SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE} & set(verdicts) and INCONCLUSIVE not in err
    assert (out / "curves.png").exists() and (out / "metric_vs_value.png").exists()
    assert "report:" in err
    # a second call resumes: nothing is retrained
    assert main(["experiment", name, "--quick", "--out", str(out)]) == 0
    assert capsys.readouterr().err.count("finished before, skipped") == len(runs)
    assert json.loads((out / "sweep.json").read_text())["seeds"] == plan.seeds


@pytest.mark.network
def test_grid_and_set_overrides_shrink_a_run_and_are_recorded(tmp_path):
    out = tmp_path / "heads"
    assert main(["experiment", "heads", "--quick", "--seeds", "1", "--grid", "model.encoder.n_heads=2",
                 "--set", "train.max_steps=2", "--out", str(out)]) == 0
    runs = pd.read_csv(out / "runs.csv")
    assert list(runs["n_heads"]) == [2] and list(runs["steps"]) == [2]
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "--grid model.encoder.n_heads=2 --set train.max_steps=2" in report
    assert "fewer than 2 finished seeds" in report or "not run" in report


@pytest.mark.network
def test_data_replaces_the_spec_s_data_set_and_is_recorded(tmp_path, capsys):
    # the issue's `experiment ... --data thucnews-100k`: the same claim read off another registered set
    out = tmp_path / "tok"
    assert main(["experiment", "tokenization", "--quick", "--seeds", "1", "--grid", "tokenizer=char",
                 "--set", "train.max_steps=1", "--data", "thucnews-100k", "--out", str(out)]) == 0
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "data: thucnews-100k" in report and "--data thucnews-100k" in report
    # the quick subset's rows are thucnews-100k's own first rows, not thucnews's
    from scratchformer.data.registry import load_dataset

    first = json.loads((out / "data" / "train.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert first["text"] == load_dataset("thucnews-100k").train[0][0]
    assert first["text"] != load_dataset("thucnews").train[0][0]
    # the same folder with the spec's own data is refused rather than mixed
    capsys.readouterr()
    assert main(["experiment", "tokenization", "--quick", "--seeds", "1", "--grid", "tokenizer=char",
                 "--set", "train.max_steps=1", "--out", str(out)]) == 2
    assert "--retrain-changed" in capsys.readouterr().err


def test_data_of_another_task_is_refused_in_one_line(tmp_path):
    from scratchformer.errors import UserError
    from scratchformer.experiments.experiment import run_experiment

    with pytest.raises(UserError, match="a lm data set, but tokenization is a classify experiment"):
        run_experiment("tokenization", tmp_path / "x", quick=True, data="shakespeare")
    with pytest.raises(UserError, match="did you mean 'thucnews'"):
        run_experiment("tokenization", tmp_path / "x", quick=True, data="thucnewz")
    assert not (tmp_path / "x").exists()
