"""Tiny runs of every task, trained once per test session (a few seconds each)."""
import random

import pytest
from toy_data import headlines, train_toy_translator, write_tsv

from scratchformer.cli import main

CLASSIFY = ["--set", "model.encoder.d_model=32", "--set", "model.encoder.n_heads=4", "--set", "model.encoder.d_ff=64",
            "--set", "model.encoder.n_layers=2", "--set", "model.encoder.dropout=0.0", "--set", "train.epochs=6",
            "--set", "train.lr=3e-3", "--set", "data.batch_size=16", "--set", "train.progress=false"]


@pytest.fixture(scope="session")
def clf_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("clf")
    write_tsv(d / "train.tsv", headlines(320, 0))
    write_tsv(d / "test.tsv", headlines(60, 1))
    out = d / "run"
    assert main(["train", "classify", "--data", str(d / "train.tsv"), "--test", str(d / "test.tsv"),
                 "--out", str(out), "--set", "ensemble=1"] + CLASSIFY) == 0  # one run: the layout the checks read
    return out


@pytest.fixture(scope="session")
def lm_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("lm")
    rng = random.Random(0)
    (d / "text.txt").write_text("\n".join("".join(rng.choice("天地人和春夏秋冬") for _ in range(30)) for _ in range(60)),
                                encoding="utf-8")
    out = d / "run"
    assert main(["train", "lm", "--data", str(d / "text.txt"), "--out", str(out),
                 "--set", "model.encoder.d_model=32", "--set", "model.encoder.n_heads=2", "--set", "model.encoder.d_ff=64",
                 "--set", "model.encoder.n_layers=2", "--set", "data.context=16", "--set", "data.batch_size=8",
                 "--set", "data.eval_windows=10", "--set", "train.max_steps=20", "--set", "train.eval_every=20",
                 "--set", "train.warmup_steps=5", "--set", "train.progress=false"]) == 0
    return out


@pytest.fixture(scope="session")
def mt_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("mt")
    return train_toy_translator(d)


@pytest.fixture(scope="session")
def mlm_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("mlm")
    (d / "corpus.txt").write_text("\n".join(t for t, _ in headlines(120, 2)), encoding="utf-8")
    out = d / "run"
    assert main(["pretrain", "mlm", "--data", str(d / "corpus.txt"), "--out", str(out),
                 "--set", "model.encoder.d_model=32", "--set", "model.encoder.n_heads=2", "--set", "model.encoder.d_ff=64",
                 "--set", "model.encoder.n_layers=1", "--set", "data.min_freq=1", "--set", "train.max_steps=6",
                 "--set", "train.eval_every=3", "--set", "data.valid_frac=0.1", "--set", "train.progress=false"]) == 0
    return out


@pytest.fixture(scope="session")
def late_token_run(tmp_path_factory):
    """A classifier saved after at most 10 steps whose training data holds "罕" in one text only,
    in a later batch (batch 14 of 21 in the first epoch; test_doctor_checkpoint.py checks it)."""
    d = tmp_path_factory.mktemp("late")
    write_tsv(d / "train.tsv", headlines(320, 0) + [("罕见球赛今日消息新的一天", "体育")])
    write_tsv(d / "valid.tsv", headlines(40, 3))
    write_tsv(d / "test.tsv", headlines(40, 1))
    out = d / "run"
    assert main(["train", "classify", "--data", str(d / "train.tsv"), "--valid", str(d / "valid.tsv"),
                 "--test", str(d / "test.tsv"), "--out", str(out), "--set", "ensemble=1", "--no-baseline"]
                + CLASSIFY + ["--set", "time_budget=null", "--set", "blend=false", "--set", "train.max_steps=10",
                                "--set", "train.eval_every=5", "--set", "train.warmup_steps=0"]) == 0
    return out
