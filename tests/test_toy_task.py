"""A new task is its own package: the toy task of tests/toytask/ (a face, its task code and serve's
backend for it), which no file of scratchformer names, is registered here and goes through every
tool: `train toy`, `evaluate`, `params`, `sweep --task toy`, `export` and `serve` (HTTP, its run
folder and its export)."""
import json
import socket
import threading
import time

import httpx
import pytest

from scratchformer.cli import main
from scratchformer.errors import UserError
from scratchformer.serve import backends
from scratchformer.serve.backends import ModelSpec, load_backend
from scratchformer.tasks import faces
from toytask.face import FACE
from toytask.serve import ToyBackend
from toytask.task import BUCKETS, ROWS, write_rows


@pytest.fixture(scope="module")
def toy():
    faces.register(FACE)
    backends.register_backend(ToyBackend)
    yield FACE
    faces.unregister("toy")
    backends.BACKENDS.pop("toy", None)


@pytest.fixture(scope="module")
def run(toy, tmp_path_factory):
    d = tmp_path_factory.mktemp("toy")
    rows = write_rows(d / "rows.tsv")
    assert main(["train", "toy", "--data", str(rows), "--out", str(d / "run")]) == 0
    return d / "run"


def test_train_and_evaluate(run, capsys):
    assert json.loads((run / "config.json").read_text())["task"] == "toy"
    assert main(["evaluate", str(run)]) == 0
    assert json.loads(capsys.readouterr().out) == {"accuracy": 1.0}


def test_params_counts_and_closes(run, capsys):
    assert main(["params", str(run)]) == 0
    head = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("head"))
    n = BUCKETS * 2 + 2  # one linear layer onto two labels
    assert head.split()[1:3] == [f"{n:,}", f"{n:,}"]


def test_sweep(run, tmp_path, capsys):
    rows = write_rows(tmp_path / "rows.tsv")
    argv = ["sweep", "--task", "toy", "--grid", "train.lr=0.1,0.2", "--data", str(rows), "--out", str(tmp_path / "s")]
    assert main(argv) == 2  # its cells' own processes would not know a task registered here
    assert capsys.readouterr().err == ("error: --task toy was registered in this process only: run its cells here "
                                       "with --in-process\n")
    assert main(["sweep", "--task", "toy", "--grid", "train.lr=0.1,0.2", "--data", str(rows),
                 "--out", str(tmp_path / "sweep"), "--in-process"]) == 0
    for lr in ("0.1", "0.2"):
        cell = next((tmp_path / "sweep" / "cells").glob(f"*{lr}*"))
        assert json.loads((cell / "seed0" / "test_metrics.json").read_text()) == {"accuracy": 1.0}


def test_export_and_serve_the_run_and_the_export(run, tmp_path, capsys):
    assert main(["export", str(run), "--format", "json", "--out", str(tmp_path / "ex")]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"wrote {tmp_path / 'ex'}/ (weights.json, export.json)"
    served = load_backend(ModelSpec("ex", str(tmp_path / "ex")))
    assert isinstance(served, ToyBackend) and served.describe()["backend"] == "numpy"
    with pytest.raises(UserError, match=r"runs under --backend numpy, not onnxruntime: leave --backend out"):
        load_backend(ModelSpec("ex", str(tmp_path / "ex")), "onnxruntime")

    from scratchformer.serve.server import make_server
    from scratchformer.serve.state import ServeConfig

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = make_server([ModelSpec("run", str(run)), ModelSpec("ex", str(tmp_path / "ex"))],
                         ServeConfig(drain_timeout=2), port=port, log_level="warning")
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if httpx.get(url + "/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        texts = [t for t, _ in ROWS]
        for name in ("run", "ex"):
            r = httpx.post(url + "/v1/classify", json={"model": name, "input": texts}, timeout=30)
            assert r.status_code == 200, r.text
            assert [d["label"] for d in r.json()["data"]] == [lab for _, lab in ROWS]
        models = {m["id"]: m["task"] for m in httpx.get(url + "/v1/models", timeout=5).json()["data"]}
        assert models == {"run": "toy", "ex": "toy"}
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
