"""`scratchformer serve` over real HTTP on 127.0.0.1: each of the issue's eight points
(endpoints, health/ready, metrics, dynamic batching, admission, input limits and errors,
graceful shutdown, API keys), with httpx as curl would call it and the official `openai`
client for embeddings and streamed completions."""
import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import numpy as np
import pytest
from conftest import running, wait_ready
from prometheus_client.parser import text_string_to_metric_families

from scratchformer.errors import UserError
from scratchformer.serve.app import create_app
from scratchformer.serve.state import ServeConfig
from scratchformer.serve.backends import ClassifierBackend, LanguageModelBackend, TranslatorBackend

TEXTS = ["股市涨跌银行", "球赛队胜负", "今日消息", "银行利率基金涨", "冠军进攻球赛胜", "新的一天"]


@pytest.fixture(scope="module")
def backends(clf_run, lm_run, mt_run):
    return {"clf": ClassifierBackend("clf", clf_run), "lm": LanguageModelBackend("lm", lm_run),
            "mt": TranslatorBackend("mt", mt_run)}


def app_of(backends, **cfg):
    models = list(backends.values())
    return create_app(lambda: models, ServeConfig(**cfg))


@pytest.fixture(scope="module")
def url(backends):
    with running(app_of(backends, max_wait_ms=20, max_items=8, max_input_tokens=40, max_body_bytes=4000)) as u:
        wait_ready(u)
        yield u


def post(url, path, body, **kw):
    return httpx.post(url + path, json=body, timeout=30, **kw)


def error_of(r):
    body = r.json()
    assert set(body) == {"error"} and body["error"]["code"] == r.status_code
    assert "Traceback" not in r.text and 'File "' not in r.text
    return body["error"]["message"]


# ------------------------------------------------------------------ 1. endpoints

def test_classify_gives_the_run_s_labels_and_probabilities(url, backends):
    r = post(url, "/v1/classify", {"model": "clf", "input": TEXTS[:3]})
    assert r.status_code == 200
    want = backends["clf"].clf.predict(TEXTS[:3])
    got = r.json()["data"]
    assert [d["label"] for d in got] == [w["label"] for w in want]
    for d, w in zip(got, want):
        assert d["probs"].keys() == w["probs"].keys()
        assert max(abs(d["probs"][k] - w["probs"][k]) for k in w["probs"]) < 1e-6
    one = post(url, "/v1/classify", {"input": TEXTS[0]}).json()  # "model" optional: one model classifies
    assert one["model"] == "clf" and one["data"][0]["label"] == want[0]["label"]


def test_translate_equals_the_translator(url, backends):
    src = ["ab cd", "ef gh ij", "kl ab"]
    r = post(url, "/v1/translate", {"input": src, "beam": 2, "max_length": 12})
    assert r.status_code == 200, r.text
    assert [d["translation"] for d in r.json()["data"]] == backends["mt"].tr.translate(src, beam=2, max_output_len=12)
    assert r.json()["beam"] == 2


def test_models_docs_and_openapi(url):
    models = httpx.get(url + "/v1/models").json()
    assert {m["id"]: m["task"] for m in models["data"]} == {"clf": "classify", "lm": "lm", "mt": "translate"}
    assert httpx.get(url + "/docs").status_code == 200
    paths = httpx.get(url + "/openapi.json").json()["paths"]
    assert {"/v1/classify", "/v1/translate", "/v1/embeddings", "/v1/completions", "/health", "/ready",
            "/metrics"} <= set(paths)


def test_openai_client_embeddings_unchanged(url, backends):
    from openai import OpenAI

    client = OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    res = client.embeddings.create(model="clf", input=TEXTS[:2])  # the client asks for base64 by default
    want = backends["clf"].clf.embed(TEXTS[:2])
    got = np.array([d.embedding for d in res.data])
    assert got.shape == want.shape and np.abs(got - want).max() < 1e-6
    assert res.usage.prompt_tokens == sum(backends["clf"].count_tokens(TEXTS[:2]))
    res = client.embeddings.create(model="clf", input=TEXTS[0], encoding_format="float")
    assert np.abs(np.array(res.data[0].embedding) - want[0]).max() < 1e-6


