"""Tiny runs (trained once per module, seconds) and a real server on 127.0.0.1 in a thread."""
import contextlib
import random
import socket
import threading
import time

import httpx
import pytest
from toy_data import headlines, train_toy_translator, write_tsv

from scratchformer.cli import main

SMALL = ["--set", "model.encoder.d_model=32", "--set", "model.encoder.n_heads=4", "--set", "model.encoder.d_ff=64",
         "--set", "model.encoder.n_layers=2", "--set", "train.progress=false"]


@pytest.fixture(scope="session")
def clf_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve-clf")
    write_tsv(d / "train.tsv", headlines(240, 0))
    write_tsv(d / "test.tsv", headlines(40, 1))
    out = d / "run"
    assert main(["train", "classify", "--data", str(d / "train.tsv"), "--test", str(d / "test.tsv"), "--out", str(out),
                 "--set", "ensemble=1", "--set", "model.encoder.dropout=0.0", "--set", "train.epochs=5",
                 "--set", "train.lr=3e-3", "--set", "data.batch_size=16", "--set", "model.bigram_buckets=64",
                 "--set", "data.max_len=24", "--no-baseline"] + SMALL) == 0
    return out


@pytest.fixture(scope="session")
def lm_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve-lm")
    rng = random.Random(0)
    (d / "text.txt").write_text("\n".join("".join(rng.choice("天地人和春夏秋冬") for _ in range(30)) for _ in range(60)),
                                encoding="utf-8")
    out = d / "run"
    assert main(["train", "lm", "--data", str(d / "text.txt"), "--out", str(out), "--set", "data.context=16",
                 "--set", "data.batch_size=8", "--set", "data.eval_windows=10", "--set", "train.max_steps=10",
                 "--set", "train.eval_every=10", "--set", "train.warmup_steps=2", "--set", "model.encoder.n_heads=2"]
                + SMALL[:2] + SMALL[4:]) == 0
    return out


@pytest.fixture(scope="session")
def mt_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve-mt")
    return train_toy_translator(d)


@contextlib.contextmanager
def running(app, cfg=None):
    """`app` served by uvicorn on a free 127.0.0.1 port in a thread; yields the base URL once
    /health says 200 (or after 30 s, for tests of loading). With `cfg` (a ServeConfig), under the
    server's own uvicorn settings (`uvicorn_config`: the header timeout, the drain timeout)."""
    import uvicorn

    from scratchformer.serve.server import DrainingServer, uvicorn_config

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    if cfg is None:
        config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5)
    else:
        config = uvicorn_config(app, cfg, "127.0.0.1", port, "warning")
    server = DrainingServer(config, app)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.05)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def wait_ready(url, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if httpx.get(url + "/ready", timeout=5).status_code == 200:
            return
        time.sleep(0.05)
    raise AssertionError("the server never became ready")
