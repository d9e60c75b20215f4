"""Issue 33, rules 4-5, over real HTTP on 127.0.0.1 (rules 1-3: test_serve_trust.py):

4. a served name is one model: loaded at start, swapped only on request, atomically;
5. connections end: header and body timeouts, SIGTERM, a client that leaves a stream.
"""
import asyncio
import contextlib
import gc
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from conftest import JSON, TEXTS, error_of, running, start, wait_ready
from safetensors.torch import load_file, save_file

from scratchformer.cli import main
from scratchformer.errors import UserError
from scratchformer.serve import app as app_module
from scratchformer.serve import site
from scratchformer.serve.app import create_app
from scratchformer.serve.state import ServeConfig, check_api_key
from scratchformer.serve.backends import ClassifierBackend, LanguageModelBackend, ModelSpec, load_backend



# ------------------------------------------------------------------ 4. a served name is one model

def _copy_run(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def _perturb(run: Path, scale: float) -> None:
    """Another training's weights in the same folder (same shapes, other numbers), written the
    way a training writes them: a new file put in place."""
    weights = load_file(run / "model.safetensors")
    weights = {k: v * scale if v.is_floating_point() else v for k, v in weights.items()}
    save_file(weights, run / "model.tmp")
    os.replace(run / "model.tmp", run / "model.safetensors")


def _probs(r):
    assert r.status_code == 200, r.text
    return [round(x, 5) for x in r.json()["data"][0]["probs"].values()]


def test_every_route_answers_from_the_weights_loaded_at_start(clf_run, tmp_path):
    run = _copy_run(clf_run, tmp_path / "run")
    served = load_backend(ModelSpec("c", str(run)))
    app, cfg = start([served])
    with running(app, cfg) as u:
        wait_ready(u)
        before = _probs(httpx.post(u + "/v1/classify", json={"input": TEXTS[0]}))
        digest = httpx.get(u + "/v1/models").json()["data"][0]["weights"]["digest"]
        shutil.rmtree(run)  # `train --overwrite` begins: the folder is gone, then holds another model
        r = httpx.post(u + "/v1/attention", json={"input": TEXTS[0]}, timeout=60)  # its first call
        assert r.status_code == 200 and "<html" in r.text.lower()
        assert _probs(httpx.post(u + "/v1/classify", json={"input": TEXTS[0]})) == before
        emb = httpx.post(u + "/v1/embeddings", json={"model": "c", "input": TEXTS[0], "encoding_format": "float"})
        assert emb.status_code == 200 and abs(sum(x * x for x in emb.json()["data"][0]["embedding"]) - 1) < 1e-4
        _copy_run(clf_run, run)
        _perturb(run, 0.5)
        assert httpx.post(u + "/v1/attention", json={"input": TEXTS[1]}, timeout=60).status_code == 200
        assert _probs(httpx.post(u + "/v1/classify", json={"input": TEXTS[0]})) == before
        assert httpx.get(u + "/v1/models").json()["data"][0]["weights"]["digest"] == digest


def test_models_say_step_time_and_digest_of_what_each_name_serves(clf_run, lm_run, url):
    ws = {m["id"]: m["weights"] for m in httpx.get(url + "/v1/models").json()["data"]}
    assert set(ws) == {"lm", "clf"} and ws["lm"] is None  # backends built in Python: no load record
    w = load_backend(ModelSpec("c", str(clf_run))).weights
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", w["digest"]) and re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:]{8}Z", w["time"])
    status = json.loads((clf_run / "train_status.json").read_text())
    assert w["step"] == status["step"] > 0
    assert load_backend(ModelSpec("l", str(lm_run))).weights["digest"] != w["digest"]


def test_a_load_during_which_the_folder_changed_is_done_again(clf_run, tmp_path, monkeypatch):
    from scratchformer.serve import backends

    run = _copy_run(clf_run, tmp_path / "run")
    real, calls = backends._open_backend, []

    def open_and_change(spec, backend, *load_args):
        calls.append(1)
        served = real(spec, backend, *load_args)
        if len(calls) == 1:
            _perturb(run, 0.9)  # written while the first load read the folder
        return served

    monkeypatch.setattr(backends, "_open_backend", open_and_change)
    served = load_backend(ModelSpec("c", str(run)))
    assert len(calls) == 2 and served.weights == __import__("scratchformer.serve.weights").serve.weights.identity(run)

    def always_change(spec, backend, *load_args):
        _perturb(run, 1.01)
        return real(spec, backend, *load_args)

    monkeypatch.setattr(backends, "_open_backend", always_change)
    with pytest.raises(UserError, match="changed while it was being loaded"):
        load_backend(ModelSpec("c", str(run)), attempts=2)


