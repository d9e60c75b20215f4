"""The static encoder (nn/static_encoder.py) where the tasks use it: the translator's static path
encodes through `Seq2Seq.static_encode` (the memory's real positions equal `encode`'s, the
translation equals the readable path's), and a classifier loaded with `static_encoder=True`
gives the probabilities of the eager one. Eager static encoder (`static.use_compiler(False)`):
the compiled graph is tested equal in tests/nn/test_static_encoder.py."""
import numpy as np
import pytest
import torch
from toy_data import train_toy_classifier

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny ops: see tests/conftest.py

from scratchformer.nn import static, static_encoder
from scratchformer.tasks.classify import Classifier
from scratchformer.tasks.translate.decoding import DecodeConfig, decode

from test_lean_decoding import _model, _sources  # the same tiny models and ragged sources

TEXTS = ["央行宣布下调存款准备金率", "火箭客场击败湖人", "新款手机发布", "股市今日大涨，成交量创下年内新高"]


@pytest.fixture
def eager_static(monkeypatch):
    monkeypatch.setattr(static_encoder, "_COMPILED", {})
    monkeypatch.setattr(static_encoder, "PACK_MIN", 0)  # the packed oneDNN products too (d32 is below it)
    previous = static.use_compiler(False)
    yield
    static.use_compiler(previous)


@pytest.mark.usefixtures("eager_static")
@pytest.mark.parametrize("norm_first,seed", [(False, 1), (True, 0)])
def test_static_encode_equals_encode_on_real_positions(norm_first, seed):
    model, src = _model(norm_first, seed, 1.0), _sources(6)
    with torch.no_grad():
        memory, mask = model.static_encode(src)
        want, want_mask = model.encode(src)
    assert torch.equal(mask, want_mask)
    assert float((memory - want)[mask].abs().max()) < 1e-5
    assert len(static_encoder._COMPILED) == 1  # (8 rows, 16 positions): the static encoder ran


@pytest.mark.usefixtures("eager_static")
@pytest.mark.parametrize("beam", [1, 4])
def test_translation_through_the_static_path_equals_the_readable_path(beam):
    model, src = _model(False, 1, 2.0), _sources(6)
    cfg = DecodeConfig(beam=beam, max_len_ratio=1.0, max_len_offset=4)
    with torch.no_grad():
        got = decode(model, src, cfg.replace(static=True))
        want = decode(model, src, cfg.replace(lean=False))
    assert [h.tokens for h in got] == [h.tokens for h in want]
    assert max(abs(a.score - b.score) for a, b in zip(got, want)) < 1e-4
    assert static_encoder._COMPILED  # the memory came from the static encoder


@pytest.mark.usefixtures("eager_static")
def test_classifier_with_the_static_encoder_gives_the_eager_probabilities(tmp_path):
    run = train_toy_classifier(tmp_path)
    plain = Classifier.load(run, blend=False)
    fast = Classifier.load(run, blend=False, static_encoder=True)
    assert fast.model.static_encoder and not plain.model.static_encoder
    got, want = fast.predict_proba(TEXTS), plain.predict_proba(TEXTS)
    assert static_encoder._COMPILED  # the static encoder ran
    np.testing.assert_allclose(got, want, atol=1e-5)
    one = fast.predict_proba(TEXTS[:1], batch_size=1)  # a served request: batch 1
    np.testing.assert_allclose(one, want[:1], atol=1e-5)
