"""A language model to ONNX with the KV cache as inputs and outputs: ONNX Runtime's greedy
decoding (prompt with empty pasts, then one token a step) equals ours step for step."""
import json

import numpy as np
import pytest

from scratchformer.cli import main

ort = pytest.importorskip("onnxruntime", reason="pip install -e '.[test]' brings onnxruntime")


def test_lm_export_decodes_like_ours_with_the_cache(lm_run, tmp_path, capsys):
    out = tmp_path / "lm"
    assert main(["export", str(lm_run), "--format", "onnx", "--out", str(out)]) == 0
    meta = json.loads((out / "export.json").read_text())
    assert meta["parity"]["greedy_equal"] and meta["parity"]["max_abs_diff"] <= 1e-4
    assert meta["inputs"][:3] == ["input_ids", "past_0_key", "past_0_value"]
    assert "tokens equal: True" in capsys.readouterr().out

    # the presents grow by the new tokens; a 3-token step after a 2-token prompt matches ours
    import torch

    from scratchformer.tasks.lm import LanguageModel

    lm = LanguageModel.load(lm_run)
    sess = ort.InferenceSession(str(out / "model.onnx"))
    n, h, d = meta["n_layers"], meta["kv_heads"], meta["head_dim"]
    empty = {f"past_{i}_{k}": np.zeros((2, h, 0, d), np.float32) for i in range(n) for k in ("key", "value")}
    res = sess.run(None, {"input_ids": np.array([[5, 6], [7, 8]]), **empty})
    assert res[1].shape == (2, h, 2, d)
    res2 = sess.run(None, {"input_ids": np.array([[9, 10, 11], [6, 5, 7]]), **dict(zip(empty, res[1:]))})
    with torch.no_grad():
        caches = lm.model.new_caches()
        lm.model(torch.tensor([[5, 6], [7, 8]]), caches)
        want = lm.model(torch.tensor([[9, 10, 11], [6, 5, 7]]), caches).numpy()
    assert res2[0].shape == want.shape and np.abs(res2[0] - want).max() <= 1e-4
    assert res2[1].shape == (2, h, 5, d)


def test_export_of_a_translation_run_says_why_not(mt_run, tmp_path, capsys):
    assert main(["export", str(mt_run), "--format", "onnx", "--out", str(tmp_path / "x")]) == 2
    assert "exports classify and lm runs (translation runs: --format transformers or ctranslate2)" in capsys.readouterr().err


def test_an_lm_export_is_served_as_an_lm_and_streams_ours_greedy_text(lm_run, tmp_path, monkeypatch):
    """export.json names the task: an LM ONNX export opens through the lm face's runtime and
    answers /v1/completions with our greedy continuation (it once opened as a classifier)."""
    import httpx

    from scratchformer.serve.backends import LanguageModelBackend, ModelSpec, load_backend
    from scratchformer.tasks.lm import LanguageModel

    from conftest import running, start, wait_ready

    out = tmp_path / "lm"
    assert main(["export", str(lm_run), "--format", "onnx", "--out", str(out), "--no-check"]) == 0
    served = load_backend(ModelSpec("lmx", str(out)))
    assert isinstance(served, LanguageModelBackend)
    assert served.describe()["backend"] == "onnxruntime" and served.describe()["task"] == "lm"
    want = LanguageModel.load(lm_run).generate("天地", max_new_tokens=10, temperature=0.0)
    pieces = []
    assert served.generate("天地", 10, 0.0, None, None, None, pieces.append) == want == "".join(pieces)
    calls, encode = [], served.model.exported.encode
    monkeypatch.setattr(served.model.exported, "encode", lambda text: calls.append(text) or encode(text))
    app, cfg = start([served], max_new_tokens=16)
    with running(app, cfg) as url:
        wait_ready(url)
        r = httpx.post(url + "/v1/completions", json={"model": "lmx", "prompt": "天地", "max_tokens": 10,
                                                       "temperature": 0}, timeout=30)
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["text"] == want
        assert calls == ["天地", want]  # the prompt tokenized once (limit to generation), the output counted once
        r = httpx.post(url + "/v1/completions", json={"model": "lmx", "prompt": "天地", "max_tokens": 4,
                                                       "top_k": 3}, timeout=30)
        assert r.status_code == 200, r.text  # an export samples as its run does (issue 62)


