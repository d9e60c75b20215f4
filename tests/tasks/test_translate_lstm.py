"""The recurrent translator (`model.kind=lstm`): shapes, source padding never attended, the
decoder state stepped by the one search equal to the whole-sequence decode, beam 1 = greedy,
resume = uninterrupted, and train + translate + evaluate from the CLI like the Transformer."""
import json

import pytest
import torch

from toy_data import upper_case_pairs, write_pairs

from scratchformer.cli import main
from scratchformer.data.tokenizers import BOS_ID, PAD_ID
from scratchformer.errors import UserError
from scratchformer.models.rnn_seq2seq import LSTMDecoderState, LSTMSeq2Seq
from scratchformer.models.seq2seq import Seq2Seq, Seq2SeqConfig, build_seq2seq
from scratchformer.nn import TransformerConfig
from scratchformer.tasks.translate import TranslateRecipe, Translator, pipeline, task as task_module
from scratchformer.tasks.translate.decoding import DecodeConfig, beam_search, greedy_decode

WORDS = "ab cd ef gh ij kl mn op qr st".split()
TINY = ["--set", "model.kind=lstm", "--set", "model.transformer.d_model=48", "--set", "model.transformer.n_layers=1",
        "--set", "model.transformer.n_decoder_layers=1", "--set", "model.transformer.dropout=0.0",
        "--set", "data.src_tokenizer=word", "--set", "data.tgt_tokenizer=word", "--set", "data.max_tokens=300",
        "--set", "train.epochs=20", "--set", "train.lr=1e-2", "--set", "train.warmup_steps=20",
        "--set", "train.progress=false", "--set", "average_last=1", "--set", "decode.beam=3"]


def _model(seed=0, vocab=23, layers=2, dropout=0.0):
    torch.manual_seed(seed)
    tc = TransformerConfig(d_model=16, n_heads=2, d_ff=32, n_layers=layers, n_decoder_layers=layers, dropout=dropout)
    return build_seq2seq(Seq2SeqConfig(kind="lstm", src_vocab_size=vocab, tgt_vocab_size=vocab + 2, transformer=tc))


def _sources(seed=0, vocab=23):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(5, vocab, (5, 9), generator=g)
    for row, n in enumerate([9, 4, 7, 1, 6]):  # right padding, lengths differ
        src[row, n:] = PAD_ID
    return src


def test_kind_builds_the_lstm_and_shapes_are_the_transformers():
    model = _model().eval()
    assert isinstance(model, LSTMSeq2Seq)
    assert isinstance(build_seq2seq(model.cfg.replace(kind="transformer")), Seq2Seq)
    src, tgt = _sources(), torch.randint(5, 25, (5, 7))
    memory, mask = model.encode(src)
    assert memory.shape == (5, 9, 16) and mask.shape == (5, 9) and torch.equal(mask, src != PAD_ID)
    assert model(src, tgt).shape == (5, 7, 25)
    logits, weights = model.decode(tgt, memory, mask, need_weights=True)
    assert logits.shape == (5, 7, 25) and len(weights) == 1 and weights[0][0] is None
    assert weights[0][1].shape == (5, 1, 7, 9)  # (B, one head, T, S): what `align` draws


@torch.no_grad()
def test_source_padding_is_never_attended_and_does_not_change_a_row():
    model = _model().eval()
    src = _sources()
    tgt = torch.randint(5, 25, (5, 6))
    memory, mask = model.encode(src)
    _, [(_, w)] = model.decode(tgt, memory, mask, need_weights=True)
    assert float(w[:, 0][~mask[:, None, :].expand(-1, 6, -1)].abs().max()) == 0.0  # exactly zero on padding
    torch.testing.assert_close(w.sum(-1), torch.ones(5, 1, 6))
    assert float(memory[~mask].abs().max()) == 0.0
    for row in range(5):  # each sentence alone, unpadded: the same logits as in the padded batch
        n = int(mask[row].sum())
        alone = model(src[row:row + 1, :n], tgt[row:row + 1])
        torch.testing.assert_close(alone[0], model(src, tgt)[row], atol=1e-5, rtol=1e-5)


