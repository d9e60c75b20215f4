"""One precision knob at load (`compute_type`, CTranslate2's names; nn/compute.py) for every task:
bf16 gives fp32's labels and close numbers on tiny runs, `auto` stays float32 (bit for bit) where
the probe finds no bf16 matrix units, the old spellings (`quantize=`, `--quantize`, `--precision`)
still work with a deprecation warning, and every verb takes `--compute-type`."""
import json
import warnings

import numpy as np
import pytest
import torch
from toy_data import train_toy_classifier, train_toy_lm, train_toy_translator

from scratchformer.cli import main
from scratchformer.errors import UserError
from scratchformer.nn import compute
from scratchformer.nn.compute import Compute, choose_compute, compute_type_from
from scratchformer.nn.quant import Int8Linear
from scratchformer.tasks.classify import Classifier
from scratchformer.tasks.lm import LanguageModel
from scratchformer.tasks.translate import Translator

TEXTS = ["央行宣布下调存款准备金率", "火箭客场击败湖人", "新款手机发布", "股市今日大涨"]


@pytest.fixture(scope="module")
def clf_run(tmp_path_factory):
    return train_toy_classifier(tmp_path_factory.mktemp("ct-clf"))


@pytest.fixture(scope="module")
def lm_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("ct-lm")
    return train_toy_lm(d, steps=30), d / "text.txt"


@pytest.fixture(scope="module")
def mt_run(tmp_path_factory):
    return train_toy_translator(tmp_path_factory.mktemp("ct-mt"))


@pytest.fixture
def no_bf16_units(monkeypatch):
    """The probe forced to find no bf16 matrix units (as on the AVX2 EPYC)."""
    monkeypatch.setattr(compute, "bf16_units", lambda: (False, "forced by the test"))


def test_names_and_the_old_spelling():
    assert compute_type_from(None) == "float32" and compute_type_from("bfloat16") == "bfloat16"
    assert compute_type_from(None, default=None) is None
    with pytest.warns(DeprecationWarning, match=r"quantize='int8' is deprecated: pass compute_type='int8'"):
        assert compute_type_from(None, quantize="int8") == "int8"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert compute_type_from("int8", quantize="none") == "int8"  # quantize="none" says nothing
    with pytest.raises(UserError, match=r"^compute_type must be one of auto, float32, bfloat16, int8, got 'bf16'$"):
        compute_type_from("bf16")
    with pytest.raises(UserError, match=r"^compute_type='bfloat16' and quantize='int8' disagree"), \
            pytest.warns(DeprecationWarning):
        compute_type_from("bfloat16", quantize="int8")
    with pytest.raises(UserError, match="int4"):
        compute_type_from(None, quantize="int4")


def test_auto_stays_float32_without_bf16_units_and_says_why(no_bf16_units):
    kind, why = choose_compute(4096, 384)
    assert kind == "float32" and why == "this CPU has no bf16 matrix units (forced by the test): float32"
    c = Compute(torch.nn.Linear(4, 4), "auto", 4)
    assert c.model_for(4096)[0] is c.model and c._bf16 is None  # no bf16 copy made


def test_auto_with_bf16_units_follows_the_probe(monkeypatch):
    monkeypatch.setattr(compute, "bf16_units", lambda: (True, "forced"))
    monkeypatch.setattr(compute, "_bf16_gain", lambda rows, d: 2.0 if rows >= 1024 else 0.7)
    assert choose_compute(4096, 64) == ("bfloat16", "probe at 4096 rows x d_model 64: bf16 2.00x the speed of fp32 "
                                                    "-> bfloat16")
    assert choose_compute(32, 64)[0] == "float32"  # small batches: the probe says fp32 is faster
    c = Compute(torch.nn.Linear(4, 4), "auto", 4)
    model, kind, _ = c.model_for(4096)
    assert kind == "bfloat16" and model.weight.dtype == torch.bfloat16 and c.model.weight.dtype == torch.float32
    assert c.model_for(4096)[0] is model  # the copy is made once


def test_classifier_bf16_gives_fp32s_labels_and_close_probabilities(clf_run):
    fp32 = Classifier.load(clf_run, compute_type="float32")
    bf16 = Classifier.load(clf_run, compute_type="bfloat16")
    p32, p16 = fp32.predict_proba(TEXTS), bf16.predict_proba(TEXTS)
    assert p16.dtype == p32.dtype and p32.shape == p16.shape
    assert (p32.argmax(1) == p16.argmax(1)).all()
    assert np.abs(p32 - p16).max() < 0.03  # bf16 keeps 8 bits of mantissa
    assert all(p.dtype == torch.float32 for p in bf16.model.parameters())  # the float model is untouched
    e32, e16 = fp32.embed(TEXTS), bf16.embed(TEXTS)
    assert e16.dtype == np.float32 and float((e32 * e16).sum(1).min()) > 0.99  # cosine of unit vectors
    assert bf16.compute_choice() == ("bfloat16", "compute_type='bfloat16' was asked for")


def test_classifier_auto_without_bf16_units_is_float32_bit_for_bit(clf_run, no_bf16_units):
    auto = Classifier.load(clf_run, compute_type="auto")
    assert np.array_equal(auto.predict_proba(TEXTS), Classifier.load(clf_run).predict_proba(TEXTS))
    assert auto.compute_choice()[0] == "float32" and auto.compute._bf16 is None


