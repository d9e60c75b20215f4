"""Language models at longer contexts than training: RoPE scaling (interpolation, NTK), loss per
position bucket, the learned table's limit, random-length crops; classifiers at a longer max_len."""
import json
import math
import random

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from scratchformer.cli import main
from scratchformer.data.tokenizers import NUM_SPECIALS, CharTokenizer
from scratchformer.errors import UserError
from scratchformer.models.language_model import DecoderLM, LMConfig
from scratchformer.nn import RotaryEmbedding, TransformerConfig
from scratchformer.nn.position import ntk_base, scaled_rope
from scratchformer.tasks.lm import (LanguageModel, LMDataConfig, LMRecipe, RandomWindows, evaluate_context,
                                    fixed_windows, position_buckets)
from scratchformer.tasks.lm.context import position_losses, rope_scaling
from scratchformer.train import trainer as trainer_mod
from toy_data import write_reviews_tsv

TINY = ["--set", "model.transformer.d_model=32", "--set", "model.transformer.n_heads=2",
        "--set", "model.transformer.d_ff=64", "--set", "model.transformer.n_layers=1",
        "--set", "data.context=16", "--set", "data.batch_size=8", "--set", "data.eval_windows=10",
        "--set", "train.max_steps=12", "--set", "train.eval_every=0", "--set", "train.lr=3e-3",
        "--set", "train.warmup_steps=2", "--set", "train.log_every=4", "--set", "train.progress=false"]


def tiny_lm(position="rope", max_len=64, context=16, vocab=30, seed=0) -> LanguageModel:
    torch.manual_seed(seed)
    enc = TransformerConfig(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0, activation="gelu",
                            position=position, max_len=max_len)
    cfg = LMConfig(vocab_size=vocab, transformer=enc)
    tok = CharTokenizer(["<pad>", "<unk>", "<bos>", "<eos>", "<cls>"] + [chr(97 + i) for i in range(vocab - NUM_SPECIALS)])
    return LanguageModel(DecoderLM(cfg), tok, LMRecipe(data=LMDataConfig(context=context, eval_batch_size=4), model=cfg))


def _text(n=3000, seed=0) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("abcdefgh") for _ in range(n))


# ------------------------------------------------------------------ RoPE scaling (nn/position.py)

def test_linear_scaling_with_factor_1_is_plain_rope_exactly():
    plain = RotaryEmbedding(16)
    same = scaled_rope(plain, "linear", 1.0)
    x = torch.randn(2, 3, 40, 16)
    for offset in (0, 7, 300):
        assert torch.equal(same.rotate(x, offset), plain.rotate(x, offset))
    assert torch.equal(scaled_rope(plain, "ntk", 1.0).rotate(x, 5), plain.rotate(x, 5))


@pytest.mark.parametrize("s", [2.0, 3.0, 4.0])
def test_linear_scaling_puts_position_p_where_plain_rope_has_p_over_s(s):
    """Position interpolation (Chen et al. 2023): the scaled RoPE at p is the plain one at p / s."""
    plain, scaled = RotaryEmbedding(16), scaled_rope(RotaryEmbedding(16), "linear", s)
    x = torch.randn(1, 2, 1, 16)
    for p in (0, 12, 60, 384):
        assert torch.equal(scaled.rotate(x, p), plain.rotate(x, int(p / s)))
    # and an in-between position p = s*k + 1 lies strictly between k and k + 1 (not on a plain one)
    q, k = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 1, 16)
    score = lambda rope, i: float((rope.rotate(q, i) * k).sum())  # noqa: E731
    assert not any(math.isclose(score(scaled, 25), score(plain, j), rel_tol=1e-6) for j in range(30))


def test_ntk_scaling_raises_the_base_as_stated():
    d, s = 16, 4.0
    plain, ntk = RotaryEmbedding(d), scaled_rope(RotaryEmbedding(d), "ntk", s)
    assert ntk.base == pytest.approx(10000.0 * s ** (d / (d - 2)), rel=1e-12) == ntk_base(10000.0, s, d)
    assert ntk.scale == 1.0  # positions untouched
    # the highest frequency is unchanged; the lowest turns s times slower, as under interpolation
    assert ntk.inv_freq[0] == plain.inv_freq[0] == 1.0
    assert float(ntk.inv_freq[-1]) == pytest.approx(float(plain.inv_freq[-1]) / s, rel=1e-5)
    with pytest.raises(UserError, match="factor must be >= 1"):
        scaled_rope(plain, "ntk", 0.5)
    with pytest.raises(UserError, match="unknown"):
        scaled_rope(plain, "yarn", 2.0)


# ------------------------------------------------------------------ evaluation at longer contexts