def test_an_lm_export_answers_the_sampler_requests_its_run_answers(lm_run, tmp_path):
    """Issue 62: served without --backend, an LM ONNX export answered 422 to the page's own request
    (temperature 0.8, top_k 40, streamed) and to any top_k / top_p: it sampled with temperature only.
    Now it samples as the run does; k = 1 (or a nucleus of the likeliest token alone) is the greedy text."""
    import httpx

    from scratchformer.serve.backends import LanguageModelBackend, ModelSpec, load_backend
    from scratchformer.tasks.lm import LanguageModel

    from conftest import running, start, wait_ready

    out = tmp_path / "lm"
    assert main(["export", str(lm_run), "--format", "onnx", "--out", str(out), "--no-check"]) == 0
    served = load_backend(ModelSpec("lmx", str(out)))  # as `serve EXPORT` opens it: no --backend
    assert isinstance(served, LanguageModelBackend) and served.engine == "onnxruntime"
    want = LanguageModel.load(lm_run).generate("天地", max_new_tokens=8, temperature=0.0)
    app, cfg = start([served], max_new_tokens=16)
    with running(app, cfg) as url:
        wait_ready(url)
        page = {"model": "lmx", "prompt": "天地", "max_tokens": 8, "temperature": 0.8, "top_k": 40, "stream": True}
        r = httpx.post(url + "/v1/completions", json=page, timeout=30)
        assert r.status_code == 200, r.text
        events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]" and json.loads(events[-2])["usage"]["completion_tokens"] == 8
        for cut in ({"top_k": 1}, {"top_p": 1e-6}, {"top_k": 1, "top_p": 0.5, "seed": 7}):
            r = httpx.post(url + "/v1/completions", json={"model": "lmx", "prompt": "天地", "max_tokens": 8,
                                                           "temperature": 0.8, **cut}, timeout=30)
            assert r.status_code == 200, r.text
            assert r.json()["choices"][0]["text"] == want, cut


def test_the_exported_sampler_keeps_only_the_cut():
    """The folder's own generate.py: top_k keeps the k likeliest, top_p the smallest set reaching p."""
    import numpy as np

    from scratchformer.tasks.lm.onnx_generate import pick

    logits, rng = np.log(np.array([0.05, 0.5, 0.3, 0.15])), np.random.default_rng(0)
    assert pick(logits, 0.0) == 1
    assert {pick(logits, 1.0, top_k=2, rng=rng) for _ in range(300)} == {1, 2}
    assert {pick(logits, 1.0, top_p=0.75, rng=rng) for _ in range(300)} == {1, 2}  # 0.5 + 0.3 reach 0.75
    assert {pick(logits, 1.0, top_p=0.85, rng=rng) for _ in range(300)} == {1, 2, 3}
    assert {pick(logits, 1.0, rng=rng) for _ in range(300)} == {0, 1, 2, 3}


def test_an_export_refuses_a_backend_or_compute_type_that_does_not_apply(lm_run, tmp_path, capsys):
    """Issue 54 rule 6: an export runs as exported, under its format's engine; anything else is
    one line before a model is loaded."""
    out = tmp_path / "lm"
    assert main(["export", str(lm_run), "--format", "onnx", "--out", str(out), "--no-check"]) == 0
    capsys.readouterr()
    for flags, message in (
            (["--backend", "ctranslate2"], f"error: {out} is the onnx export of a language model, which runs under "
                                           "--backend onnxruntime, not ctranslate2: leave --backend out or give "
                                           "--backend onnxruntime"),
            (["--backend", "torch"], f"error: {out} is the onnx export of a language model, which runs under "
                                     "--backend onnxruntime, not torch: leave --backend out or give --backend onnxruntime"),
            (["--compute-type", "int8"], f"error: --compute-type int8 does not apply to {out}: an export runs as it "
                                         "was exported; leave it out, or serve the run folder to choose what it "
                                         "computes in")):
        assert main(["serve", str(out), "--port", "0", *flags]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [message]
