"""Issue 33, rules 1-3, over real HTTP on 127.0.0.1 (uvicorn in a thread, or `scratchformer
serve` as a user starts it), each rule planting its fault in more than one place:

1. every sampler value is range-checked in the float32 the sampler computes with (HTTP, CLI),
   and a generation that fails mid-stream sends an OpenAI-shaped error event;
2. secrets fail closed, every route but the open ones needs the key, inference needs JSON;
3. the page puts text in as text under a strict CSP, /docs is served from the package, /font
   is cached and bounded.

Rules 4-5 (one model per name, connections end): test_serve_models_and_connections.py.
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



# ------------------------------------------------------------------ 1. sampler values

# (raw JSON of the sampler fields, the field the message names); every one is finite JSON or a
# number Python's json reads, and each was a 500, a cut 200 stream or a traceback before
BAD_SAMPLING = [
    ('"temperature": 1e39', "temperature"),  # inf in float32
    ('"temperature": 1e-46', "temperature"),  # 0 in float32: logits / 0
    ('"temperature": 1e400', "temperature"),  # inf already in JSON
    ('"temperature": 1e-9', "temperature"),  # finite in float32, but ordinary logits / it overflow
    ('"top_p": 0', "top_p"), ('"top_p": 1.5', "top_p"), ('"top_p": NaN', "top_p"),
    ('"top_p": 1e-46', "top_p"),  # 0 in float32: every token cut
    ('"top_k": -3', "top_k"), ('"top_k": 0', "top_k"), ('"top_k": 1180591620717411303424', "top_k"),
    ('"seed": 18446744073709551616', "seed"), ('"seed": -1', "seed"),
    ('"max_tokens": 1000000000000000000000000000000', "max_tokens"), ('"max_tokens": -1', "max_tokens"),
]


@pytest.mark.parametrize("stream", [False, True])
def test_sampler_values_beyond_float32_or_64_bits_are_422_naming_the_field(url, stream):
    for fields, name in BAD_SAMPLING:
        body = f'{{"model": "lm", "prompt": "天", "max_tokens": 4, "stream": {json.dumps(stream)}, {fields}}}'
        body = body.replace('"max_tokens": 4, ', "") if "max_tokens" in fields else body
        r = httpx.post(url + "/v1/completions", content=body, headers=JSON, timeout=30)
        assert r.status_code == 422, (fields, r.status_code, r.text)
        assert name in error_of(r), (fields, r.text)


def test_sampler_values_at_the_edges_of_their_ranges_work(url, lm):
    def text(**kw):
        r = httpx.post(url + "/v1/completions", json={"model": "lm", "prompt": "天", **kw}, timeout=30)
        assert r.status_code == 200, (kw, r.text)
        return r.json()["choices"][0]["text"]

    assert text(max_tokens=0) == ""
    top = 2**63 - 1  # k beyond the vocabulary keeps every token: the same draw as no top_k
    assert text(max_tokens=8, seed=5, top_k=top) == text(max_tokens=8, seed=5) == lm.lm.generate(
        "天", max_new_tokens=8, seed=5)
    assert text(max_tokens=8, seed=2**64 - 1) == text(max_tokens=8, seed=2**64 - 1)
    assert text(max_tokens=6, temperature=1e-6) == lm.lm.generate("天", max_new_tokens=6, temperature=0)
    assert len(text(max_tokens=6, temperature=1e6, top_p=1e-40, seed=1)) == 6  # tiny nucleus: the top token


@pytest.mark.parametrize("flags,word", [
    (["--temperature", "1e39"], "temperature"), (["--temperature", "1e-46"], "temperature"),
    (["--top-p", "nan"], "top_p"), (["--top-p", "0"], "top_p"), (["--top-k", "-2"], "top_k"),
    (["--seed", str(2**64)], "seed"), (["--max-new-tokens", str(10**12)], "max_new_tokens"),
])
def test_generate_refuses_the_same_values_in_one_line(lm_run, capsys, flags, word):
    code = main(["generate", str(lm_run), "--prompt", "天"] + flags)
    out, err = capsys.readouterr()
    assert code == 2 and out == ""  # nothing echoed: the check comes first
    assert err.startswith("error: ") and word in err and err.count("\n") == 1 and "Traceback" not in err


class Breaks(LanguageModelBackend):
    """The language model, failing after three pieces of text (a fault inside the model)."""

    def __init__(self, inner, error):
        self.__dict__.update(inner.__dict__)
        self.error = error

    def generate(self, prompt, max_tokens, temperature, top_k, top_p, seed, on_piece):
        for piece in "天地人":
            on_piece(piece)
        raise self.error


@pytest.mark.parametrize("error,message", [
    (RuntimeError("CUDA went away"), "internal error during generation"),
    (UserError("the model cannot continue this prompt"), "the model cannot continue this prompt"),
])
def test_a_stream_that_fails_after_it_started_ends_with_an_openai_error_event(lm, error, message):
    from openai import APIError, OpenAI

    app, cfg = start([Breaks(lm, error)])
    with running(app, cfg) as u:
        wait_ready(u)
        with httpx.stream("POST", u + "/v1/completions", json={"model": "lm", "prompt": "天", "max_tokens": 9,
                                                               "stream": True}, timeout=30) as r:
            assert r.status_code == 200
            lines = [x for x in r.iter_lines() if x]
        assert [json.loads(x[6:])["choices"][0]["text"] for x in lines[:3]] == list("天地人")
        last = json.loads(lines[-1][6:])
        assert len(lines) == 4 and message in last["error"]["message"] and "data: [DONE]" not in lines
        client = OpenAI(base_url=u + "/v1", api_key="unused", max_retries=0)
        got = []
        with pytest.raises(APIError, match=re.escape(message)):
            for chunk in client.completions.create(model="lm", prompt="天", max_tokens=9, stream=True):
                got.append(chunk.choices[0].text)
        assert got == list("天地人")
        r = httpx.post(u + "/v1/completions", json={"model": "lm", "prompt": "天", "max_tokens": 9}, timeout=30)
        if isinstance(error, UserError):  # not streamed: the same, as a JSON error
            assert r.status_code == 422 and error_of(r) == message
        else:
            assert r.status_code == 500 and error_of(r) == "internal error (the server's log has the details)"


# ------------------------------------------------------------------ 2. secrets fail closed

@pytest.mark.parametrize("key", ["", " ", "\t\n", "\u3000"])
def test_an_empty_or_blank_key_refuses_to_start(clf_run, capsys, monkeypatch, key):
    with pytest.raises(UserError, match="empty"):
        ServeConfig(api_key=key).check()
    assert main(["serve", str(clf_run), "--port", "0", "--api-key", key]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --api-key is empty") and err.count("\n") == 1
    monkeypatch.setenv("SCRATCHFORMER_API_KEY", key)  # the variable set to nothing: refused as well
    assert main(["serve", str(clf_run), "--port", "0"]) == 2
    assert "SCRATCHFORMER_API_KEY is empty" in capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--header-timeout", "--body-timeout", "--reload-interval"])
def test_timeouts_and_the_reload_interval_must_be_positive(clf_run, capsys, flag):
    assert main(["serve", str(clf_run), "--port", "0", flag, "0"]) == 2
    assert capsys.readouterr().err == f"error: {flag} must be > 0 seconds, got 0.0\n"


def test_keys_are_stripped_on_both_sides_and_compared_as_utf8_bytes(clf):
    assert check_api_key("  s3cret\n") == "s3cret" and check_api_key(None) is None
    for server_key, good, bad in [
        (" s3cret \n", [b"Bearer s3cret", b"Bearer  s3cret", b"bearer s3cret"], [b"Bearer s3cre", b"s3cret"]),
        ("clé-密钥", ["Bearer clé-密钥".encode("utf-8")], ["Bearer clé-密钥".encode("latin-1", "replace"), b"Bearer cl"]),
    ]:
        app, cfg = start([clf], api_key=server_key)
        with running(app, cfg) as u:
            wait_ready(u)
            for header in good:
                r = httpx.post(u + "/v1/classify", json={"input": "球赛"}, headers={"Authorization": header})
                assert r.status_code == 200, (server_key, header)
            for header in bad:
                r = httpx.post(u + "/v1/classify", json={"input": "球赛"}, headers={"Authorization": header})
                assert r.status_code == 401 and error_of(r).startswith("missing or wrong API key")


def test_every_route_but_the_open_ones_needs_the_key(clf, lm):
    app, cfg = start([clf, lm], api_key="k")
    open_paths = app_module.OPEN_PATHS | site.OPEN_PATHS
    assert open_paths == {"/health", "/ready", "/metrics", "/", "/docs", "/openapi.json", "/favicon.ico",
                          "/favicon.svg", "/docs/assets/swagger-ui-bundle.js", "/docs/assets/swagger-ui.css"}
    with running(app, cfg) as u:
        wait_ready(u)
        seen = set()
        for route in app.routes:
            for method in sorted(getattr(route, "methods", None) or []):
                if method == "HEAD":
                    continue
                paths = [route.path.format(name=n) for n in site.DOCS_ASSETS] if "{" in route.path else [route.path]
                for path in paths:
                    r = httpx.request(method, u + path, json={} if method == "POST" else None, timeout=30)
                    seen.add(path)
                    if path in open_paths:
                        assert r.status_code == 200, (method, path, r.status_code)
                    else:
                        assert r.status_code == 401, (method, path, r.status_code)
                        assert r.headers["WWW-Authenticate"] == "Bearer"
        assert {"/v1/models", "/font", "/v1/reload", "/v1/classify", "/v1/completions", "/v1/attention"} <= seen
        assert seen >= open_paths


@pytest.mark.parametrize("ctype", [None, "text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
def test_inference_bodies_without_content_type_json_are_415(url, ctype):
    bodies = {"/v1/classify": {"model": "clf", "input": "球赛"}, "/v1/embeddings": {"model": "clf", "input": "球"},
              "/v1/completions": {"model": "lm", "prompt": "天", "max_tokens": 2},
              "/v1/attention": {"model": "clf", "input": "球赛"}}
    for path, body in bodies.items():
        headers = {"content-type": ctype} if ctype else {}
        r = httpx.post(url + path, content=json.dumps(body).encode(), headers=headers, timeout=30)
        assert r.status_code == 415, (path, ctype, r.status_code)
        assert "Content-Type: application/json" in error_of(r)
        ok = httpx.post(url + path, content=json.dumps(body).encode(), timeout=30,
                        headers={"content-type": "application/json; charset=utf-8"})
        assert ok.status_code == 200, (path, ok.text)


# ------------------------------------------------------------------ 3. the page, docs, favicon, font

def test_the_page_has_a_strict_csp_and_puts_nothing_in_as_html(url):
    r = httpx.get(url + "/")
    csp = r.headers["content-security-policy"]
    assert r.status_code == 200 and "default-src 'none'" in csp and "frame-ancestors 'none'" in csp
    assert "http" not in csp and "*" not in csp and r.headers["x-content-type-options"] == "nosniff"
    page = r.text
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write"):
        assert sink not in page.replace("innerText", ""), sink
    assert not re.search(r"(src|href)=[\"']?https?:", page)  # nothing from another origin


def test_docs_are_served_from_the_package_with_no_cdn(url):
    r = httpx.get(url + "/docs")
    assert r.status_code == 200 and "default-src 'none'" in r.headers["content-security-policy"]
    refs = re.findall(r"(?:src|href)=\"([^\"]+)\"", r.text)
    assert refs and all(ref.startswith("/") for ref in refs), refs
    notice = (Path(site.__file__).parent / "page" / "docs" / "NOTICE.md").read_text(encoding="utf-8")
    for name, ctype in site.DOCS_ASSETS.items():
        a = httpx.get(url + f"/docs/assets/{name}")
        assert a.status_code == 200 and a.headers["content-type"] == ctype and f"/docs/assets/{name}" in refs
        assert f"| {name} | {hashlib.sha256(a.content).hexdigest()} |" in notice  # the pinned wheel's bytes
    for bad in ("../app.py", "..%2Fapp.py", "NOTICE.md", "favicon.svg"):
        assert httpx.get(url + f"/docs/assets/{bad}").status_code == 404
    assert httpx.get(url + "/redoc").status_code == 404  # ReDoc loads from a CDN: not offered
    for icon in ("/favicon.ico", "/favicon.svg"):
        f = httpx.get(url + icon)
        assert f.status_code == 200 and f.headers["content-type"] == "image/svg+xml" and b"<svg" in f.content


def test_font_is_cached_bounded_and_guarded(clf):
    app, cfg = start([clf], api_key="k")
    key = {"Authorization": "Bearer k"}
    with running(app, cfg) as u:
        wait_ready(u)
        assert httpx.get(u + "/font", params={"text": "股市"}).status_code == 401
        first = httpx.get(u + "/font", params={"text": "股市股"}, headers=key, timeout=60)
        again = httpx.get(u + "/font", params={"text": "市股"}, headers=key, timeout=60)  # the same characters
        assert first.status_code == again.status_code and first.status_code in (200, 404)
        assert first.content == again.content and app.state.serve.fonts.cuts == 1
        many = "".join(chr(0x4E00 + i) for i in range(4001))
        r = httpx.get(u + "/font", params={"text": many}, headers=key)
        assert r.status_code == 422 and "4000 distinct characters" in error_of(r)


def test_font_cutter_keeps_a_bounded_cache_and_queue():
    cutter = site.FontCutter(items=3, waiting=1)
    release = threading.Event()
    cutter._cut = lambda chars: (release.wait(10), chars.encode())[1]

    async def burst():
        tasks = [asyncio.ensure_future(cutter.get(chr(0x4E00 + i))) for i in range(6)]
        await asyncio.sleep(0.2)
        release.set()
        return await asyncio.gather(*tasks, return_exceptions=True)

    out = asyncio.run(burst())
    refused = [o for o in out if isinstance(o, Exception)]
    assert len(refused) == 4 and all(e.status == 429 for e in refused)  # one cutting, one queued, four refused
    assert [o for o in out if not isinstance(o, Exception)] == [chr(0x4E00 + i).encode() for i in range(2)]
    for i in range(10):
        release.set()
        asyncio.run(cutter.get(f"x{i}"))
    assert len(cutter.cache) == 3
    cutter.close()
