"""`scratchformer sweep` on a tiny synthetic data set: table, figures, skip, resume, divergence."""
import json

import pandas as pd
import pytest

from scratchformer.cli import main
from scratchformer.experiments.results import read_jsonl
from toy_data import write_reviews_tsv

TINY = {"data": {"tokenizer": "word", "batch_size": 16},
        "model": {"encoder": {"d_model": 16, "n_heads": 2, "d_ff": 32, "n_layers": 1}},
        "train": {"max_steps": 6, "lr": 3e-3, "eval_every": 3, "log_every": 1,
                  "metric": "accuracy", "metric_mode": "max"}}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("sweepdata")
    for name, n, seed in (("train", 160, 0), ("valid", 40, 1), ("test", 40, 2)):
        write_reviews_tsv(d / f"{name}.tsv", n, seed, filler=("the", "movie"))
    (d / "base.json").write_text(json.dumps(TINY))
    return d


def _sweep(data, out, *extra):
    return main(["sweep", "--config", str(data / "base.json"), "--data", str(data / "train.tsv"),
                 "--valid", str(data / "valid.tsv"), "--test", str(data / "test.tsv"),
                 "--seeds", "2", "--out", str(out), "--in-process", *extra])


def test_sweep_table_figures_skip_and_resume(data, tmp_path, capsys):
    out = tmp_path / "sw"
    grid = ["--grid", "model.encoder.n_layers=1,2"]
    # an interrupted run: the cell's seed-1 run stopped at step 3 with a checkpoint, no record
    interrupted = out / "cells" / "n_layers=2" / "seed1"
    assert main(["train", "classify", "--config", str(data / "base.json"), "--data", str(data / "train.tsv"),
                 "--valid", str(data / "valid.tsv"), "--test", str(data / "test.tsv"),
                 "--set", "model.encoder.n_layers=2", "--set", "train.seed=1", "--set", "train.max_steps=3",
                 "--set", "train.progress=false", "--out", str(interrupted)]) == 0
    before = read_jsonl(interrupted / "metrics.jsonl")
    # a folder killed before its first checkpoint: nothing to resume, it starts over
    (out / "cells" / "n_layers=1" / "seed0").mkdir(parents=True)
    (out / "cells" / "n_layers=1" / "seed0" / "config.json").write_text("{}")
    capsys.readouterr()
    assert _sweep(data, out, *grid) == 0
    printed = capsys.readouterr()
    assert "| n_layers | runs | diverged |" in printed.out
    rec = json.loads((out / "cells" / "n_layers=2" / "seed1.json").read_text())
    assert rec["status"] == "done" and rec["resumed"] is True
    after = read_jsonl(interrupted / "metrics.jsonl")
    assert after[: len(before)] == before and after[-1]["step"] == 6  # continued, not restarted
    assert json.loads((out / "cells" / "n_layers=1" / "seed0.json").read_text())["resumed"] is False

    runs = pd.read_csv(out / "runs.csv")
    assert len(runs) == 4 and set(runs["n_layers"]) == {1, 2} and set(runs["seed"]) == {0, 1}
    assert (runs["steps"] == 6).all() and not runs["diverged"].any()
    assert runs.groupby("n_layers")["params"].nunique().eq(1).all()
    summary = pd.read_csv(out / "results.csv")
    one = runs[runs["n_layers"] == 1]["test_accuracy"]
    row = summary[summary["n_layers"] == 1].iloc[0]
    assert row["test_accuracy_mean"] == pytest.approx(one.mean())
    assert row["test_accuracy_std"] == pytest.approx(one.std(ddof=1))
    md = (out / "results.md").read_text()
    assert f"{row['test_accuracy_mean']:.4f} ± {row['test_accuracy_std']:.4f}" in md
    for name in ("metric_vs_value.png", "curves.png", "sweep.json"):
        assert (out / name).stat().st_size > 0

    # a rerun skips every finished run and changes nothing
    stamp = {p: p.stat().st_mtime_ns for p in (out / "cells").glob("*/seed*/metrics.jsonl")}
    assert _sweep(data, out, *grid) == 0
    assert "finished before, skipped" in capsys.readouterr().err
    assert stamp == {p: p.stat().st_mtime_ns for p in (out / "cells").glob("*/seed*/metrics.jsonl")}


def test_a_diverged_run_is_recorded_and_the_sweep_goes_on(data, tmp_path):
    out = tmp_path / "div"
    assert _sweep(data, out, "--grid", "train.lr=0.003,1e30", "--set", "train.grad_clip=0",
                  "--set", "train.warmup_steps=0") == 0
    runs = pd.read_csv(out / "runs.csv")
    assert runs.groupby("lr")["diverged"].sum().to_dict() == {0.003: 0, 1e30: 2}
    rec = json.loads((out / "cells" / "lr=1e+30" / "seed0.json").read_text())
    assert rec["status"] == "diverged" and "diverged" in rec["error"]
    md = (out / "results.md").read_text()
    assert "| 1e+30 | 2 | 2 |" in md


def test_other_failures_stop_the_sweep_with_the_message(data, tmp_path, capsys):
    assert _sweep(data, tmp_path / "bad", "--grid", "model.encoder.n_heads=3") == 2
    assert "not divisible" in capsys.readouterr().err


def test_a_run_in_its_own_process_reports_its_peak_memory(data, tmp_path):
    out = tmp_path / "iso"
    assert main(["sweep", "--config", str(data / "base.json"), "--data", str(data / "train.tsv"),
                 "--grid", "model.encoder.n_layers=1", "--out", str(out)]) == 0
    rec = json.loads((out / "cells" / "n_layers=1" / "seed0.json").read_text())
    assert rec["status"] == "done" and 100 < rec["peak_rss_mib"] < 4000
