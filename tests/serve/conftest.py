"""Tiny runs (trained once per module, seconds) and a real server on 127.0.0.1 in a thread."""
import contextlib
import socket
import threading
import time

import httpx
import pytest
# headlines and write_tsv: test_export_encoders imports them from here
from toy_data import headlines, train_toy_classifier, train_toy_lm, train_toy_translator, write_tsv  # noqa: F401


@pytest.fixture(scope="module", autouse=True)
def eager_static_step():
    """A served translator decodes through the static step, compiled before /ready: here it runs
    eagerly (the same step and search, seconds instead of a compile a bucket); the one test that
    compiles (test_serve_static.py) turns the compiler on for itself. Per module, so that the
    setting is back before any test outside tests/serve runs (tests/tasks compiles)."""
    from scratchformer.nn import static

    previous = static.use_compiler(False)
    yield
    static.use_compiler(previous)


@pytest.fixture(scope="session")
def clf_run(tmp_path_factory):
    return train_toy_classifier(tmp_path_factory.mktemp("serve-clf"))


@pytest.fixture(scope="session")
def lm_run(tmp_path_factory):
    return train_toy_lm(tmp_path_factory.mktemp("serve-lm"))


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


# the trust tests' shared pieces (test_serve_trust.py, test_serve_models_and_connections.py)
from scratchformer.serve.app import create_app
from scratchformer.serve.state import ServeConfig
from scratchformer.serve.backends import ClassifierBackend, LanguageModelBackend

TEXTS = ["股市涨跌银行", "球赛队胜负", "今日消息", "银行利率基金涨"]
JSON = {"content-type": "application/json"}


def start(backends, **cfg):
    models = list(backends)
    cfg = ServeConfig(**{"drain_timeout": 5, **cfg})
    return create_app(lambda: models, cfg), cfg


def error_of(r):
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == r.status_code, r.text
    assert "Traceback" not in r.text
    return body["error"]["message"]


@pytest.fixture(scope="module")
def lm(lm_run):
    return LanguageModelBackend("lm", lm_run)


@pytest.fixture(scope="module")
def clf(clf_run):
    return ClassifierBackend("clf", clf_run)


@pytest.fixture(scope="module")
def url(lm, clf):
    app, cfg = start([lm, clf], max_new_tokens=64)
    with running(app, cfg) as u:
        wait_ready(u)
        yield u
