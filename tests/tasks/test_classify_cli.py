"""Classification end to end on a tiny synthetic data set: CLI train / predict / evaluate."""
import json

import pytest

from scratchformer.cli import main
from scratchformer.errors import UserError
from scratchformer.tasks.classify import Classifier, ClassifyRecipe
from scratchformer.commands.common import load_recipe
from toy_data import write_reviews_tsv

TINY = ["--set", "model.encoder.d_model=32", "--set", "model.encoder.n_heads=2",
        "--set", "model.encoder.d_ff=64", "--set", "model.encoder.n_layers=1",
        "--set", "train.epochs=8", "--set", "train.lr=3e-3", "--set", "data.batch_size=16",
        "--set", "train.progress=false"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("clf")
    write_reviews_tsv(d / "train.tsv", 240, 0)
    write_reviews_tsv(d / "test.tsv", 60, 1)
    out = d / "run"
    rc = main(["train", "classify", "--data", str(d / "train.tsv"), "--test", str(d / "test.tsv"),
               "--out", str(out), "--set", "data.tokenizer=word", "--set", "ensemble=1"] + TINY)  # a single run's layout
    assert rc == 0
    return d, out


def test_train_writes_a_complete_run(run):
    _, out = run
    for name in ("config.json", "model.safetensors", "tokenizer.json", "labels.json",
                 "metrics.jsonl", "curves.png", "test_metrics.json", "confusion_test.png"):
        assert (out / name).exists(), name
    test = json.loads((out / "test_metrics.json").read_text())
    assert test["accuracy"] > 0.9  # the synthetic task is easy: the words give the label away


def test_python_api_and_cli_predict(run, capsys):
    _, out = run
    clf = Classifier.load(out)
    res = clf.predict(["good great fine movie", "bad awful poor movie"])
    assert [r["label"] for r in res] == ["pos", "neg"]
    assert abs(sum(res[0]["probs"].values()) - 1) < 1e-5
    assert main(["predict", str(out), "--json", "great great good"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["label"] == "pos"
    with pytest.raises(UserError, match="empty"):
        clf.predict(["   "])
    tokens, weights = clf.attention("good movie")
    assert weights[0].shape == (2, len(tokens), len(tokens))


def test_cli_evaluate_on_file(run, capsys):
    d, out = run
    assert main(["evaluate", str(out), "--data", str(d / "test.tsv"), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["n"] == 60 and rep["accuracy"] > 0.9 and set(rep["per_class"]) == {"neg", "pos"}


def test_bad_inputs_give_one_line_errors(tmp_path, capsys):
    bad = tmp_path / "bad.tsv"
    bad.write_text("text\tlabel\nhello\tpos\nno label column here\n")
    assert main(["train", "classify", "--data", str(bad), "--out", str(tmp_path / "r")] + TINY) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "bad.tsv:3" in err and "Traceback" not in err
    assert main(["predict", str(tmp_path / "nothing")]) == 2
    assert "not a" in capsys.readouterr().err
    with pytest.raises(UserError, match="no option 'd_modle'"):
        load_recipe(ClassifyRecipe, None, ["model.encoder.d_modle=3"])


def test_ensemble_run_trains_members_and_averages(tmp_path, capsys):
    write_reviews_tsv(tmp_path / "train.tsv", 160, 0)
    write_reviews_tsv(tmp_path / "test.tsv", 40, 1)
    out = tmp_path / "ens"
    args = ["train", "classify", "--data", str(tmp_path / "train.tsv"), "--test", str(tmp_path / "test.tsv"),
            "--out", str(out), "--set", "data.tokenizer=word", "--set", "ensemble=2"] + TINY + ["--set", "train.epochs=3"]
    assert main(args) == 0
    members = json.loads((out / "members.json").read_text())
    assert [m["seed"] for m in members] == [0, 1] and (out / "member1" / "model.safetensors").exists()
    clf = Classifier.load(out, blend=False)
    texts = ["good great fine movie", "bad awful poor movie"]
    mean = (clf.members[0].predict_proba(texts) + clf.members[1].predict_proba(texts)) / 2
    assert abs(clf.predict_proba(texts) - mean).max() < 1e-6
    assert [r["label"] for r in clf.predict(texts)] == ["pos", "neg"]
    rep = json.loads((out / "test_metrics.json").read_text())
    assert rep["members"] == 2 and rep["n"] == 40
    blended = Classifier.load(out)  # the adaptive default blends the ensemble with the TF-IDF baseline
    w = blended.weight
    assert len(blended.members) == 2
    assert abs(blended.predict_proba(texts) - (w * mean + (1 - w) * blended.baseline.predict_proba(texts))).max() < 1e-6
    capsys.readouterr()
    assert main(["evaluate", str(out), "--data", str(tmp_path / "test.tsv"), "--json", "--no-blend"]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == rep["accuracy"]
    # resume keeps finished members
    stamp = (out / "member0" / "model.safetensors").stat().st_mtime_ns
    assert main(args + ["--resume"]) == 0
    assert (out / "member0" / "model.safetensors").stat().st_mtime_ns == stamp