def test_openai_client_streamed_completion_equals_generate(url, backends):
    from openai import OpenAI

    client = OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
    want = backends["lm"].lm.generate("天地", max_new_tokens=12, temperature=0.0)
    pieces, finish = [], None
    for chunk in client.completions.create(model="lm", prompt="天地", max_tokens=12, temperature=0.0, stream=True):
        pieces.append(chunk.choices[0].text)
        finish = chunk.choices[0].finish_reason or finish
    assert "".join(pieces) == want and len(pieces) >= 12 and finish == "length"
    whole = client.completions.create(model="lm", prompt="天地", max_tokens=12, temperature=0.8, seed=3,
                                      extra_body={"top_k": 5})
    assert whole.choices[0].text == backends["lm"].lm.generate("天地", max_new_tokens=12, temperature=0.8,
                                                               top_k=5, seed=3)
    # the raw stream: server-sent events ending in data: [DONE]
    with httpx.stream("POST", url + "/v1/completions", json={"model": "lm", "prompt": "春", "max_tokens": 3,
                                                             "stream": True}, timeout=30) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [x for x in r.iter_lines() if x]
    assert all(x.startswith("data: ") for x in lines) and lines[-1] == "data: [DONE]"


def test_concurrent_streams_interleave(url):
    """Two long generations at once: the second starts streaming before the first ends."""
    events = []

    def stream(tag):
        with httpx.stream("POST", url + "/v1/completions", json={"model": "lm", "prompt": "天", "max_tokens": 150,
                                                                 "stream": True, "temperature": 0}, timeout=60) as r:
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    events.append(tag)

    threads = [threading.Thread(target=stream, args=(t,)) for t in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    first_b, last_a = events.index("b"), len(events) - 1 - events[::-1].index("a")
    assert events.count("a") == events.count("b") >= 150 and first_b < last_a


# ------------------------------------------------------------------ 2. health and readiness

def test_ready_is_503_until_every_model_is_loaded(backends):
    gate = threading.Event()

    def slow_loader():
        gate.wait(30)
        return [backends["clf"]]

    with running(create_app(slow_loader, ServeConfig())) as u:
        assert httpx.get(u + "/health").status_code == 200
        assert httpx.get(u + "/ready").json() == {"status": "loading"}
        assert httpx.get(u + "/ready").status_code == 503
        r = post(u, "/v1/classify", {"input": "x"})
        assert r.status_code == 503 and "still loading" in error_of(r) and r.headers["Retry-After"] == "1"
        gate.set()
        wait_ready(u)
        assert httpx.get(u + "/ready").json() == {"status": "ready", "models": ["clf"]}


# ------------------------------------------------------------------ 3. metrics

def _samples(url):
    out = {}
    for fam in text_string_to_metric_families(httpx.get(url + "/metrics").text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_count_requests_latency_batches_and_tokens(backends):
    with running(app_of(backends)) as u:
        wait_ready(u)
        for t in TEXTS[:3]:
            assert post(u, "/v1/classify", {"input": t}).status_code == 200
        assert post(u, "/v1/classify", {"input": 5}).status_code == 422
        m = _samples(u)
    route = ("route", "/v1/classify")
    assert m[("scratchformer_requests_total", (route, ("status", "200")))] == 3
    assert m[("scratchformer_requests_total", (route, ("status", "422")))] == 1
    assert m[("scratchformer_request_seconds_count", (route,))] == 4
    assert m[("scratchformer_batch_requests_count", (("model", "clf"), route))] == 3
    assert m[("scratchformer_tokens_total", (("kind", "input"), ("model", "clf")))] == sum(
        backends["clf"].count_tokens(TEXTS[:3]))
    assert ("scratchformer_queue_depth", (("model", "clf"), route)) in m
    assert m[("scratchformer_tokens_per_second", (("model", "clf"), route))] > 0


# ------------------------------------------------------------------ 4. dynamic batching

class Faulty(ClassifierBackend):
    """The classifier, failing on any batch that holds the text "BOOM" (a fault inside the model)."""

    def __init__(self, inner):
        self.__dict__.update(inner.__dict__)

    def classify(self, texts, key):
        if "BOOM" in texts:
            raise UserError("the model cannot read BOOM")
        return super().classify(texts, key)


async def _burst(u, bodies):
    async with httpx.AsyncClient(timeout=60) as c:
        return await asyncio.gather(*(c.post(u + "/v1/classify", json=b) for b in bodies))


def test_batched_results_equal_one_at_a_time_and_a_failure_stays_alone(backends):
    faulty = Faulty(backends["clf"])
    alone = [backends["clf"].clf.predict([t])[0] for t in TEXTS]
    app = create_app(lambda: [faulty], ServeConfig(max_wait_ms=300, max_batch_tokens=10_000))
    with running(app) as u:
        wait_ready(u)
        bodies = [{"input": t} for t in TEXTS] + [{"input": "BOOM"}] + [{"input": t} for t in TEXTS]
        rs = asyncio.run(_burst(u, bodies))
        batches = list(app.state.serve.batchers.values())[0].batches
    assert max(batches) > 1  # they did share batches
    assert [r.status_code for r in rs] == [200] * 6 + [422] + [200] * 6
    assert error_of(rs[6]) == "the model cannot read BOOM"
    for r, want in zip(rs[:6] + rs[7:], alone + alone):
        got = r.json()["data"][0]
        assert got["label"] == want["label"]
        assert max(abs(got["probs"][k] - want["probs"][k]) for k in want["probs"]) < 1e-6


def test_small_load_run_has_no_errors_and_batches(backends):
    """The load test at small size: 32 concurrent clients, a bounded number of requests each."""
    from benchmarks.serve import run_load_httpx as run_load

    app = app_of(backends, max_wait_ms=10)
    with running(app) as u:
        wait_ready(u)
        res = run_load(u, "/v1/classify", lambda i: {"model": "clf", "input": TEXTS[i % len(TEXTS)]},
                       clients=32, requests_per_client=3)
        batches = app.state.serve.batchers[("clf", "/v1/classify")].batches
    assert res["errors"] == 0 and res["requests"] == 96
    assert max(batches) > 1


def test_wrk_load_counts_requests_errors_and_server_cpu(backends):
    """The benchmark's wrk path (skips without wrk): a body in four is empty (422), so a quarter
    of the answered requests are errors, give or take the requests in flight at the end."""
    import shutil

    from benchmarks.serve import run_load

    if not shutil.which("wrk"):
        pytest.skip("wrk is not installed (apt-get install wrk)")
    app = app_of(backends, max_wait_ms=2)
    body = lambda i: {"model": "clf", "input": TEXTS[i % len(TEXTS)] if i % 4 else " "}  # noqa: E731
    with running(app) as u:
        wait_ready(u)
        res = run_load(u, "/v1/classify", body, clients=4, requests_per_client=0, max_seconds=2, pid=os.getpid())
    n = res["requests"]
    assert res["client"] == "wrk" and n > 8 and res["p50_ms"] <= res["p99_ms"]
    assert abs(res["errors"] - n // 4) <= 4 + 1, res
    assert res["server_cpu_ms_per_request"] > 0


# ------------------------------------------------------------------ 5. admission control

class Slow(ClassifierBackend):
    def __init__(self, inner):
        self.__dict__.update(inner.__dict__)

    def classify(self, texts, key):
        time.sleep(0.3)
        return super().classify(texts, key)


def test_full_queue_answers_429_with_retry_after_at_once(backends):
    app = create_app(lambda: [Slow(backends["clf"])], ServeConfig(max_queue=2, batching=False))
    with running(app) as u:
        wait_ready(u)
        done = []

        async def one(c, i):
            r = await c.post(u + "/v1/classify", json={"input": TEXTS[i % 6]})
            done.append(r.status_code)
            return r

        async def burst():
            async with httpx.AsyncClient(timeout=60) as c:
                return await asyncio.gather(*(one(c, i) for i in range(10)))

        rs = asyncio.run(burst())
        assert httpx.get(u + "/health").status_code == 200  # alive after the burst
    codes = [r.status_code for r in rs]
    assert set(codes) == {200, 429} and codes.count(200) >= 2  # the queue holds 2
    refused = [r for r in rs if r.status_code == 429]
    assert all(int(r.headers["Retry-After"]) >= 1 for r in refused)
    assert "at capacity" in error_of(refused[0])
    assert done.index(200) > done.index(429)  # the refusals came back before the first slow answer


# ------------------------------------------------------------------ 6. limits and errors

def test_body_over_the_limit_is_413(url):
    r = post(url, "/v1/classify", {"input": "股" * 5000})
    assert r.status_code == 413 and "4000 bytes" in error_of(r)

    def chunks():  # no Content-Length: counted while it streams in
        yield b'{"input": "'
        for _ in range(50):
            yield "股".encode() * 100
        yield b'"}'

    r = httpx.post(url + "/v1/classify", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and "--max-body-bytes" in error_of(r)


def test_items_and_tokens_over_the_limit_are_422_with_the_limit(url, backends):
    r = post(url, "/v1/classify", {"input": ["球赛"] * 9})
    assert r.status_code == 422 and error_of(r) == ("input has 9 items; the limit is 8 per request "
                                                    "(the server's --max-items): split the request")
    long = "球赛队胜负冠军进攻" * 6  # 54 tokens, limit 40
    r = post(url, "/v1/classify", {"input": ["球赛", long]})
    assert r.status_code == 422 and error_of(r).startswith("input 1 has 54 tokens; the limit is 40 tokens per input")
    r = post(url, "/v1/classify", {"input": long, "truncate": True})
    assert r.status_code == 200
    want = backends["clf"].clf.predict([long[:40]])[0]
    assert r.json()["data"][0]["label"] == want["label"]
    assert abs(r.json()["data"][0]["score"] - want["score"]) < 1e-6


@pytest.mark.parametrize("body,status,message", [
    (b"{not json", 400, "the request body is not valid JSON"),
    (b"[1, 2]", 400, "the request body must be a JSON object"),
    (b'{"input": 3}', 422, "input: must be a string or a list of strings"),
    (b'{"input": ["a", 3]}', 422, "input.1: must be a string"),
    (b'{"inptu": "a"}', 422, "input: field required; inptu: unknown field"),
    (b'{"input": "a", "model": "nope"}', 404, "model 'nope' is not served here; served: clf (classify), lm (lm), mt (translate)"),
    (b'{"input": "a", "model": "lm"}', 400, "model 'lm' is a language model (lm run): it answers /v1/completions, not /v1/classify"),
    (b'{"input": "   "}', 422, "input 0 is empty (or only spaces): there is nothing to read"),
    (b'{"input": []}', 422, "input is empty: give a text or a list of texts"),
])
def test_bad_input_is_a_4xx_json_error_saying_what_is_wrong(url, body, status, message):
    r = httpx.post(url + "/v1/classify", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status and error_of(r).startswith(message)


def test_no_500_for_bad_input_anywhere(url):
    """A bounded sweep of wrong bodies over every inference route: always a 4xx JSON error."""
    bads = [b"", b"null", b"1", b'"x"', b"{}", b'{"input": null}', b'{"input": {"a": 1}}', b'{"prompt": 1}',
            b'{"model": "lm", "prompt": "", "max_tokens": 3}', b'{"model": "lm", "prompt": "a", "max_tokens": -1}',
            b'{"model": "lm", "prompt": "a", "temperature": -1}', b'{"model": "lm", "prompt": "a", "top_p": 7}',
            b'{"model": "lm", "prompt": "a", "max_tokens": 100000}', b'{"model": "lm", "prompt": ["a", "b"]}',
            b'{"model": "mt", "input": "ab", "beam": 0}', b'{"model": "clf", "input": "a", "dimensions": 3}',
            b'{"model": "clf", "input": [[1, 2]]}', b'{"model": "mt", "input": "ab", "max_length": "x"}',
            "{\"input\": \"\udcff\"}".encode("utf-8", "surrogatepass")]
    for path in ("/v1/classify", "/v1/translate", "/v1/embeddings", "/v1/completions", "/v1/attention"):
        for body in bads:
            r = httpx.post(url + path, content=body, headers={"content-type": "application/json"}, timeout=30)
            assert 400 <= r.status_code < 500, (path, body, r.status_code, r.text)
            error_of(r)
    assert httpx.get(url + "/v1/nothing").status_code == 404
    assert httpx.get(url + "/v1/classify").status_code == 405


# ------------------------------------------------------------------ 7 + 8. shutdown and API keys (the CLI)

def test_api_key_guards_inference_routes_but_not_health(backends):
    with running(create_app(lambda: [backends["clf"]], ServeConfig(api_key="s3cret"))) as u:
        wait_ready(u)
        assert httpx.get(u + "/health").status_code == 200 and httpx.get(u + "/ready").status_code == 200
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            r = post(u, "/v1/classify", {"input": "球赛"}, headers=headers)
            assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer"
            assert error_of(r).startswith("missing or wrong API key")
        for path, body in (("/v1/embeddings", {"model": "clf", "input": "a"}), ("/v1/attention", {"input": "a"})):
            assert post(u, path, body).status_code == 401
        assert post(u, "/v1/classify", {"input": "球赛"}, headers={"Authorization": "Bearer s3cret"}).status_code == 200


def test_cli_serve_drains_in_flight_requests_on_sigterm(lm_run, tmp_path):
    """`scratchformer serve` as a user starts it (127.0.0.1, the key from the environment): a
    stream in flight when SIGTERM arrives finishes whole, then the process exits 0."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "SCRATCHFORMER_API_KEY": "k", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "scratchformer.cli", "serve", f"lm={lm_run}", "--port", str(port),
                             "--max-new-tokens", "2000", "--drain-timeout", "60"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    u = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 90
        while time.time() < deadline:
            try:
                if httpx.get(u + "/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        auth = {"Authorization": "Bearer k"}
        assert post(u, "/v1/completions", {"model": "lm", "prompt": "天"}).status_code == 401
        lines = []
        with httpx.stream("POST", u + "/v1/completions", headers=auth, timeout=60,
                          json={"model": "lm", "prompt": "天", "max_tokens": 2000, "stream": True}) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if line and not lines:
                    proc.send_signal(signal.SIGTERM)  # mid-stream
                if line:
                    lines.append(line)
        data = [json.loads(x[6:]) for x in lines if x.startswith("data: {")]
        assert lines[-1] == "data: [DONE]" and data[-1]["usage"]["completion_tokens"] == 2000
        assert proc.wait(60) == 0
        with pytest.raises(httpx.TransportError):  # no longer listening
            httpx.get(u + "/health", timeout=2)
    finally:
        if proc.poll() is None:
            proc.kill()
        out = proc.stdout.read()
    assert f"on http://127.0.0.1:{port}" in out and "Traceback" not in out


def test_draining_fails_readiness_and_refuses_new_work(backends):
    app = app_of(backends)
    with running(app) as u:
        wait_ready(u)
        app.state.serve.draining = True
        assert httpx.get(u + "/ready").json() == {"status": "draining"}
        r = post(u, "/v1/classify", {"model": "clf", "input": "a"})
        assert r.status_code == 503 and error_of(r) == "the server is shutting down"
        assert httpx.get(u + "/health").status_code == 200
