"""Language model: KV-cache parity, sampling, tied weights, data windows, CLI end to end."""
import json
import random

import numpy as np
import pytest
import torch

from scratchformer.cli import main
from scratchformer.data.tokenizers import BPETokenizer, CharTokenizer, NUM_SPECIALS
from scratchformer.errors import UserError
from scratchformer.models.language_model import DecoderLM, LMConfig
from scratchformer.nn import TransformerConfig
from scratchformer.tasks.lm import (
    LanguageModel, LMDataConfig, LMRecipe, RandomWindows, _IncrementalDecoder, fixed_windows, sample_next)

TINY = ["--set", "model.encoder.d_model=32", "--set", "model.encoder.n_heads=2",
        "--set", "model.encoder.d_ff=64", "--set", "model.encoder.n_layers=2",
        "--set", "data.context=16", "--set", "data.batch_size=8", "--set", "data.eval_windows=20",
        "--set", "train.max_steps=40", "--set", "train.eval_every=20", "--set", "train.lr=3e-3",
        "--set", "train.warmup_steps=5", "--set", "train.log_every=5", "--set", "train.progress=false"]


def tiny_lm(position="rope", vocab=40, max_len=32, context=24, seed=0) -> LanguageModel:
    torch.manual_seed(seed)
    enc = TransformerConfig(d_model=32, n_heads=4, d_ff=64, n_layers=2, dropout=0.0, activation="gelu",
                            position=position, max_len=max_len)
    cfg = LMConfig(vocab_size=vocab, transformer=enc)
    tok = CharTokenizer(["<pad>", "<unk>", "<bos>", "<eos>", "<cls>"] + [chr(97 + i) for i in range(vocab - NUM_SPECIALS)])
    recipe = LMRecipe(data=LMDataConfig(context=context), model=cfg)
    return LanguageModel(DecoderLM(cfg), tok, recipe)


@pytest.mark.parametrize("position", ["rope", "learned", "sinusoidal", "alibi"])
def test_cached_logits_equal_full_forward(position):
    lm = tiny_lm(position)
    model = lm.model
    ids = torch.randint(NUM_SPECIALS, 40, (2, 20))
    with torch.no_grad():
        full = model(ids)  # (B, T, V)
        caches = model.new_caches()
        steps = [model(ids[:, :7], caches)] + [model(ids[:, t : t + 1], caches) for t in range(7, 20)]
    assert caches[0].length == 20
    assert (torch.cat(steps, 1) - full).abs().max() < 1e-5


@pytest.mark.parametrize("position", ["rope", "learned"])
def test_cached_greedy_equals_uncached_greedy(position):
    lm = tiny_lm(position, context=32)
    prompt = lm.tokenizer.encode("abcab")
    cached = lm.generate_ids(prompt, 27, temperature=0, use_cache=True)
    uncached = lm.generate_ids(prompt, 27, temperature=0, use_cache=False)
    assert len(cached) == 27 and cached == uncached
    assert min(cached) >= NUM_SPECIALS  # specials are never generated


def test_generation_beyond_the_window_crops_and_continues():
    lm = tiny_lm("learned", max_len=16, context=16)
    prompt = lm.tokenizer.encode("abc" * 10)  # longer than the window: the last 16 are used
    for use_cache in (True, False):
        out = lm.generate_ids(prompt, 40, temperature=0, use_cache=use_cache)
        assert len(out) == 40
    with pytest.raises(UserError, match="max_len=16"):
        lm.generate_ids(prompt, 1, window=17)
    rope = tiny_lm("rope", context=16)
    assert len(rope.generate_ids(prompt, 40, temperature=0, window=64)) == 40  # no hard limit


def test_top_k_1_is_greedy_and_seeded_sampling_is_reproducible():
    lm = tiny_lm()
    prompt = lm.tokenizer.encode("abc")
    greedy = lm.generate_ids(prompt, 15, temperature=0)
    assert lm.generate_ids(prompt, 15, temperature=1.0, top_k=1, seed=3) == greedy
    assert lm.generate_ids(prompt, 15, temperature=0.9, top_p=1e-6, seed=4) == greedy  # nucleus of one
    a = lm.generate_ids(prompt, 30, temperature=1.5, top_k=20, top_p=0.95, seed=7)
    b = lm.generate_ids(prompt, 30, temperature=1.5, top_k=20, top_p=0.95, seed=7)
    c = lm.generate_ids(prompt, 30, temperature=1.5, top_k=20, top_p=0.95, seed=8)
    assert a == b and a != c
    assert lm.generate_ids(prompt, 30, temperature=1.5, seed=7, use_cache=False) == \
        lm.generate_ids(prompt, 30, temperature=1.5, seed=7, use_cache=True)


