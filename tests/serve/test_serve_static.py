"""`serve` decodes translation through the static compiled step (issue 53 items 5 and 6) and
takes `--device` (issue 55 item 4), over real HTTP on 127.0.0.1.

The static step runs eagerly here (conftest's `eager_static_step`: the same step and search as
the compiled one, in seconds); one test compiles a bucket for real. The static step is tested
equal to the readable path in tests/tasks/test_static_decoding.py; here: a served translation
through it equals the lean path's, the bucket compiled before /ready serves the first request,
a bucket not compiled runs the lean step and says so, a compile that fails is one log line and
the lean step, and /v1/models says the path and what compute_type auto resolved to."""
import logging
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
import torch
from conftest import running, wait_ready

from scratchformer.cli import main
from scratchformer.errors import UserError
from scratchformer.nn import static
from scratchformer.serve.app import create_app
from scratchformer.serve.backends import TranslatorBackend, check_device
from scratchformer.serve.state import ServeConfig
from scratchformer.tasks.translate import Translator

SRC = ["ab cd", "ef gh ij", "kl ab", "ij kl ab cd ef"]
NAMES = {"fp32": "float32", "bf16": "bfloat16"}


def served(backend, **cfg):
    return running(create_app(lambda: [backend], ServeConfig(**cfg)))


def translate(url, text, beam):
    r = httpx.post(url + "/v1/translate", json={"input": text, "beam": beam}, timeout=60)
    assert r.status_code == 200, r.text
    return [d["translation"] for d in r.json()["data"]]


def info(url):
    (model,) = httpx.get(url + "/v1/models", timeout=10).json()["data"]
    return model


def test_served_static_path_equals_the_lean_path_and_says_so(mt_run):
    fast, lean = TranslatorBackend("mt", mt_run), TranslatorBackend("mt", mt_run)
    with served(fast, compile_tokens=8, compile_beams=(1, 2)) as u1, served(lean, decode="lean") as u2:
        wait_ready(u1)
        wait_ready(u2)
        got = {(t, b): translate(u1, t, b) for t in SRC for b in (1, 2)}  # one sentence a request: batch 1
        want = {(t, b): translate(u2, t, b) for t in SRC for b in (1, 2)}
        a, b = info(u1), info(u2)
    assert got == want and any(x != [""] for x in got.values())  # not only empty outputs
    assert a["decode"]["path"] == "static" and a["decode"]["asked"] == "auto"
    # the batch-1 buckets of sources up to 8 tokens: rows 1 (greedy) and 2 (beam 2)
    assert {(c["beam"], c["rows"]) for c in a["decode"]["compiled"]} == {(1, 1), (2, 2)}
    rows = {r["rows"]: r for r in a["compute"]["resolved"]}
    assert rows[1]["batches"] == {"static": 4} and rows[2]["batches"] == {"static": 4}
    assert b["decode"] == {"asked": "lean", "path": "lean", "why": "--decode lean was asked for"}
    assert {r["rows"]: r["batches"] for r in b["compute"]["resolved"]} == {1: {"lean": 4}, 2: {"lean": 4}}


def test_static_hypotheses_equal_lean_ones_token_for_token(mt_run):
    tr = Translator.load(mt_run)
    tr.warm_static((1, 3), 8)
    for beam in (1, 3):
        for text in SRC:
            (s,) = tr.hypotheses([text], beam=beam, static=True, cold="lean")
            (n,) = tr.hypotheses([text], beam=beam, static="off")
            assert s.tokens == n.tokens and s.finished == n.finished
            assert abs(s.score - n.score) < 1e-4
    rows = {r["rows"]: r["batches"] for r in tr.decode_record()["resolved"]}
    assert rows == {1: {"static": 4, "lean": 4}, 4: {"static": 4, "lean": 4}}