def test_stepping_the_decoder_state_equals_the_whole_sequence_decode():
    model = _model().eval()
    src, tgt = _sources(), torch.randint(5, 25, (5, 7))
    memory, mask = model.encode(src)
    whole = model.decode(tgt, memory, mask)
    state = model.new_cache(capacity=7)
    steps = [model.decode(tgt[:, t:t + 1], memory, mask, cache=state) for t in range(7)]
    assert state.length == 7
    torch.testing.assert_close(torch.cat(steps, 1), whole, atol=1e-6, rtol=1e-6)
    state.reorder(torch.tensor([4, 0]))  # beams reordered, sentences leaving: every tensor follows its rows
    assert state.h.shape == (2, 2, 16) and state.c.shape == (2, 2, 16) and state.keys.shape == (2, 9, 16)
    assert LSTMDecoderState().length == 0


@pytest.mark.parametrize("beam", [1, 3])
def test_search_with_the_state_equals_the_search_without_it(beam):
    # use_cache=False re-runs `decode` over the whole prefix at every step: the reference
    model = _model(1).eval()
    src = _sources(1)
    cfg = DecodeConfig(beam=beam, max_output_len=10, early_stop=False)
    with_state = beam_search(model, src, cfg)
    without = beam_search(model, src, cfg.replace(use_cache=False))
    assert [h.tokens for h in with_state] == [h.tokens for h in without]
    for a, b in zip(with_state, without):
        assert a.score == pytest.approx(b.score, abs=1e-4)


def test_beam_one_equals_greedy():
    model = _model(2).eval()
    src = _sources(2)
    greedy = greedy_decode(model, src, DecodeConfig(beam=1, max_output_len=12))
    beam1 = beam_search(model, src, DecodeConfig(beam=1, max_output_len=12, length_penalty=0.0))
    assert [h.tokens for h in greedy] == [h.tokens for h in beam1]
    assert [h.finished for h in greedy] == [h.finished for h in beam1]
    for g, b in zip(greedy, beam1):
        assert g.score == pytest.approx(b.score, abs=1e-9)


def test_bad_lstm_settings_are_one_line_errors():
    with pytest.raises(UserError, match="model.kind 'gru' is unknown; choose one of transformer, lstm"):
        Seq2SeqConfig(kind="gru")
    with pytest.raises(UserError, match="trains from scratch"):
        Seq2SeqConfig(kind="lstm", init="e5")
    with pytest.raises(UserError, match="make it even"):
        Seq2SeqConfig(kind="lstm", transformer=TransformerConfig(d_model=15, n_heads=1))
    with pytest.raises(UserError, match="gradient checkpointing is for the Transformer"):
        _model().set_gradient_checkpointing(True)


def _recipe(d, **train):
    return TranslateRecipe.from_dict({
        "data": {"dataset": str(d / "train.tsv"), "valid_file": str(d / "valid.tsv"),
                 "src_tokenizer": "word", "tgt_tokenizer": "word", "max_tokens": 200},
        "model": {"kind": "lstm", "transformer": {"d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32,
                                                  "dropout": 0.1}},
        "train": {"max_steps": 14, "save_every": 7, "eval_every": 7, "lr": 3e-3, "warmup_steps": 5,
                  "progress": False, **train},
        "average_last": 1, "decode": {"beam": 1}})


