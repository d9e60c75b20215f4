"""`serve` answers with a `--model` run (the learner's own network) as with ours, over real HTTP, after the
original file is gone: the route calls the same `Classifier`, so the answer is the Python API's."""
import shutil
from pathlib import Path

import httpx
from conftest import running, wait_ready
from toy_data import headlines, write_tsv

from scratchformer.cli import main
from scratchformer.serve.app import create_app
from scratchformer.serve.backends import ClassifierBackend
from scratchformer.serve.state import ServeConfig

SOLUTION = Path(__file__).resolve().parents[2] / "exercises" / "solutions" / "12_your_model.py"


def test_serve_classifies_with_a_run_of_your_model(tmp_path):
    write_tsv(tmp_path / "train.tsv", headlines(200, 0))
    copy = tmp_path / "mine.py"
    shutil.copy(SOLUTION, copy)
    run = tmp_path / "run"
    assert main(["train", "classify", "--data", str(tmp_path / "train.tsv"), "--out", str(run), "--model", str(copy),
                 "--set", "train.epochs=2", "--set", "data.max_len=24", "--set", "time_budget=null",
                 "--set", "train.progress=false", "--no-baseline"]) == 0
    copy.unlink()
    backend = ClassifierBackend("mine", run)
    texts = ["球赛队胜负冠军", "股市涨跌银行利率"]
    with running(create_app(lambda: [backend], ServeConfig())) as url:
        wait_ready(url)
        r = httpx.post(url + "/v1/classify", json={"model": "mine", "input": texts}, timeout=30)
    assert r.status_code == 200, r.text
    got = [d["label"] for d in r.json()["data"]]
    assert got == [p["label"] for p in backend.clf.predict(texts)] == ["体育", "财经"]
    assert type(backend.clf.model).__name__ == "YourClassifier"