def test_reload_swaps_atomically_with_zero_failed_requests_under_load(clf_run, tmp_path):
    """Eight clients post without a pause while the folder gets other weights and is reloaded
    three times: every answer is a 200 and equals what one of the two weights computes."""
    from scratchformer.tasks.classify import Classifier

    run = _copy_run(clf_run, tmp_path / "run")
    other = _copy_run(clf_run, tmp_path / "other")
    _perturb(other, 0.5)
    want = {}
    for name, folder in (("a", run), ("b", other)):
        p = Classifier.load(folder).predict_proba([TEXTS[0]])[0]
        want[name] = [round(float(x), 5) for x in p]
    assert want["a"] != want["b"]
    app, cfg = start([load_backend(ModelSpec("c", str(run)))], api_key="k", max_wait_ms=2)
    key = {"Authorization": "Bearer k"}
    stop, answers, failures = threading.Event(), [], []

    def client():
        with httpx.Client(timeout=60, headers=key) as c:
            for _ in range(2000):  # bounded
                if stop.is_set():
                    return
                r = c.post(u + "/v1/classify", json={"input": TEXTS[0]})
                (answers if r.status_code == 200 else failures).append(r)

    with running(app, cfg) as u:
        wait_ready(u)
        assert httpx.post(u + "/v1/reload").status_code == 401  # authenticated
        threads = [threading.Thread(target=client) for _ in range(8)]
        for t in threads:
            t.start()
        digests = [httpx.get(u + "/v1/models", headers=key).json()["data"][0]["weights"]["digest"]]
        for source in (other, clf_run, other):
            time.sleep(0.3)
            shutil.copyfile(source / "model.safetensors", run / "model.tmp")
            os.replace(run / "model.tmp", run / "model.safetensors")
            r = httpx.post(u + "/v1/reload", headers=key, timeout=120)
            assert r.status_code == 200 and r.json()["data"][0]["reloaded"] is True, r.text
            digests.append(r.json()["data"][0]["weights"]["digest"])
            assert httpx.get(u + "/v1/models", headers=key).json()["data"][0]["weights"]["digest"] == digests[-1]
        time.sleep(0.3)
        same = httpx.post(u + "/v1/reload", params={"model": "c"}, headers=key, timeout=120).json()["data"][0]
        assert same["reloaded"] is False  # the folder holds what is served
        stop.set()
        for t in threads:
            t.join(60)
        final = _probs(httpx.post(u + "/v1/classify", json={"input": TEXTS[0]}, headers=key))
        retired = app.state.serve.retired
    assert failures == [] and len(answers) > 50
    assert digests[0] == digests[2] != digests[1] == digests[3]
    kinds = {("a" if _probs(r) == want["a"] else "b" if _probs(r) == want["b"] else "?") for r in answers}
    assert kinds == {"a", "b"} and final == want["b"]
    assert retired == []  # the replaced models' batchers stopped once their queues drained


def test_reload_keeps_the_served_model_when_the_folder_is_unfinished(clf_run, tmp_path):
    run = _copy_run(clf_run, tmp_path / "run")
    app, cfg = start([load_backend(ModelSpec("c", str(run)))])
    with running(app, cfg) as u:
        wait_ready(u)
        before = _probs(httpx.post(u + "/v1/classify", json={"input": TEXTS[1]}))
        _perturb(run, 0.5)
        (run / "train_status.json").write_text('{"finished": false, "step": 3}')  # a training under way
        r = httpx.post(u + "/v1/reload", timeout=60)
        assert r.status_code == 409 and "unfinished" in error_of(r) and "kept serving" in error_of(r)
        (run / "config.json").write_text("{not json")  # a damaged folder: the same
        assert httpx.post(u + "/v1/reload", params={"model": "c"}, timeout=60).status_code == 409
        assert httpx.post(u + "/v1/reload", params={"model": "nope"}).status_code == 404
        assert _probs(httpx.post(u + "/v1/classify", json={"input": TEXTS[1]})) == before


def test_reload_on_change_takes_a_newer_finished_model(clf_run, tmp_path):
    from scratchformer.tasks.classify import Classifier

    run = _copy_run(clf_run, tmp_path / "run")
    app, cfg = start([load_backend(ModelSpec("c", str(run)))], reload_on_change=True, reload_interval=0.1)
    with running(app, cfg) as u:
        wait_ready(u)
        first = httpx.get(u + "/v1/models").json()["data"][0]["weights"]["digest"]
        _perturb(run, 0.5)
        want = [round(float(x), 5) for x in Classifier.load(run).predict_proba([TEXTS[2]])[0]]
        for _ in range(300):  # bounded: 30 s
            now = httpx.get(u + "/v1/models").json()["data"][0]["weights"]["digest"]
            if now != first:
                break
            time.sleep(0.1)
        assert now != first
        assert _probs(httpx.post(u + "/v1/classify", json={"input": TEXTS[2]})) == want


# ------------------------------------------------------------------ 5. connections end