def test_resume_equals_uninterrupted(tmp_path, monkeypatch):
    write_pairs(tmp_path / "train.tsv", upper_case_pairs(120, 0, WORDS, 5))
    write_pairs(tmp_path / "valid.tsv", upper_case_pairs(10, 1, WORDS, 5))
    straight = tmp_path / "straight"
    pipeline.train_translator(_recipe(tmp_path), straight, log=lambda m: None)
    original = task_module.TranslationTask.after_step

    def crash_at_10(self, step, total):
        original(self, step, total)
        if step == 10:
            raise KeyboardInterrupt  # killed after step 10; the checkpoint is step 7's

    monkeypatch.setattr(task_module.TranslationTask, "after_step", crash_at_10)
    resumed = tmp_path / "resumed"
    with pytest.raises(KeyboardInterrupt):
        pipeline.train_translator(_recipe(tmp_path), resumed, log=lambda m: None)
    monkeypatch.setattr(task_module.TranslationTask, "after_step", original)
    pipeline.train_translator(_recipe(tmp_path), resumed, resume=True, log=lambda m: None)
    a, b = Translator.load(straight).model.state_dict(), Translator.load(resumed).model.state_dict()
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("mt-lstm")
    write_pairs(d / "train.tsv", upper_case_pairs(600, 0, WORDS, 6))
    write_pairs(d / "valid.tsv", upper_case_pairs(40, 1, WORDS, 6))
    write_pairs(d / "test.tsv", upper_case_pairs(40, 2, WORDS, 6))
    out = d / "run"
    assert main(["train", "translate", "--data", str(d / "train.tsv"), "--valid", str(d / "valid.tsv"),
                 "--test", str(d / "test.tsv"), "--out", str(out)] + TINY) == 0
    return d, out