def test_position_buckets_double_from_the_training_context():
    assert position_buckets(64, 512) == [(0, 64), (64, 128), (128, 256), (256, 512)]
    assert position_buckets(64, 100) == [(0, 64), (64, 100)]
    assert position_buckets(64, 32) == [(0, 32)]


def test_the_first_positions_of_a_long_window_score_as_a_short_window():
    """Causal: the loss at position p depends only on tokens 0..p of the window."""
    lm = tiny_lm("sinusoidal")
    ids = np.asarray(lm.tokenizer.encode(_text(400)), dtype=np.int32)
    long_sums, long_counts = position_losses(lm.model.eval(), fixed_windows(ids, 64, 4, 3))
    short_sums, _ = position_losses(lm.model, [type(b)(b.ids[:, :17]) for b in fixed_windows(ids, 64, 4, 3)])
    assert long_counts[0] == 3 and np.allclose(long_sums[:16], short_sums, atol=1e-5)


def test_evaluate_context_buckets_and_agrees_with_plain_evaluation():
    lm = tiny_lm("rope", context=16)
    text = _text()
    res = evaluate_context(lm, text, 64)
    assert [(b["from"], b["to"]) for b in res["buckets"]] == [(0, 16), (16, 32), (32, 64)]
    assert [c["context"] for c in res["by_context"]] == [16, 32, 64]
    assert len(res["position_loss"]) == 64 and res["rope_scaling"] is None
    tokens = sum(b["tokens"] for b in res["buckets"])
    assert tokens == res["tokens"] == res["windows"] * 64
    mean = sum(b["loss"] * b["tokens"] for b in res["buckets"]) / tokens
    assert mean == pytest.approx(res["loss"], rel=1e-9) == res["by_context"][-1]["loss"]
    # at the training context it is the ordinary evaluation (same windows)
    at_l = evaluate_context(lm, text, 16)
    assert at_l["loss"] == pytest.approx(lm.evaluate_text(text)["loss"], abs=1e-5)


def test_rope_scaling_changes_the_loss_and_is_undone_afterwards():
    lm = tiny_lm("rope", context=16)
    text = _text()
    plain = evaluate_context(lm, text, 64, max_windows=4)
    rope = lm.model.encoder.rope
    for kind in ("linear", "ntk"):
        res = evaluate_context(lm, text, 64, rope=kind, max_windows=4)
        assert res["rope_scaling"] == kind and res["rope_factor"] == 4.0
        assert abs(res["loss"] - plain["loss"]) > 1e-6
    assert lm.model.encoder.rope is rope  # the model is as loaded
    assert evaluate_context(lm, text, 64, max_windows=4)["loss"] == plain["loss"]
    with pytest.raises(UserError, match="RoPE models; this one has alibi"):
        with rope_scaling(tiny_lm("alibi").model, "ntk", 2.0):
            pass


def test_a_learned_table_refuses_a_longer_context_in_one_line():
    lm = tiny_lm("learned", max_len=32, context=16)
    assert evaluate_context(lm, _text(), 32)["context"] == 32  # up to the table's length
    with pytest.raises(UserError, match=r"model.transformer.max_len=32 .*--context <= 32"):
        evaluate_context(lm, _text(), 33)


# ------------------------------------------------------------------ random-length crops

def test_random_length_batches_are_reproducible_and_share_the_fixed_starts():
    ids = np.arange(5000, dtype=np.int32)
    a = [b.ids for b in RandomWindows(ids, 32, 4, seed=3, epoch=2, min_length=8)]
    b = [b.ids for b in RandomWindows(ids, 32, 4, seed=3, epoch=2, min_length=8)]
    assert len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))
    lengths = [x.shape[1] - 1 for x in a]
    assert min(lengths) >= 8 and max(lengths) <= 32 and len(set(lengths)) > 5
    fixed = [b.ids for b in RandomWindows(ids, 32, 4, seed=3, epoch=2)]
    assert all(torch.equal(x, f[:, : x.shape[1]]) for x, f in zip(a, fixed))  # same starts, cut short
    other = [b.ids for b in RandomWindows(ids, 32, 4, seed=3, epoch=3, min_length=8)]
    assert [x.shape for x in other] != [x.shape for x in a]
    with pytest.raises(UserError, match="min_length"):
        LMDataConfig(context=16, random_length=True, min_length=17)