def test_a_bucket_not_compiled_at_start_runs_the_lean_step_and_says_why(mt_run):
    backend, ref = TranslatorBackend("mt", mt_run), Translator.load(mt_run)  # ref: its own record
    long = " ".join(["ab", "cd", "ef"] * 14)  # 42 tokens: past --compile-tokens 2 and its bucket of 32
    with served(backend, compile_tokens=2, compile_beams=(1,)) as url:
        wait_ready(url)
        assert translate(url, long, 1) == ref.translate([long], beam=1)
        assert translate(url, "ab", 1) == ref.translate(["ab"], beam=1)
        assert translate(url, ["ab", "cd"], 1) == ref.translate(["ab", "cd"], beam=1)  # 2 rows: not compiled
        model = info(url)
    assert [(c["rows"], c["target_positions"], c["source_positions"]) for c in model["decode"]["compiled"]] == [(1, 64, 32)]
    rows = {r["rows"]: r for r in model["compute"]["resolved"]}
    assert rows[1]["batches"] == {"lean": 1, "static": 1}
    assert rows[1]["lean_why"] == "the bucket of 1 rows x 128 target x 64 source positions (greedy) is not compiled"
    assert rows[2]["batches"] == {"lean": 1}


def test_info_says_what_auto_resolved_to_per_rows_bucket(mt_run):
    backend = TranslatorBackend("mt", mt_run)  # compute_type: the run's decode.precision, auto
    with served(backend, compile_tokens=2) as url:
        wait_ready(url)
        translate(url, SRC[:3], 1)  # 3 rows: the bucket of 4
        translate(url, SRC[0], 2)  # 2 rows
        model = info(url)
    assert model["compute"]["compute_type"] == "auto"
    for r in model["compute"]["resolved"]:
        kind, why = backend.tr.choose_precision(r["rows"])
        assert (r["compute_type"], r["why"]) == (NAMES[kind], why)
    assert sorted(r["rows"] for r in model["compute"]["resolved"]) == [2, 4]
    pinned = TranslatorBackend("mt32", mt_run, compute_type="float32")
    pinned.prepare(ServeConfig(compile_tokens=0))
    pinned.translate(["ab cd"], (1, 20))
    assert pinned.describe()["compute"] == {"compute_type": "float32", "resolved": [
        {"rows": 1, "batches": {"lean": 1}, "compute_type": "float32", "why": "precision='fp32' was asked for",
         "lean_why": "decode.static is off"}]}
    assert pinned.describe()["decode"]["why"] == "--compile-tokens 0: no bucket was compiled, so every batch runs the lean step"


def test_evaluate_records_what_auto_resolved_to(mt_run):
    pairs = [(s, s.upper()) for s in SRC]
    rep = Translator.load(mt_run).evaluate(pairs)
    assert rep["decode"]["precision"] == "auto" and sum(c["sentences"] for c in rep["compute"]) == len(pairs)
    for c in rep["compute"]:
        assert c["why"].startswith(("probe at", "this CPU has no bf16")) and c["compute_type"] in ("float32", "bfloat16")
    assert Translator.load(mt_run, compute_type="float32").evaluate(pairs)["compute"] == [
        {"compute_type": "float32", "why": "precision='fp32' was asked for", "sentences": 4}]


def test_a_model_the_static_step_cannot_run_is_lean_under_auto_and_refused_under_static(mt_run):
    backend = TranslatorBackend("mt", mt_run, compute_type="int8")
    backend.prepare(ServeConfig())
    why = "int8 projections (compute_type int8, dynamic int8): the lean step serves them"
    assert backend.describe()["decode"] == {"asked": "auto", "path": "lean", "why": why}
    backend.translate(["ab cd"], (1, 20))
    (row,) = backend.describe()["compute"]["resolved"]
    assert (row["compute_type"], row["batches"], row["lean_why"]) == ("int8", {"lean": 1}, "decode.static is off")
    with pytest.raises(UserError, match=r"^model 'mt' cannot decode through the static step \(int8 projections "
                                        r"\(compute_type int8, dynamic int8\): the lean step serves them\); serve it "
                                        r"with --decode auto"):
        backend.prepare(ServeConfig(decode="static"))
    with pytest.raises(UserError, match="--decode must be one of auto, static, lean, got 'fast'"):
        ServeConfig(decode="fast").check()