def test_sample_next_filters():
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    g = torch.Generator().manual_seed(0)
    picks = {int(sample_next(logits, 1.0, top_k=2, generator=g)) for _ in range(200)}
    assert picks == {2, 3}
    # top_p=0.7: p(3)=0.64 < 0.7, so token 2 (0.24) is needed too; tokens 0, 1 are cut
    picks = {int(sample_next(logits, 1.0, top_p=0.7, generator=g)) for _ in range(200)}
    assert picks == {2, 3}
    for bad in (dict(temperature=-1.0), dict(top_k=0), dict(top_p=0.0), dict(top_p=1.5)):
        with pytest.raises(UserError):
            sample_next(logits, **{"temperature": 1.0, **bad})


def test_stream_pieces_join_to_the_result():
    lm = tiny_lm()
    pieces = []
    text = lm.generate("abc", 12, temperature=0.8, seed=1, stream=pieces.append)
    assert "".join(pieces) == text and len(text) == 12
    with pytest.raises(UserError, match="prompt is empty"):
        lm.generate("", 5)
    notes = []
    lm.generate("ab\u0416", 3, warn=notes.append)
    assert "<unk>" in notes[0] and "\u0416" in notes[0]


def test_incremental_decoding_of_byte_level_bpe():
    text = "三国演义 héllo wörld\n曹操 said: 'ja'\n"
    tok = BPETokenizer.train([text] * 3, vocab_size=300)
    ids = tok.encode(text)
    dec = _IncrementalDecoder(tok)
    pieces = [dec.push(i) for i in ids] + [dec.flush()]
    assert "".join(pieces) == text
    assert "\ufffd" not in "".join(pieces[:-1])


def test_random_windows_are_deterministic_in_seed_and_epoch():
    ids = np.arange(1000, dtype=np.int32)
    a = [b.ids for b in RandomWindows(ids, 16, 4, seed=0, epoch=1)]
    b = [b.ids for b in RandomWindows(ids, 16, 4, seed=0, epoch=1)]
    c = [b.ids for b in RandomWindows(ids, 16, 4, seed=0, epoch=2)]
    assert len(a) == 1000 // 16 // 4 and a[0].shape == (4, 17)
    assert all(torch.equal(x, y) for x, y in zip(a, b)) and not torch.equal(a[0], c[0])
    assert torch.equal(a[0][:, 1:], a[0][:, :-1] + 1)  # contiguous windows
    val = fixed_windows(ids, 16, 5)
    starts = torch.cat([v.ids[:, 0] for v in val])
    assert len(starts) == 999 // 16 and torch.equal(starts, torch.arange(len(starts)) * 16)
    assert sum(len(v.ids) for v in fixed_windows(ids, 16, 5, limit=7)) == 7


def test_random_windows_of_a_big_text_hold_no_table_of_starts():
    """An epoch of a 1 GB text has ~15M windows: batches are made one at a time from their own
    generator (no (n_batches, B) table of starts), batch b equals the b-th batch iterated, and
    the thinned validation windows are chosen without listing every window first."""
    import tracemalloc

    ids = np.zeros(40_000_000, dtype=np.uint16)  # 40M tokens: a table of starts would be 5 MB+
    win = RandomWindows(ids, 8, 4, seed=3, epoch=0)
    assert len(win) == 1_250_000
    tracemalloc.start()
    it = iter(win)
    first = [next(it).ids for _ in range(3)]
    fixed = fixed_windows(ids, 8, 4, limit=12)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 1_000_000, peak
    assert all(torch.equal(win.batch(b).ids, first[b]) for b in range(3))
    assert sum(len(v.ids) for v in fixed) == 12
    starts = [RandomWindows(np.arange(1000, dtype=np.int32), 16, 4, seed=0, epoch=1, min_length=l).batch(2).ids[:, 0]
              for l in (None, 4)]
    assert torch.equal(starts[0], starts[1])  # random-length crops keep the fixed-length starts


def _write_text(path, n_lines=400, seed=0):
    rng = random.Random(seed)
    names = ["ROMEO", "JULIET", "NURSE"]
    words = ["love", "night", "the", "sweet", "my", "lord", "and", "is", "fair", "day"]
    lines = []
    for _ in range(n_lines):
        lines.append(f"{rng.choice(names)}:")
        lines.append(" ".join(rng.choice(words) for _ in range(rng.randint(3, 7))) + ".")
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("lm")
    _write_text(d / "plays.txt")
    out = d / "run"
    rc = main(["train", "lm", "--data", str(d / "plays.txt"), "--out", str(out)] + TINY)
    assert rc == 0
    return d, out


def test_train_writes_a_run_and_the_loss_decreases(run):
    _, out = run
    for name in ("config.json", "tokenizer.json", "model.safetensors", "metrics.jsonl", "valid_metrics.json"):
        assert (out / name).exists(), name
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r["loss"] for r in rows if r["split"] == "train"]
    valid = [r for r in rows if r["split"] == "valid"]
    assert train[-1] < train[0] - 1.0  # from ~ln(vocab) towards the text's entropy
    assert {"loss", "perplexity", "bpc"} <= set(valid[-1])
    full = json.loads((out / "valid_metrics.json").read_text())
    assert abs(full["perplexity"] - np.exp(full["loss"])) < 1e-6 * full["perplexity"]
    assert abs(full["bpc"] - full["loss"] / np.log(2)) < 1e-9  # char level: a token is a character


