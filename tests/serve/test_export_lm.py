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
