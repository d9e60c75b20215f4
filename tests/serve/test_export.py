"""`scratchformer export RUN --format onnx`: the folder runs with onnxruntime alone and matches
our model to 1e-4 on real inputs; `serve --backend onnxruntime` answers from it."""
import json
import subprocess
import sys

import httpx
import numpy as np
import pytest
from conftest import running, wait_ready

from scratchformer.cli import main
from scratchformer.serve.app import create_app
from scratchformer.serve.state import ServeConfig
from scratchformer.serve.backends import ModelSpec, load_backend

pytest.importorskip("onnxruntime", reason="pip install -e '.[test]' brings onnxruntime")


@pytest.fixture(scope="module")
def exported(clf_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("onnx") / "demo"
    assert main(["export", str(clf_run), "--format", "onnx", "--out", str(out)]) == 0
    return out


def test_export_matches_ours_on_the_test_split(exported, clf_run):
    from scratchformer.tasks.classify import Classifier, load_classification
    from scratchformer.tasks.classify.export import check_parity

    meta = json.loads((exported / "export.json").read_text())
    assert meta["parity"]["max_abs_diff"] <= 1e-4 and meta["parity"]["argmax_agree"]
    assert meta["parity"]["n_texts"] >= 30  # the run's own test texts, batched with padding
    clf = Classifier.load(clf_run, blend=False)
    texts = [t for t, _ in load_classification(clf.recipe.data).test][:40]
    texts += ["球赛队胜负冠军进攻" * 5, "x"]  # longer than max_len (truncated) and unseen characters
    rep = check_parity(clf, exported, texts)
    assert rep["max_abs_diff"] <= 1e-4 and rep["argmax_agree"], rep


def test_the_folder_runs_with_onnxruntime_alone(exported, clf_run):
    """The README's ten lines, in a fresh interpreter that never imports torch or scratchformer."""
    code = f"""
import sys, onnxruntime as ort
sys.path.insert(0, {str(exported)!r})
from preprocess import Preprocessor
pre = Preprocessor({str(exported)!r})
sess = ort.InferenceSession({str(exported / 'model.onnx')!r})
logits, embedding = sess.run(None, pre(["股市涨跌银行利率", "球赛队胜负"]))
print(pre.labels[int(logits[0].argmax())], pre.labels[int(logits[1].argmax())], logits.shape, embedding.shape)
assert "torch" not in sys.modules and "scratchformer" not in sys.modules
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    from scratchformer.tasks.classify import Classifier

    want = [r["label"] for r in Classifier.load(clf_run, blend=False).predict(["股市涨跌银行利率", "球赛队胜负"])]
    assert out[:2] == want


def test_serve_backend_onnxruntime(exported, clf_run):
    from scratchformer.tasks.classify import Classifier

    backend = load_backend(ModelSpec("onnx", str(exported)), "onnxruntime")
    with running(create_app(lambda: [backend], ServeConfig())) as u:
        wait_ready(u)
        assert httpx.get(u + "/v1/models").json()["data"][0]["backend"] == "onnxruntime"
        r = httpx.post(u + "/v1/classify", json={"input": ["股市涨跌", "球赛队胜负"]})
    assert r.status_code == 200
    want = Classifier.load(clf_run, blend=False).predict(["股市涨跌", "球赛队胜负"])
    for got, w in zip(r.json()["data"], want):
        assert got["label"] == w["label"] and abs(got["score"] - w["score"]) < 1e-4


def test_export_refuses_a_non_empty_folder_and_a_run_dir_backend(clf_run, exported, capsys):
    assert main(["export", str(clf_run), "--format", "onnx", "--out", str(exported)]) == 2
    assert "is not empty: give a new folder to --out" in capsys.readouterr().err
    from scratchformer.errors import UserError

    with pytest.raises(UserError) as e:
        load_backend(ModelSpec("x", str(clf_run)), "onnxruntime")
    assert str(e.value) == (f"{clf_run} is not an export for --backend onnxruntime (no export.json): run "
                            f"`scratchformer export {clf_run} --format onnx --out DIR` and serve DIR (run folders "
                            "are served without --backend)")


def test_a_classifier_export_is_refused_under_another_engine_or_a_compute_type(exported):
    """Issue 54 rule 6: a classifier export once started under --backend ctranslate2."""
    from scratchformer.errors import UserError

    for backend, compute, message in (
            ("ctranslate2", None, f"{exported} is the onnx export of a classifier, which runs under --backend "
                                  "onnxruntime, not ctranslate2: leave --backend out or give --backend onnxruntime"),
            (None, "bfloat16", f"--compute-type bfloat16 does not apply to {exported}: an export runs as it was "
                               "exported; leave it out, or serve the run folder to choose what it computes in")):
        with pytest.raises(UserError) as e:
            load_backend(ModelSpec("x", str(exported)), backend, compute)
        assert str(e.value) == message
    assert load_backend(ModelSpec("x", str(exported))).describe()["backend"] == "onnxruntime"  # its own engine