def test_a_compile_that_fails_is_one_log_line_and_the_lean_step(mt_run, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise RuntimeError("InvalidCxxCompiler: No working C++ compiler found\n(long details)")

    monkeypatch.setattr(static, "_disabled", [])  # the process's record of a failed compile, for this test only
    monkeypatch.setattr(static, "_COMPILED", {})
    monkeypatch.setattr(static, "build_package", broken)
    previous = static.use_compiler(True)
    try:
        backend = TranslatorBackend("mt", mt_run)
        with caplog.at_level(logging.INFO, logger="scratchformer.serve"), served(backend, compile_tokens=4) as url:
            wait_ready(url)
            got = translate(url, SRC[1], 1)
            model = info(url)
    finally:
        static.use_compiler(previous)
    assert got == Translator.load(mt_run).translate([SRC[1]], beam=1)
    why = "the compile failed here (RuntimeError: InvalidCxxCompiler: No working C++ compiler found)"
    assert model["decode"] == {"asked": "auto", "path": "lean", "why": why}
    said = [r.getMessage() for r in caplog.records if r.name == "scratchformer.serve" and r.getMessage().startswith("mt:")]
    assert said == [f"mt: decoding runs the lean step ({why})"]
    assert all(r.exc_info is None for r in caplog.records)


def test_one_bucket_compiled_for_real_serves_the_first_request(mt_run, monkeypatch):
    """The one compiled test: a bucket compiled before /ready (Inductor; seconds on a tiny model)."""
    monkeypatch.setattr(static, "_COMPILED", {})
    previous = static.use_compiler(True)
    try:
        backend = TranslatorBackend("mt", mt_run)
        with served(backend, compile_tokens=2, compile_beams=(1,)) as url:
            wait_ready(url, timeout=300)
            model = info(url)
            got = translate(url, "ab", 1)
            assert info(url)["compute"]["resolved"][0]["batches"] == {"static": 1}
    finally:
        static.use_compiler(previous)
    assert static.compile_disabled() is None, static.compile_disabled()
    assert got == Translator.load(mt_run).translate(["ab"], beam=1)
    (bucket,) = model["decode"]["compiled"]
    assert model["decode"]["path"] == "static" and bucket["seconds"] > 0


# ------------------------------------------------------------------ serve --device (issue 55 item 4)

def test_serve_device_mps_is_refused_in_one_line(mt_run, capsys):
    if torch.backends.mps.is_available():
        pytest.skip("this machine has MPS")
    assert main(["serve", str(mt_run), "--device", "mps", "--port", "0"]) == 2
    assert capsys.readouterr().err == "error: device 'mps' is not available here; available: cpu\n"
    assert main(["serve", str(mt_run), "--device", "gpu", "--port", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: --device='gpu' is not a device torch knows; use cpu, cuda")
    assert main(["serve", str(mt_run), "--compile-beams", "one", "--port", "0"]) == 2
    assert capsys.readouterr().err == "error: --compile-beams takes whole numbers separated by commas, e.g. 1,4; got 'one'\n"


def test_device_other_than_the_cpu_is_refused_where_it_cannot_apply(clf_run, tmp_path):
    check_device(clf_run, "cpu")  # the CPU: every source
    with pytest.raises(UserError, match=r"^--device cuda: a classifier is served on the CPU so far \(translation runs "
                                        r"take --device\); leave --device out or give --device cpu$"):
        check_device(clf_run, "cuda")
    (tmp_path / "export.json").write_text("{}")
    with pytest.raises(UserError, match=r"^--device cuda:1 does not apply to .*: an export runs on the CPU under its "
                                        "engine, as it was exported"):
        check_device(tmp_path, "cuda:1")


def test_serve_device_cpu_serves_over_http(mt_run):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "scratchformer.cli", "serve", f"mt={mt_run}", "--port", str(port),
                             "--device", "cpu", "--compile-tokens", "0"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                if httpx.get(url + "/ready", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stdout.read()
            time.sleep(0.2)
        got = translate(url, SRC[:2], 1)
        model = info(url)
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=30)[0]
    assert got == Translator.load(mt_run).translate(SRC[:2], beam=1), out
    assert model["decode"]["path"] == "lean" and "Traceback" not in out


def test_a_translator_swapped_in_by_a_reload_runs_the_lean_step_and_says_why(mt_run):
    backend = TranslatorBackend("mt", mt_run)
    backend.prepare(ServeConfig(), compile=False)  # what ServerState.reload does: requests run meanwhile
    assert backend.describe()["decode"] == {
        "asked": "auto", "path": "lean",
        "why": "loaded by a reload while serving: the static step compiles only before the server is ready "
               "(torch.compile is not thread-safe beside running requests); restart to compile"}
    assert backend.translate(["ab cd"], (1, 20)) == Translator.load(mt_run).translate(["ab cd"], beam=1, max_output_len=20)


def test_compile_sentences_compiles_the_buckets_of_joined_requests(mt_run):
    backend, ref = TranslatorBackend("mt", mt_run), Translator.load(mt_run)
    with served(backend, compile_tokens=4, compile_beams=(1,), compile_sentences=(1, 2, 4)) as url:
        wait_ready(url)
        for texts in (["ab", "cd"], ["ab cd", "ef", "gh ij kl"], ["ab"]):
            assert translate(url, texts, 1) == ref.translate(texts, beam=1)
        model = info(url)
    assert {c["rows"] for c in model["decode"]["compiled"]} == {1, 2, 4}
    assert {r["rows"]: r["batches"] for r in model["compute"]["resolved"]} == {1: {"static": 1}, 2: {"static": 1},
                                                                               4: {"static": 1}}
    with pytest.raises(UserError, match=r"^--compile-sentences must list batch sizes >= 1 \(e.g. 1,2,4\), got \(0,\)$"):
        ServeConfig(compile_sentences=(0,)).check()


def test_a_static_step_that_fails_eagerly_is_one_log_line_and_the_lean_step(mt_run, monkeypatch, caplog):
    backend = TranslatorBackend("mt", mt_run)
    monkeypatch.setattr(type(backend.tr.model), "static_step",
                        lambda self, *a, **k: (_ for _ in ()).throw(ValueError("a shape the step was not written for\nmore")))
    with caplog.at_level(logging.INFO, logger="scratchformer.serve"):
        backend.prepare(ServeConfig(compile_tokens=2))
    why = "the static step failed before its compile (ValueError: a shape the step was not written for)"
    assert backend.describe()["decode"] == {"asked": "auto", "path": "lean", "why": why}
    assert [r.getMessage() for r in caplog.records] == [f"mt: decoding runs the lean step ({why})"]
    assert backend.translate(["ab cd"], (1, 20)) == Translator.load(mt_run).translate(["ab cd"], beam=1, max_output_len=20)


def test_ready_says_compiling_until_the_buckets_are_compiled(mt_run, monkeypatch):
    import threading

    backend, release = TranslatorBackend("mt", mt_run), threading.Event()
    prepare = backend.prepare
    monkeypatch.setattr(backend, "prepare", lambda cfg, compile=True: release.wait(30) and prepare(cfg, compile))
    with served(backend, compile_tokens=2) as url:
        deadline = time.time() + 30
        while httpx.get(url + "/ready", timeout=5).json() == {"status": "loading"} and time.time() < deadline:
            time.sleep(0.02)
        r = httpx.get(url + "/ready", timeout=5)
        assert (r.status_code, r.json()) == (503, {"status": "compiling"})
        assert httpx.post(url + "/v1/translate", json={"input": "ab"}, timeout=5).status_code == 503
        release.set()
        wait_ready(url)
        assert info(url)["decode"]["path"] == "static"