def test_random_length_run_interrupted_and_resumed_is_bit_exact(tmp_path, monkeypatch):
    data = tmp_path / "t.txt"
    data.write_text(_text(4000))
    argv = ["train", "lm", "--data", str(data), "--set", "data.random_length=true", "--set", "data.min_length=4",
            "--set", "train.save_every=1"] + TINY
    assert main(argv + ["--out", str(tmp_path / "ref")]) == 0
    real, seen = trainer_mod.Trainer._train_step, {"n": 0}

    def step(self, micro):
        seen["n"] += 1
        if seen["n"] == 7:
            raise KeyboardInterrupt
        return real(self, micro)

    monkeypatch.setattr(trainer_mod.Trainer, "_train_step", step)
    assert main(argv + ["--out", str(tmp_path / "run")]) == 130
    monkeypatch.undo()
    assert main(argv + ["--out", str(tmp_path / "run"), "--resume"]) == 0
    ref, got = load_file(tmp_path / "ref" / "model.safetensors"), load_file(tmp_path / "run" / "model.safetensors")
    assert ref.keys() == got.keys() and all(torch.equal(ref[k], got[k]) for k in ref)


# ------------------------------------------------------------------ the CLI

@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("ctx")
    (d / "t.txt").write_text(_text(6000))
    for position in ("rope", "learned"):
        extra = ["--set", "model.transformer.max_len=32"] if position == "learned" else []
        assert main(["train", "lm", "--data", str(d / "t.txt"), "--out", str(d / position),
                     "--set", f"model.transformer.position={position}"] + TINY + extra) == 0
    return d


def test_cli_evaluate_context_writes_buckets_json_and_plot(runs, capsys):
    capsys.readouterr()
    assert main(["evaluate", str(runs / "rope"), "--context", "64"]) == 0
    out = capsys.readouterr().out
    assert "16-32" in out and "32-64" in out and "trained on 16" in out
    saved = json.loads((runs / "rope" / "context_64.json").read_text())
    assert (runs / "rope" / "context_64.png").stat().st_size > 5000
    assert saved["split"] == "valid" and len(saved["buckets"]) == 3
    assert main(["evaluate", str(runs / "rope"), "--context", "64", "--rope-scaling", "ntk", "--max-windows", "3",
                 "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["rope_scaling"] == "ntk" and rep["rope_factor"] == 4.0 and rep["windows"] == 3
    assert "position_loss" not in rep and (runs / "rope" / "context_64_ntk.json").exists()


def test_cli_context_errors_are_one_line(runs, capsys):
    capsys.readouterr()
    for argv, says in ((["evaluate", str(runs / "learned"), "--context", "64"], "max_len=32"),
                       (["evaluate", str(runs / "learned"), "--context", "64", "--rope-scaling", "linear"], "max_len=32"),
                       (["evaluate", str(runs / "learned"), "--context", "32", "--rope-scaling", "linear"], "RoPE models"),
                       (["evaluate", str(runs / "rope"), "--rope-scaling", "ntk"], "go with --context"),
                       (["evaluate", str(runs / "rope"), "--max-len", "64"], "for classification runs")):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and says in err and "\n" not in err


def test_classifier_evaluates_at_a_longer_max_len_and_a_learned_table_refuses(tmp_path, capsys):
    write_reviews_tsv(tmp_path / "train.tsv", 160, 0, words_per_text=(4, 30))
    write_reviews_tsv(tmp_path / "test.tsv", 40, 1, words_per_text=(4, 30))
    base = ["train", "classify", "--data", str(tmp_path / "train.tsv"), "--test", str(tmp_path / "test.tsv"),
            "--set", "data.tokenizer=word", "--set", "data.max_len=8", "--set", "model.encoder.d_model=16",
            "--set", "model.encoder.n_heads=2", "--set", "model.encoder.d_ff=32", "--set", "model.encoder.n_layers=1",
            "--set", "train.epochs=2", "--set", "train.progress=false"]
    assert main(base + ["--out", str(tmp_path / "sin")]) == 0
    assert main(base + ["--out", str(tmp_path / "learned"), "--set", "model.encoder.position=learned",
                        "--set", "model.encoder.max_len=16"]) == 0
    capsys.readouterr()
    assert main(["evaluate", str(tmp_path / "sin"), "--max-len", "32", "--json", "--no-blend"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["max_len"] == 32 and rep["trained_max_len"] == 8
    assert (tmp_path / "sin" / "test_maxlen32_metrics.json").exists()
    assert json.loads((tmp_path / "sin" / "config.json").read_text())["data"]["max_len"] == 8  # run unchanged
    assert main(["evaluate", str(tmp_path / "learned"), "--max-len", "16"]) == 0
    assert main(["evaluate", str(tmp_path / "learned"), "--max-len", "17"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and "16 rows" in err and "--max-len <= 16" in err
    assert main(["evaluate", str(tmp_path / "sin"), "--context", "32"]) == 2
    assert "--max-len" in capsys.readouterr().err