def _raw(port: int, data: bytes, wait: float) -> tuple[bytes, float]:
    """Send `data`, then read until the server closes (at most `wait` s): (reply, seconds)."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as s:
        if data:
            s.sendall(data)
        got = b""
        with contextlib.suppress(socket.timeout, ConnectionResetError):
            while chunk := s.recv(65536):
                got += chunk
    return got, time.monotonic() - t0


def test_slow_headers_and_bodies_time_out(clf):
    app, cfg = start([clf], header_timeout=0.5, body_timeout=0.5)
    with running(app, cfg) as u:
        wait_ready(u)
        port = int(u.rsplit(":", 1)[1])
        half_headers = b"POST /v1/classify HTTP/1.1\r\nHost: x\r\nContent-Type: appl"
        for data in (b"", b"GE", half_headers):  # nothing, half a request line, half the headers
            got, took = _raw(port, data, 10)
            assert took < 3, (data, took)
            if data:
                assert got.startswith(b"HTTP/1.1 408") and b"--header-timeout" in got
        whole = b'{"input": "\xe7\x90\x83"}'
        head = b"POST /v1/classify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        got, took = _raw(port, head % (len(whole) + 50) + whole, 10)  # 50 bytes never come
        assert took < 3 and got.startswith(b"HTTP/1.1 408") and b"--body-timeout" in got
        keep = head % len(whole) + whole + b"POST /v1/classify HTTP/1.1\r\nHost: x\r\n"  # a second request, cut
        got, took = _raw(port, keep, 10)
        assert took < 3 and got.startswith(b"HTTP/1.1 200") and b"HTTP/1.1 408" in got
        assert httpx.post(u + "/v1/classify", json={"input": "球赛"}).status_code == 200  # still serving


def _cli_serve(run, port, *flags):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "scratchformer.cli", "serve", f"c={run}", "--port", str(port),
                             *flags], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    u = f"http://127.0.0.1:{port}"
    for _ in range(900):  # bounded: 90 s
        try:
            if httpx.get(u + "/ready", timeout=2).status_code == 200:
                return proc, u
        except httpx.TransportError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(proc.stdout.read())


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sigterm_exits_fast_idle_and_with_a_half_sent_body_without_a_traceback(clf_run):
    for half_body in (False, True):
        port = _free_port()
        proc, u = _cli_serve(clf_run, port, "--drain-timeout", "20", "--body-timeout", "60")
        try:
            assert httpx.post(u + "/v1/classify", json={"input": "球赛"}).status_code == 200
            idle = httpx.Client()  # an idle keep-alive connection stays open
            assert idle.get(u + "/health").status_code == 200
            s = None
            if half_body:
                s = socket.create_connection(("127.0.0.1", port), timeout=20)
                s.sendall(b"POST /v1/classify HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: 100\r\n\r\n{\"input\": ")
                time.sleep(0.3)
            t0 = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0
            took = time.monotonic() - t0
            assert took < (2 if not half_body else 5), took  # the drain timeout is 20 s: not waited for
            if s is not None:
                reply = s.recv(65536)  # the half-sent body was answered at once, not held
                assert reply.startswith(b"HTTP/1.1 503") and b"shutting down" in reply, reply
                s.close()
            idle.close()
        finally:
            if proc.poll() is None:
                proc.kill()
            out = proc.stdout.read()
        assert "Traceback" not in out and "Error" not in out.replace("error_", ""), out


class Counts(LanguageModelBackend):
    """The language model, counting the tokens it generated."""

    def __init__(self, inner):
        self.__dict__.update(inner.__dict__)
        self.pieces = 0

    def generate(self, prompt, max_tokens, temperature, top_k, top_p, seed, on_piece):
        def count(piece):
            self.pieces += 1
            on_piece(piece)
        return super().generate(prompt, max_tokens, temperature, top_k, top_p, seed, count)


def test_a_client_that_leaves_a_stream_stops_its_generation_quietly(lm, caplog):
    counting = Counts(lm)
    app, cfg = start([counting], max_new_tokens=5000)
    caplog.set_level(logging.DEBUG)
    with running(app, cfg) as u:
        wait_ready(u)
        for _ in range(2):
            with httpx.stream("POST", u + "/v1/completions", timeout=30, json={
                    "model": "lm", "prompt": "天", "max_tokens": 5000, "stream": True}) as r:
                for i, _line in enumerate(r.iter_lines()):
                    if i >= 6:
                        break  # the client leaves
            for _ in range(100):  # bounded: 10 s
                gauge = app.state.serve.metrics.streams.labels("lm")._value.get()
                if gauge == 0:
                    break
                time.sleep(0.1)
            assert gauge == 0
        assert counting.pieces < 2 * 2000  # stopped long before its 5000 tokens
        assert httpx.get(u + "/health").status_code == 200
        gc.collect()
    noisy = [r for r in caplog.records if r.exc_info or "never retrieved" in r.getMessage()
             or r.levelno >= logging.ERROR]
    assert noisy == [], [r.getMessage() for r in noisy]
