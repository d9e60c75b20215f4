"""`serve --quantize int8` loads each run through its load API's `quantize=`: the served model
holds int8 projections and answers exactly as the int8 model a Python user loads."""
from pathlib import Path

import pytest

from scratchformer.errors import UserError
from scratchformer.nn.quant import Int8Linear
from scratchformer.serve.backends import ModelSpec, load_backend
from scratchformer.tasks.classify import Classifier

TEXTS = ["央行宣布下调存款准备金率", "火箭客场击败湖人", "新款手机发布"]


def _int8_count(module) -> int:
    return sum(isinstance(m, Int8Linear) for m in module.modules())


def test_serve_quantize_int8_loads_int8_projections_and_equals_the_int8_classifier(clf_run):
    plain = load_backend(ModelSpec("clf", str(clf_run)))
    served = load_backend(ModelSpec("clf", str(clf_run)), quantize="int8")
    assert _int8_count(plain.clf.model) == 0
    ours = Classifier.load(clf_run, quantize="int8")
    want = ours.predict(TEXTS)
    got = served.clf.predict(TEXTS)
    assert [r["label"] for r in got] == [r["label"] for r in want]
    assert [r["score"] for r in got] == pytest.approx([r["score"] for r in want], abs=1e-6)
    assert _int8_count(served.clf.model) > 0


def test_serve_quantize_refuses_an_unknown_kind(clf_run):
    with pytest.raises(UserError, match="int4"):
        load_backend(ModelSpec("clf", str(clf_run)), quantize="int4")