def test_cli_trains_translates_and_evaluates_an_lstm_run(run, capsys):
    d, out = run
    capsys.readouterr()
    assert json.loads((out / "config.json").read_text())["model"]["kind"] == "lstm"
    assert json.loads((out / "test_metrics.json").read_text())["bleu"] > 90  # upper-casing, learned
    tr = Translator.load(out)
    assert isinstance(tr.model, LSTMSeq2Seq)
    assert main(["translate", str(out), "ab cd ef", "--beam", "3"]) == 0
    assert capsys.readouterr().out.strip() == "AB CD EF"
    assert main(["evaluate", str(out), "--data", str(d / "test.tsv"), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["n"] == 40 and rep["bleu"] > 90
    h = tr.hypotheses(["ab cd"])[0]
    assert h.precision == "fp32" and "LSTM" in h.precision_reason


def test_attention_says_in_one_line_and_align_draws_the_additive_weights(run, capsys, tmp_path):
    _, out = run
    assert main(["align", str(out), "ab cd", "--out", str(tmp_path / "a.png")]) == 0
    assert (tmp_path / "a.png").stat().st_size > 0
    capsys.readouterr()
    assert main(["attention", str(out), "ab cd"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "an LSTM translator has no self-attention" in err and "\n" not in err


def test_export_refuses_an_lstm_run_in_one_line(run, tmp_path, capsys):
    _, out = run
    assert main(["export", str(out), "--format", "transformers", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.strip()
    assert "model.kind=lstm" in err and "\n" not in err


def test_ensemble_of_lstm_members_decodes_through_the_same_search(run):
    _, out = run
    tr = Translator.load(out, ensemble=[out])  # the same member twice: the mean of equal probabilities
    assert tr.translate(["ab cd ef"], beam=2) == Translator.load(out).translate(["ab cd ef"], beam=2)
    assert BOS_ID not in tr.hypotheses(["ab"])[0].tokens


def test_sentence_scores_are_sacrebleus_sentence_bleu_and_chrf_worst_first():
    import sacrebleu

    from scratchformer.tasks.translate.task import sentence_scores

    srcs, refs = ["a", "b", "c"], ["the cat sat on the mat", "hello there", "go ."]
    hyps = ["the cat sat on a mat", "goodbye", "go ."]
    rep = sentence_scores(srcs, hyps, refs, sort="bleu")
    assert [r["i"] for r in rep["sentences"]] == [2, 1, 3]  # worst first
    for r in rep["sentences"]:
        assert r["bleu"] == pytest.approx(sacrebleu.sentence_bleu(r["hypothesis"], [r["reference"]]).score)
        assert r["chrf"] == pytest.approx(sacrebleu.sentence_chrf(r["hypothesis"], [r["reference"]]).score)
    assert rep["sentences"][2]["bleu"] == pytest.approx(100.0) and 0 < rep["sentences"][1]["bleu"] < 100  # smoothed, not 0
    assert "smooth:exp" in rep["sentence_bleu_signature"] and "eff:yes" in rep["sentence_bleu_signature"]
    assert [r["i"] for r in sentence_scores(srcs, hyps, refs)["sentences"]] == [1, 2, 3]
    with pytest.raises(UserError, match="--sort 'meteor': choose one of input, bleu, chrf"):
        sentence_scores(srcs, hyps, refs, sort="meteor")


def test_evaluate_per_sentence_prints_and_returns_each_sentence(run, capsys):
    d, out = run
    capsys.readouterr()
    assert main(["evaluate", str(out), "--data", str(d / "test.tsv"), "--per-sentence", "--sort", "chrf", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    rows = rep["sentences"]
    assert len(rows) == 40 and rep["sorted_by"] == "chrf"
    assert [r["chrf"] for r in rows] == sorted(r["chrf"] for r in rows)
    assert {r["i"] for r in rows} == set(range(1, 41))
    pairs = [line.split("\t") for line in (d / "test.tsv").read_text().splitlines()]
    assert all([r["source"], r["reference"]] == pairs[r["i"] - 1] for r in rows)
    assert main(["evaluate", str(out), "--data", str(d / "test.tsv"), "--per-sentence", "--sort", "bleu"]) == 0
    text = capsys.readouterr().out
    assert "per sentence (worst first by bleu; sentence BLEU nrefs:1|case:mixed|eff:yes|tok:13a|smooth:exp" in text
    assert text.count("  hypothesis: ") == 40 and text.count("  reference:  ") == 40


# ---------------------------------------------------------------------------- devices
def test_every_device_torch_knows_is_accepted_and_an_absent_one_is_one_line(tmp_path, capsys):
    from scratchformer.train import TrainConfig
    from scratchformer.train.device import available_devices, check_available, parse_device, resolve_precision

    for name in ("cpu", "cuda", "cuda:1", "mps", "xpu", "xpu:0"):
        assert TrainConfig(device=name).device == name  # a recipe names any device; where it runs is checked later
    with pytest.raises(UserError, match=r"train.device='gpu' is not a device torch knows; use cpu, cuda, cuda:N, mps or xpu"):
        TrainConfig(device="gpu")
    assert available_devices()[0] == "cpu" and check_available(parse_device("cpu"), "cpu").type == "cpu"
    if not torch.backends.mps.is_available():
        with pytest.raises(UserError, match=r"^device 'mps' is not available here; available: cpu"):
            check_available(parse_device("mps"), "mps")
        write_pairs(tmp_path / "train.tsv", upper_case_pairs(20, 0, WORDS, 3))
        assert main(["train", "translate", "--data", str(tmp_path / "train.tsv"), "--out", str(tmp_path / "r"),
                     "--set", "train.device=mps"]) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"error: device 'mps' is not available here; available: {', '.join(available_devices())}"
    # mixed precision: the dtype each device supports
    assert resolve_precision("auto", torch.device("mps"))[0] == "fp16"
    assert resolve_precision("auto", torch.device("xpu"))[0] == "bf16"
    assert resolve_precision("fp32", torch.device("mps")) == ("fp32", None)


def test_inference_device_flag(run, capsys):
    d, out = run
    assert main(["translate", str(out), "ab cd", "--device", "cpu"]) == 0
    assert capsys.readouterr().out.strip() == "AB CD"
    if not torch.cuda.is_available():
        assert main(["evaluate", str(out), "--data", str(d / "test.tsv"), "--device", "cuda:0"]) == 2
        assert capsys.readouterr().err.strip().startswith("error: device 'cuda:0' is not available here; available: cpu")
    assert main(["translate", str(out), "ab", "--device", "tpu"]) == 2
    assert "is not a device torch knows" in capsys.readouterr().err


@pytest.mark.parametrize("share,tie,layers", [(False, True, 1), (True, False, 3)])
def test_params_closed_form_counts_the_lstm_translator(share, tie, layers):
    from scratchformer.experiments.params import closed_form, count_tensors

    tc = TransformerConfig(d_model=12, n_heads=2, d_ff=16, n_layers=2, n_decoder_layers=layers)
    cfg = Seq2SeqConfig(kind="lstm", src_vocab_size=30, tgt_vocab_size=30 if share else 40, transformer=tc,
                        share_embeddings=share, tie_output=tie, src_bigram_buckets=0 if share else 8)
    model = build_seq2seq(cfg)
    counted = count_tensors({k: list(p.shape) for k, p in model.named_parameters()})  # shared and tied: once
    terms = closed_form({"task": "translate", "model": cfg.to_dict()})
    assert {k: v for k, v in counted.items() if v} == {k: t.value for k, t in terms.items()}
    assert terms["cross-attention"].value == sum(p.numel() for p in model.attention.parameters())


# ---------------------------------------------------------------------------- experiment transformer-vs-lstm
def test_experiment_options_are_one_line_errors(tmp_path, capsys):
    for extra, msg in ((["--set", "minutes=soon"], "transformer-vs-lstm takes --set minutes=M (minutes per run, > 0)"),
                       (["--set", "train.lr=1"], "transformer-vs-lstm takes --set minutes=M"),
                       (["--data", "de-en"], "--data de-en: transformer-vs-lstm runs on hsk-zh-en, en-fr; got de-en"),
                       (["--grid", "a=1,2"], "transformer-vs-lstm takes no --grid")):
        assert main(["experiment", "transformer-vs-lstm", "--out", str(tmp_path / "x")] + extra) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error: ") and msg in err and "\n" not in err


def test_experiment_measures_time_to_level_and_length_thirds():
    from scratchformer.experiments.transformer_vs_lstm import length_thirds, time_to_reach

    assert time_to_reach([(10.0, 0.5), (20.0, 2.0), (30.0, 3.0)], 2.0) == 20.0
    assert time_to_reach([(10.0, 0.5)], 2.0) != time_to_reach([(10.0, 0.5)], 2.0)  # NaN: never reached
    srcs = ["a", "a b c d e f", "a b", "a b c", "a b c d e", "a b c d"]
    refs = ["x y z w v"] * 6
    hyps = ["x y z w v", "q", "x y z w v", "x y z w v", "q", "q"]  # right on the short ones, wrong on the long ones
    thirds = length_thirds(srcs, hyps, refs, lambda s: len(s.split()))
    assert thirds["bleu_short"] == pytest.approx(100.0) and thirds["bleu_long"] == 0.0
    assert 0.0 < thirds["bleu_medium"] < 100.0  # one right ("a b c"), one wrong ("a b c d")


def test_other_tasks_refuse_the_translation_only_evaluate_flags():
    from argparse import Namespace

    from scratchformer.tasks.cli_args import refuse_translation_flags  # commands.common hands it on too

    refuse_translation_flags(Namespace(per_sentence=False, sort=None, device="cpu"), "classification")  # nothing asked
    with pytest.raises(UserError, match="^--per-sentence and --sort are for translation runs .*this is a classification run$"):
        refuse_translation_flags(Namespace(per_sentence=True, sort=None, device=None), "classification")
    with pytest.raises(UserError, match="^--device cuda: language-model runs evaluate on the CPU so far"):
        refuse_translation_flags(Namespace(per_sentence=False, sort=None, device="cuda"), "language-model")


@pytest.mark.parametrize("task, noun", [("classify", "classification"), ("lm", "language-model")])
def test_evaluate_of_another_task_refuses_them_from_its_face(task, noun, tmp_path, capsys):
    # the translate face puts the flags on the `evaluate` parser all tasks share; the run's own face
    # (tasks/<task>/cli.py) refuses them before it loads anything (a config.json naming the task is enough)
    run = tmp_path / task
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"task": task}))
    assert main(["evaluate", str(run), "--sort", "bleu"]) == 2
    assert capsys.readouterr().err.strip() == (f"error: --per-sentence and --sort are for translation runs "
                                               f"(sentence BLEU); this is a {noun} run")
    assert main(["evaluate", str(run), "--device", "cuda:1"]) == 2
    assert capsys.readouterr().err.strip() == (f"error: --device cuda:1: {noun} runs evaluate on the CPU so far "
                                               "(translation runs take --device)")
