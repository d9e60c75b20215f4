"""`scratchformer params`: the closed form equals the count of the real tensors."""
import json

import pytest

from scratchformer.cli import main
from scratchformer.experiments.params import closed_form, count_tensors, params_table
from scratchformer.nn import Encoder, Transformer, TransformerConfig

VARIANTS = [
    {},
    {"activation": "swiglu"},
    {"norm": "rmsnorm"},
    {"bias": False},
    {"n_kv_heads": 2},
    {"norm_first": False},  # Post-LN: no final norm
    {"position": "learned", "max_len": 64},
    {"position": "rope"},
    {"position": "alibi"},
    {"ablate_norm": True},  # identity norms: no parameters
    {"ablate_residual": True, "ablate_scale": True},
]


def _named_shapes(module, prefix):
    return {f"{prefix}{n}": list(p.shape) for n, p in module.named_parameters()}


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: ",".join(f"{k}={x}" for k, x in v.items()) or "default")
def test_encoder_closed_form_equals_counted(variant):
    enc = dict(d_model=48, n_heads=4, d_ff=80, n_layers=3, **variant)
    counted = count_tensors(_named_shapes(Encoder(TransformerConfig(**enc)), "encoder."))
    terms = closed_form({"task": "lm", "model": {"vocab_size": 0, "encoder": enc}})
    for part in ("attention", "ffn", "norms"):
        assert terms[part].value == counted[part], (part, terms[part].formula)
    if variant.get("position") == "learned":  # the learned table is an embedding (max_len·d)
        assert terms["embeddings"].value == 64 * 48


def test_paper_formulas_at_d512():
    terms = closed_form({"task": "classify", "model": {"vocab_size": 1000, "n_classes": 3, "encoder": {
        "d_model": 512, "n_heads": 8, "d_ff": 2048, "n_layers": 6}}})
    assert terms["attention"].value == 6 * (4 * 512**2 + 4 * 512)
    assert terms["ffn"].value == 6 * (2 * 512 * 2048 + 2048 + 512)
    assert terms["embeddings"].value == 1000 * 512 and terms["head"].value == 512 * 3 + 3


@pytest.mark.parametrize("n_dec", [None, 1])
def test_encoder_decoder_closed_form_equals_counted(n_dec):
    cfg = dict(d_model=32, n_heads=4, d_ff=64, n_layers=2, n_decoder_layers=n_dec)
    counted = count_tensors(_named_shapes(Transformer(TransformerConfig(**cfg)), "transformer."))
    terms = closed_form({"task": "translate", "model": {"src_vocab_size": 0, "tgt_vocab_size": 0,
                                                        "transformer": cfg, "share_embeddings": True}})
    for part in ("attention", "cross-attention", "ffn", "norms"):
        assert terms[part].value == counted[part], part


def test_params_of_a_trained_run_and_the_cli(tmp_path, capsys):
    lines = ["text\tlabel"] + [f"{w} {w} movie\t{lab}" for w, lab in [("good", "pos"), ("bad", "neg")] * 20]
    (tmp_path / "train.tsv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "run"
    assert main(["train", "classify", "--data", str(tmp_path / "train.tsv"), "--out", str(out),
                 "--set", "data.tokenizer=word", "--set", "model.bigram_buckets=7",
                 "--set", "model.encoder.d_model=16", "--set", "model.encoder.n_heads=2",
                 "--set", "model.encoder.d_ff=24", "--set", "model.encoder.n_layers=2",
                 "--set", "train.epochs=1", "--set", "train.progress=false", "--set", "ensemble=1"]) == 0
    rows, note = params_table(out)
    by = {name: (counted, term) for name, counted, term in rows}
    for name, (counted, term) in by.items():
        assert counted == term.value, name
    vocab = json.loads((out / "config.json").read_text())["model"]["vocab_size"]
    assert by["embeddings"][0] == (vocab + 7) * 16
    capsys.readouterr()
    assert main(["params", str(out)]) == 0
    text = capsys.readouterr().out
    assert "L·(4·d² + 4·d)" in text and "total" in text and "model.safetensors" in text
    assert main(["params", "--config", str(out / "config.json")]) == 0
    assert "closed form only" in capsys.readouterr().out
    assert main(["params"]) == 2


def test_language_model_run_with_learned_positions_and_tied_head(tmp_path):
    (tmp_path / "text.txt").write_text("the quick brown fox jumps over the lazy dog. " * 60)
    out = tmp_path / "lm"
    assert main(["train", "lm", "--data", str(tmp_path / "text.txt"), "--out", str(out),
                 "--set", "model.encoder.d_model=16", "--set", "model.encoder.n_heads=2",
                 "--set", "model.encoder.d_ff=24", "--set", "model.encoder.n_layers=2",
                 "--set", "model.encoder.position=learned", "--set", "model.encoder.max_len=40",
                 "--set", "data.context=32", "--set", "train.max_steps=1", "--set", "train.progress=false"]) == 0
    rows, _ = params_table(out)
    for name, counted, term in rows:
        assert counted == term.value, name
    assert "head" not in {name for name, _, _ in rows}  # tied to the token embedding


def test_hashed_bigram_and_trigram_tables_are_counted():
    from scratchformer.models.classifier import ClassifierConfig, EncoderClassifier

    enc = dict(d_model=16, n_heads=2, d_ff=32, n_layers=1)
    model = {"vocab_size": 50, "n_classes": 3, "bigram_buckets": 97, "trigram_buckets": 31, "encoder": enc}
    terms = closed_form({"task": "classify", "model": model})
    real = EncoderClassifier(ClassifierConfig(vocab_size=50, n_classes=3, bigram_buckets=97, trigram_buckets=31,
                                              encoder=TransformerConfig(**enc)))
    assert terms["embeddings"].value == sum(p.numel() for p in real.embed.parameters()) == (50 + 97 + 31) * 16
