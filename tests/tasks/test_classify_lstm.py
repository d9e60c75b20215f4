"""The LSTM baseline (`model.kind=lstm`): trains through the same CLI and Trainer, loads back
through `Classifier.load`, predicts, and says in one line that it has no attention."""
import json

import pytest
import torch

from scratchformer.cli import main
from scratchformer.errors import UserError
from scratchformer.models.classifier import ClassifierConfig, EncoderClassifier, build_classifier
from scratchformer.models.rnn import LSTMClassifier
from scratchformer.nn import TransformerConfig
from scratchformer.tasks.classify import Classifier
from toy_data import write_reviews_tsv

TINY = ["--set", "model.kind=lstm", "--set", "model.encoder.d_model=32", "--set", "model.encoder.n_layers=1",
        "--set", "train.epochs=8", "--set", "train.lr=3e-3", "--set", "data.batch_size=16",
        "--set", "train.progress=false", "--set", "data.tokenizer=word"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("lstm")
    write_reviews_tsv(d / "train.tsv", 240, 0)
    write_reviews_tsv(d / "test.tsv", 60, 1)
    out = d / "run"
    assert main(["train", "classify", "--data", str(d / "train.tsv"), "--test", str(d / "test.tsv"),
                 "--out", str(out)] + TINY) == 0
    return d, out


def test_lstm_trains_loads_and_predicts(run):
    _, out = run
    assert json.loads((out / "config.json").read_text())["model"]["kind"] == "lstm"
    assert json.loads((out / "test_metrics.json").read_text())["accuracy"] > 0.9  # the words give the label away
    clf = Classifier.load(out)
    assert isinstance(clf.model, LSTMClassifier)
    assert [r["label"] for r in clf.predict(["good great fine movie", "bad awful poor movie"])] == ["pos", "neg"]


def test_attention_and_doctor_say_an_lstm_has_no_attention(run, capsys):
    _, out = run
    with pytest.raises(UserError, match="an LSTM has no attention"):
        Classifier.load(out).attention("good movie")
    for verb in (["attention", str(out), "good movie"], ["doctor", str(out)]):
        assert main(verb) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and "an LSTM has no attention" in err and "\n" not in err


def test_padding_does_not_change_a_row():
    # packed sequences: the backward direction starts at the last real token, not at padding
    cfg = ClassifierConfig(kind="lstm", vocab_size=20, n_classes=3, head_dropout=0.0,
                           encoder=TransformerConfig(d_model=8, n_heads=2, d_ff=16, n_layers=2, dropout=0.0))
    torch.manual_seed(0)
    model = build_classifier(cfg).eval()
    short = torch.tensor([[5, 6, 7]])
    padded = torch.tensor([[5, 6, 7, 0, 0], [8, 9, 10, 11, 12]])
    torch.testing.assert_close(model(short)[0], model(padded)[0])
    assert model(padded).shape == (2, 3)
    assert isinstance(build_classifier(cfg.replace(kind="transformer")), EncoderClassifier)


def test_bad_lstm_settings_are_one_line_errors():
    with pytest.raises(UserError, match="model.kind 'gru' is unknown"):
        ClassifierConfig(kind="gru")
    with pytest.raises(UserError, match="trains from scratch"):
        ClassifierConfig(kind="lstm", init="minilm")


def test_params_closed_form_counts_the_lstm():
    from scratchformer.experiments.params import closed_form, count_tensors

    cfg = ClassifierConfig(kind="lstm", vocab_size=50, n_classes=4, bigram_buckets=16,
                           encoder=TransformerConfig(d_model=12, n_heads=2, d_ff=16, n_layers=3, position="learned"))
    model = build_classifier(cfg)
    counted = count_tensors({k: list(v.shape) for k, v in model.state_dict().items()})
    terms = closed_form({"task": "classify", "model": cfg.to_dict()})
    assert {k: v for k, v in counted.items() if v} == {k: t.value for k, t in terms.items()}
    assert terms["recurrence"].value == sum(p.numel() for p in model.lstm.parameters())
