"""Every size knob is range-checked where it enters (issue 54 rule 4): a bucket count of 1 (an
IndexError or a ZeroDivisionError before), a table of 99,999,999,999 rows (terabytes asked of
the allocator before), and the other size-like knobs of every recipe, at their bounds; a whole
model is weighed on the meta device before it is built for training."""
import pytest

from scratchformer import config
from scratchformer.cli import main
from scratchformer.config import check_buckets, check_model_memory, check_table
from scratchformer.errors import UserError
from scratchformer.models.classifier import ClassifierConfig, build_classifier
from scratchformer.models.language_model import LMConfig
from scratchformer.models.mlm import MLMConfig
from scratchformer.models.seq2seq import Seq2SeqConfig
from scratchformer.nn import TransformerConfig
from scratchformer.tasks.classify.recipe import ClassifyRecipe
from scratchformer.tasks.lm.recipe import LMRecipe
from scratchformer.tasks.mlm.recipe import MLMRecipe
from scratchformer.tasks.translate.recipe import TranslateRecipe

from toy_data import headlines, write_tsv

GiB = 1 << 30
BUCKETS = "must be 0 (off) or >= 2 (bucket 0 is for specials and padding), got"


@pytest.mark.parametrize("value,ok", [(0, True), (2, True), (1, False), (-1, False), (True, False)])
def test_bucket_counts_at_their_bounds(value, ok):
    makers = [lambda v: ClassifierConfig(bigram_buckets=v), lambda v: ClassifierConfig(bigram_buckets=7, trigram_buckets=v),
              lambda v: MLMConfig(bigram_buckets=v), lambda v: Seq2SeqConfig(src_bigram_buckets=v)]
    names = ["model.bigram_buckets", "model.trigram_buckets", "model.bigram_buckets", "model.src_bigram_buckets"]
    for make, name in zip(makers, names):
        if ok:
            make(value)
        else:
            with pytest.raises(UserError) as e:
                make(value)
            assert str(e.value) == f"{name} {BUCKETS} {value!r}"