def test_tied_weights_stay_tied_after_save_and_load(run):
    _, out = run
    lm = LanguageModel.load(out)
    m = lm.model
    assert m.head.weight is m.embed.tokens.weight
    with torch.no_grad():
        m.embed.tokens.weight[7, 0] += 1.0
    assert m.head.weight[7, 0] == m.embed.tokens.weight[7, 0]
    assert len(lm.model.state_dict()) == len(LanguageModel.load(out).model.state_dict())


def test_cli_generate_and_evaluate(run, capsys):
    d, out = run
    capsys.readouterr()
    # 6 + 10 tokens fit the context of 16: the cached and uncached paths give the same tokens
    assert main(["generate", str(out), "--prompt", "ROMEO:", "--max-new-tokens", "10", "--seed", "0"]) == 0
    first = capsys.readouterr()
    assert first.out.startswith("ROMEO:") and len(first.out) == 17 and "tokens/s" in first.err
    assert main(["generate", str(out), "--prompt", "ROMEO:", "--max-new-tokens", "10", "--seed", "0",
                 "--no-cache"]) == 0
    assert capsys.readouterr().out == first.out
    assert main(["generate", str(out), "--prompt", "ROMEO:", "--max-new-tokens", "100"]) == 0  # crops
    assert len(capsys.readouterr().out) >= 106
    assert main(["generate", str(out), "--prompt", "JULIET", "--max-new-tokens", "40",
                 "--temperature", "0", "--no-echo"]) == 0
    greedy = capsys.readouterr().out
    assert main(["generate", str(out), "--prompt", "JULIET", "--max-new-tokens", "40",
                 "--top-k", "1", "--no-echo", "--seed", "5"]) == 0
    assert capsys.readouterr().out == greedy
    assert main(["evaluate", str(out), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    saved = json.loads((out / "valid_metrics.json").read_text())
    assert rep["split"] == "valid" and abs(rep["loss"] - saved["loss"]) < 1e-4
    assert main(["evaluate", str(out), "--data", str(d / "plays.txt")]) == 0
    assert "perplexity" in capsys.readouterr().out
    assert main(["evaluate", str(out), "--split", "train", "--json"]) == 0
    rep_train = json.loads(capsys.readouterr().out)
    assert rep_train["split"] == "train" and rep_train["tokens"] <= rep["tokens"] + 16


def test_cli_errors_are_one_line(run, tmp_path, capsys):
    _, out = run
    capsys.readouterr()
    for extra in (["--prompt", ""], ["--prompt", "x", "--top-p", "1.5"], ["--prompt", "x", "--temperature", "-1"]):
        assert main(["generate", str(out), "--max-new-tokens", "3"] + extra) == 2
        res = capsys.readouterr()
        assert res.err.startswith("error: ") and "Traceback" not in res.err and res.out == ""
    assert main(["generate", str(out), "--prompt", "\u0416\u0416 ROMEO", "--max-new-tokens", "3"]) == 0
    assert "<unk>" in capsys.readouterr().err
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    assert main(["train", "lm", "--data", str(empty), "--out", str(tmp_path / "r")] + TINY) == 2
    assert "empty" in capsys.readouterr().err
    assert main(["train", "lm", "--data", "thucnews", "--out", str(tmp_path / "r")] + TINY) == 2
    assert "not a text corpus" in capsys.readouterr().err
    assert main(["generate", str(tmp_path / "nothing"), "--prompt", "a"]) == 2


def test_bpe_run_reports_bits_per_character(tmp_path, capsys):
    _write_text(tmp_path / "plays.txt", n_lines=300, seed=1)
    out = tmp_path / "bpe"
    args = ["train", "lm", "--data", str(tmp_path / "plays.txt"), "--out", str(out),
            "--set", "data.tokenizer=bpe", "--set", "data.vocab_size=300"] + TINY + ["--set", "train.max_steps=10"]
    assert main(args) == 0
    full = json.loads((out / "valid_metrics.json").read_text())
    assert full["bpc"] < full["loss"] / np.log(2)  # a BPE token spans more than one character
    lm = LanguageModel.load(out)
    assert lm.tokenizer.kind == "bpe"
    text = lm.generate("ROMEO:", 8, seed=0)
    assert len(lm.tokenizer.encode(text)) >= 1


def test_resume_of_a_finished_run_keeps_its_weights(run, capsys):
    _, out = run
    before = (out / "model.safetensors").read_bytes()
    assert main(["train", "lm", "--out", str(out), "--resume"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["best_step"] == 40
    assert (out / "model.safetensors").read_bytes() == before