def test_classifier_int8_by_either_spelling(clf_run):
    new = Classifier.load(clf_run, compute_type="int8")
    with pytest.warns(DeprecationWarning, match="quantize='int8' is deprecated"):
        old = Classifier.load(clf_run, quantize="int8")
    assert any(isinstance(m, Int8Linear) for m in new.model.modules())
    assert np.array_equal(new.predict_proba(TEXTS), old.predict_proba(TEXTS))


def test_lm_bf16_loss_within_005_nats_and_auto_is_float32_without_units(lm_run, monkeypatch):
    run, text_file = lm_run
    text = text_file.read_text(encoding="utf-8")
    fp32 = LanguageModel.load(run)
    bf16 = LanguageModel.load(run, compute_type="bfloat16")
    l32, l16 = fp32.evaluate_text(text)["loss"], bf16.evaluate_text(text)["loss"]
    assert abs(l32 - l16) < 0.05, (l32, l16)
    out = bf16.generate_ids([6, 7, 8], 12, temperature=0)
    assert len(out) == 12 and all(isinstance(t, int) for t in out)
    monkeypatch.setattr(compute, "bf16_units", lambda: (False, "forced"))
    auto = LanguageModel.load(run, compute_type="auto")
    assert auto.generate_ids([6, 7, 8], 12, temperature=0) == fp32.generate_ids([6, 7, 8], 12, temperature=0)
    assert auto.compute_choice() == ("float32", "this CPU has no bf16 matrix units (forced): float32")


def test_translator_compute_type_sets_each_batchs_precision(mt_run):
    for ct, precision in (("bfloat16", "bf16"), ("float32", "fp32"), ("int8", "fp32")):
        (h,) = Translator.load(mt_run, compute_type=ct).hypotheses(["ab cd ef"])
        assert h.precision == precision, ct
    (h,) = Translator.load(mt_run, compute_type="bfloat16").hypotheses(["ab cd"])
    assert h.precision_reason == "precision='bf16' was asked for"
    with pytest.warns(DeprecationWarning, match="precision= per decode is deprecated"):
        (h,) = Translator.load(mt_run).hypotheses(["ab cd"], precision="fp32")
    assert h.precision == "fp32"


def test_translator_auto_without_bf16_units_decodes_fp32(mt_run, no_bf16_units):
    (h,) = Translator.load(mt_run, compute_type="auto").hypotheses(["ab cd ef"])
    assert h.precision == "fp32" and "no bf16 matrix units" in h.precision_reason


def _cli(capsys, argv):
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_every_verb_takes_compute_type_and_the_old_flags_warn(clf_run, lm_run, mt_run, capsys, no_bf16_units):
    lm, text_file = lm_run
    code, out, err = _cli(capsys, ["predict", str(clf_run), "--json", "--compute-type", "bfloat16", TEXTS[0]])
    assert code == 0 and json.loads(out)["label"] == Classifier.load(clf_run).predict(TEXTS[:1])[0]["label"]
    code, out, err = _cli(capsys, ["predict", str(clf_run), "--compute-type", "auto", TEXTS[0]])
    assert code == 0 and "compute type: float32 (this CPU has no bf16 matrix units (forced by the test): " \
                         "float32)" in err
    code, out, err = _cli(capsys, ["predict", str(clf_run), "--quantize", "int8", TEXTS[0]])
    assert code == 0 and "warning: --quantize int8 is deprecated; use --compute-type int8" in err
    code, out, err = _cli(capsys, ["predict", str(clf_run), "--quantize", "int8", "--compute-type", "bfloat16", "x"])
    assert code == 2 and "error: --compute-type bfloat16 and --quantize int8 disagree" in err
    code, out, err = _cli(capsys, ["evaluate", str(clf_run), "--json", "--compute-type", "bfloat16", "--no-baseline"])
    assert code == 0 and "accuracy" in json.loads(out.strip().splitlines()[-1])
    code, out, err = _cli(capsys, ["generate", str(lm), "--prompt", "天地", "--max-new-tokens", "5",
                                   "--temperature", "0", "--compute-type", "bfloat16"])
    assert code == 0 and out.strip()
    code, out, err = _cli(capsys, ["evaluate", str(lm), "--json", "--data", str(text_file), "--compute-type", "int8"])
    assert code == 0 and "loss" in json.loads(out)
    code, out, err = _cli(capsys, ["translate", str(mt_run), "ab cd", "--compute-type", "bfloat16"])
    assert code == 0 and out.count("\n") == 1  # one translation (the toy run is barely trained)
    code, out, err = _cli(capsys, ["translate", str(mt_run), "ab cd", "--precision", "bf16"])
    assert code == 0 and "warning: --precision bf16 is deprecated; use --compute-type bfloat16" in err
    code, out, err = _cli(capsys, ["translate", str(mt_run), "ab cd", "--compute-type", "auto"])
    assert code == 0 and "precision: fp32 (this CPU has no bf16 matrix units" in err
    code, out, err = _cli(capsys, ["evaluate", str(mt_run), "--json", "--compute-type", "float32"])
    assert code == 0 and "bleu" in json.loads(out)
    from scratchformer.cli import build_cli

    verbs = build_cli().parser._subparsers._group_actions[0].choices
    for verb in ("predict", "embed", "translate", "generate", "evaluate", "serve"):
        assert "--compute-type" in verbs[verb]._option_string_actions, verb