def test_a_table_is_weighed_against_the_memory_there_is(monkeypatch):
    check_table("model.trigram_buckets", GiB // (4 * 256), 256, free=GiB)  # exactly fits
    with pytest.raises(UserError) as e:
        check_table("model.trigram_buckets", GiB // (4 * 256) + 1, 256, free=GiB)
    assert str(e.value) == ("model.trigram_buckets=1,048,577 asks for a table of 1,048,577 x 256 weights, 1.0 GiB, "
                            "and 1.0 GiB of memory is available; choose a smaller model.trigram_buckets (e.g. 1,048,576)")
    monkeypatch.setattr(config, "available_memory", lambda: 64 * GiB)
    with pytest.raises(UserError, match=r"^model.trigram_buckets=99,999,999,999 asks for a table of 99,999,999,999 x 256 "
                                        r"weights, 93.1 TiB, and 64.0 GiB of memory is available"):
        ClassifierConfig(bigram_buckets=101, trigram_buckets=99_999_999_999)
    with pytest.raises(UserError, match=r"^model.bigram_buckets=10,000,000,000 asks for a table"):
        MLMConfig(bigram_buckets=10 ** 10)
    with pytest.raises(UserError, match=r"^model.src_bigram_buckets=10,000,000,000 asks for a table"):
        Seq2SeqConfig(src_bigram_buckets=10 ** 10)
    LMConfig(vocab_size=10 ** 10)  # the tokenizer's: weighed with the whole model (below), not here
    monkeypatch.setattr(config, "available_memory", lambda: None)  # unknown: no memory check, the bounds stay
    ClassifierConfig(bigram_buckets=101, trigram_buckets=99_999_999_999)
    with pytest.raises(UserError):
        check_buckets("model.bigram_buckets", 1)


def test_a_model_too_big_to_train_is_refused_before_it_is_built():
    cfg = ClassifierConfig(vocab_size=1000, encoder=TransformerConfig(d_model=64, n_heads=2, d_ff=128, n_layers=2))
    n = sum(p.numel() for p in build_classifier(cfg).parameters())
    check_model_memory(lambda: build_classifier(cfg), "the classifier", free=16 * n, per_weight=16)  # weights,
    with pytest.raises(UserError) as e:  # gradients and Adam's two moments (the default without a GPU)
        check_model_memory(lambda: build_classifier(cfg), "the classifier", free=16 * n - 1, per_weight=16)
    msg = str(e.value)
    assert msg.startswith(f"the classifier has {n:,} weights and needs about {config._human(16 * n)} of memory to "
                          f"train ({config._human(16 * n - 1)} is available)")
    assert msg.endswith("its largest tensor is embed.tokens.weight (1,000 x 64): make the setting behind it smaller")


@pytest.mark.parametrize("recipe,knob", [
    (ClassifyRecipe, "data.vocab_size"), (ClassifyRecipe, "data.min_freq"), (ClassifyRecipe, "model.vocab_margin"),
    (ClassifyRecipe, "model.encoder.max_len"), (ClassifyRecipe, "model.encoder.n_decoder_layers"),
    (LMRecipe, "data.vocab_size"), (LMRecipe, "data.min_freq"), (LMRecipe, "data.min_length"),
    (LMRecipe, "model.vocab_size"), (MLMRecipe, "data.min_freq"), (MLMRecipe, "data.valid_max_windows"),
    (MLMRecipe, "model.mask_id"), (TranslateRecipe, "data.src_vocab_size"), (TranslateRecipe, "data.tgt_vocab_size"),
    (TranslateRecipe, "data.bleu_sentences"), (TranslateRecipe, "model.vocab_margin"),
])
def test_the_other_size_knobs_of_every_recipe_at_their_lower_bound(recipe, knob):
    d = recipe().to_dict()
    where = d
    for k in knob.split(".")[:-1]:
        where = where[k]
    least = 0 if knob in ("model.vocab_margin", "model.encoder.n_decoder_layers", "model.vocab_size", "model.mask_id",
                          "data.bleu_sentences") else 1
    where[knob.split(".")[-1]] = least
    recipe.from_dict(d)  # the bound itself is fine
    where[knob.split(".")[-1]] = least - 1
    with pytest.raises(UserError) as e:
        recipe.from_dict(d)
    assert f"must be a whole number >= {least}" in str(e.value) and f"got {least - 1}" in str(e.value)
    assert "\n" not in str(e.value)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("knobs")
    write_tsv(d / "train.tsv", headlines(60, 0))
    return d


TINY = ["--set", "model.encoder.d_model=16", "--set", "model.encoder.n_heads=2", "--set", "model.encoder.d_ff=32",
        "--set", "model.encoder.n_layers=1", "--set", "train.max_steps=1", "--set", "train.progress=false",
        "--no-baseline"]


@pytest.mark.parametrize("prepared", ["1", "0"])
@pytest.mark.parametrize("knob,value,message", [
    ("model.bigram_buckets", "1", f"model.bigram_buckets {BUCKETS} 1"),
    ("model.trigram_buckets", "99999999999", "model.trigram_buckets=99,999,999,999 asks for a table of"),
])
def test_the_cli_refuses_in_one_line_with_and_without_prepared_data(data, monkeypatch, capsys, prepared, knob,
                                                                      value, message):
    monkeypatch.setenv("SCRATCHFORMER_PREPARED", prepared)
    monkeypatch.setattr(config, "available_memory", lambda: 64 * GiB)
    extra = ["--set", "model.bigram_buckets=101"] if knob == "model.trigram_buckets" else []
    code = main(["train", "classify", "--data", str(data / "train.tsv"), "--out", str(data / f"run{prepared}"),
                 "--set", "data.tokenizer=char", *extra, "--set", f"{knob}={value}", *TINY])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "Traceback" not in err
    assert err.splitlines()[-1].startswith(f"error: {message}"), err


def test_the_cli_weighs_the_model_before_training(data, monkeypatch, capsys):
    monkeypatch.setattr(config, "available_memory", lambda: 4096)  # the tiny model at 16 bytes a weight does not fit
    code = main(["train", "classify", "--data", str(data / "train.tsv"), "--out", str(data / "big"),
                 "--set", "data.tokenizer=char", *TINY])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2 and last.startswith("error: the classifier has ") and "make the setting behind it smaller" in last
