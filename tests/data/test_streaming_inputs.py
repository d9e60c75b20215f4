"""`predict --file`, `embed --file`: a file streams in blocks with the output of one call on all of it."""
import io
import json

import numpy as np
import pytest
import torch

from scratchformer.cli import main
from scratchformer.commands import common, embed as embed_cmd
from scratchformer.commands.common import read_inputs, stream_inputs
from scratchformer.errors import UserError


def test_stream_inputs_gives_read_inputs_lines_and_errors(tmp_path):
    f = tmp_path / "in.txt"
    f.write_bytes(b"\xef\xbb\xbf first\r\nsecond\rthird\x0bfourth\n\n  \n" + "fifth\u2028sixth\u2028seventh\n".encode("utf-8"))
    assert list(stream_inputs([], str(f))) == read_inputs([], str(f))
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\n\xef\xbb\n")
    with pytest.raises(UserError) as a:
        list(stream_inputs([], str(bad)))
    with pytest.raises(UserError) as b:
        read_inputs([], str(bad))
    assert str(a.value) == str(b.value)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n")
    with pytest.raises(UserError, match="no non-empty input lines"):
        list(stream_inputs([], str(empty)))


class _Tok:
    model_max_length = 512

    def with_prefix(self, prefix):
        return self


class _Model:
    """An embedder whose vector of a text depends on the text alone."""

    def __init__(self):
        self.calls = []

    def embed(self, texts, tok, batch_size=32, max_length=None):
        self.calls.append(len(texts))
        return torch.tensor([[float(len(t)), float(sum(map(ord, t)) % 97), 1.0] for t in texts])


def test_embed_file_streams_in_blocks_into_the_same_files(tmp_path, monkeypatch, capsys):
    model = _Model()
    monkeypatch.setattr(embed_cmd, "_load", lambda name, *compute: (model, _Tok()))
    monkeypatch.setattr(embed_cmd, "STREAM_BLOCK", 4)
    texts = [f"line {i} " + "x" * (i % 5) for i in range(11)]
    f = tmp_path / "in.txt"
    f.write_text("\n".join(texts) + "\n", encoding="utf-8")
    want = model.embed(["head"] + texts, None).numpy().astype(np.float32)
    model.calls.clear()
    assert main(["embed", "head", "--file", str(f), "--out", str(tmp_path / "v.npy"), "--model", "stub"]) == 0
    assert model.calls == [4, 4, 4]  # streamed
    buf = io.BytesIO()
    np.save(buf, want)
    assert (tmp_path / "v.npy").read_bytes() == buf.getvalue()
    assert main(["embed", "head", "--file", str(f), "--out", str(tmp_path / "v.jsonl"), "--model", "stub"]) == 0
    rows = [json.loads(x) for x in (tmp_path / "v.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["text"] for r in rows] == ["head"] + texts and np.allclose([r["embedding"] for r in rows], want)
    capsys.readouterr()
    assert main(["embed", "--file", str(f), "--model", "stub"]) == 0
    assert [json.loads(x)["text"] for x in capsys.readouterr().out.splitlines()] == texts
    assert main(["embed", "--file", str(tmp_path / "missing.txt"), "--model", "stub"]) == 2


# ----------------------------------------------------------------------------- translate --file
def _random_translator(max_input_len=8):
    """A translator with random weights (no training): deterministic outputs of every length."""
    from scratchformer.data.tokenizers import build_tokenizer
    from scratchformer.models.seq2seq import Seq2Seq, Seq2SeqConfig
    from scratchformer.nn import TransformerConfig
    from scratchformer.tasks.translate import TranslateRecipe, Translator
    from scratchformer.tasks.translate.decoding import DecodeConfig

    tok = build_tokenizer("word", ["ab cd ef gh ij kl mn op"])
    torch.manual_seed(0)
    model = Seq2Seq(Seq2SeqConfig(src_vocab_size=tok.vocab_size, tgt_vocab_size=tok.vocab_size,
                                  transformer=TransformerConfig(d_model=32, n_heads=4, d_ff=64, n_layers=1, dropout=0.0)))
    recipe = TranslateRecipe(decode=DecodeConfig(beam=2, max_input_len=max_input_len, max_output_len=6))
    return Translator(model, tok, tok, recipe, "float32")


@pytest.fixture
def streamed_translate(monkeypatch, capsys):
    """`translate` on a random translator with blocks of 4 sentences: (the translator, `passes`:
    the lines each read of the input gave, `calls`: per `hypotheses` call its sentences, the lines
    the current read had given and the lines printed before it, `output()`: stdout and stderr so
    far, emptied)."""
    from scratchformer.commands import translate as translate_cmd
    from scratchformer.tasks.translate import Translator

    tr = _random_translator()
    monkeypatch.setattr(Translator, "load", classmethod(lambda cls, *a, **k: tr))
    monkeypatch.setattr(translate_cmd, "STREAM_BLOCK", 4)
    passes, calls, out, err = [], [], [], []

    def output() -> tuple[str, str]:
        cap = capsys.readouterr()
        both = "".join(out) + cap.out, "".join(err) + cap.err
        out.clear()
        err.clear()
        return both

    def recording(texts, file):
        passes.append(0)
        for line in stream_inputs(texts, file):
            passes[-1] += 1
            yield line
    monkeypatch.setattr(translate_cmd, "stream_inputs", recording)
    real = Translator.hypotheses

    def spy(self, texts, **kw):
        cap = capsys.readouterr()
        out.append(cap.out)
        err.append(cap.err)
        calls.append((len(texts), passes[-1] if passes else None, "".join(out).count("\n")))
        return real(self, texts, **kw)
    monkeypatch.setattr(Translator, "hypotheses", spy)
    return tr, passes, calls, output


SENTENCES = [" ".join("ab cd ef gh ij kl mn op".split()[(i * 3) % 8:][: 1 + i % 6]) for i in range(11)]


def test_translate_file_streams_in_blocks_with_the_output_of_one_call(tmp_path, streamed_translate):
    tr, passes, calls, output = streamed_translate
    f = tmp_path / "in.txt"
    f.write_bytes(("\r\n".join(SENTENCES[:5]) + "\n\n   \n" + "\n".join(SENTENCES[5:]) + "\n").encode("utf-8"))
    want = tr.translate(SENTENCES)  # one call on every sentence, length-sorted together
    calls.clear()
    assert main(["translate", "run", "--file", str(f)]) == 0
    out, err = output()
    assert out.splitlines() == want  # blank lines skipped, as before
    # the file was read twice (checked, then translated), never more than one block ahead of the output
    assert passes == [11, 11]
    assert calls == [(4, 4, 0), (4, 8, 4), (3, 11, 8)]
    assert [line for line in err.splitlines() if line.startswith("translate: ")][0].startswith(
        "translate: 4 of 11 sentences (")
    assert err.count("translate: ") == 3
    # --json: the same lines from the arguments as from the file
    assert main(["translate", "run", "--json", "--file", str(f)]) == 0
    from_file = output()[0]
    assert main(["translate", "run", "--json", *SENTENCES]) == 0
    assert output()[0] == from_file
    rows = [json.loads(x) for x in from_file.splitlines()]
    assert [r["source"] for r in rows] == SENTENCES and [r["translation"] for r in rows] == want


def test_translate_file_with_a_bad_line_prints_nothing_and_names_it(tmp_path, streamed_translate):
    """A bad line after the first block stops the command before any translation is printed, with
    the message of reading the file at once and the sentence's number in the whole file."""
    _, _, calls, output = streamed_translate
    bad = tmp_path / "bad.txt"
    bad.write_bytes(("\n".join(SENTENCES[:9]) + "\n").encode("utf-8") + b"ab \xff cd\n")
    assert main(["translate", "run", "--file", str(bad)]) == 2
    out, err = output()
    with pytest.raises(UserError) as whole:
        read_inputs([], str(bad))
    assert out == "" and err.strip() == f"error: {whole.value}" and calls == []
    long = tmp_path / "long.txt"
    long.write_text("\n".join(SENTENCES[:6] + ["ab " * 9] + SENTENCES[6:]) + "\n", encoding="utf-8")
    assert main(["translate", "run", "--file", str(long)]) == 2
    out, err = output()
    assert out == "" and "sentence 7 has 9 tokens, more than max_input_len=8" in err and calls == []


# ----------------------------------------------------------------------------- evaluate --data (classify)
def _random_classifier(seed):
    """A two-topic classifier with random weights (no training), char tokens of `headlines`."""
    from toy_data import headlines

    from scratchformer.data.tokenizers import build_tokenizer
    from scratchformer.models.classifier import build_classifier
    from scratchformer.tasks.classify import ClassifyRecipe, Classifier

    r = ClassifyRecipe()
    r.data.tokenizer, r.data.max_len, r.data.batch_size = "char", 24, 8
    e = r.model.encoder
    e.d_model, e.n_heads, e.d_ff, e.n_layers = 32, 4, 64, 1
    tok = build_tokenizer("char", [t for t, _ in headlines(100, 0)])
    r.model.bigram_buckets, r.model.vocab_size, r.model.n_classes = 0, tok.vocab_size, 2
    torch.manual_seed(seed)
    return Classifier(build_classifier(r.model), tok, ["体育", "财经"], r)


@pytest.mark.parametrize("kind", ["ensemble", "blend"])
def test_evaluating_an_ensemble_or_a_blend_holds_one_block_of_rows(tmp_path, monkeypatch, kind):
    """`evaluate RUN --data FILE` of an ensemble or a blended run: the probabilities (and the
    baseline's texts) of EVAL_BLOCK rows at a time, read from the prepared file, never a list of
    all its texts; the report of one pass over every row."""
    from toy_data import headlines, write_tsv

    from scratchformer.tasks.classify import BlendedClassifier, Classifier, EnsembleClassifier
    from scratchformer.tasks.classify import inference
    from scratchformer.tasks.classify.baseline import Baseline, fit_baseline
    from scratchformer.tasks.classify.data import labeled_pairs

    monkeypatch.setenv("SCRATCHFORMER_CACHE", str(tmp_path / "cache"))
    write_tsv(tmp_path / "test.tsv", headlines(40, 3))
    pairs = labeled_pairs(str(tmp_path / "test.tsv"))
    one = _random_classifier(0)
    if kind == "ensemble":
        clf = EnsembleClassifier([one, _random_classifier(1)], one.recipe)
    else:
        clf = BlendedClassifier(one, fit_baseline(headlines(100, 0), one.labels, None), 0.5)
    whole = clf.evaluate(pairs)  # 40 rows: one block, the probabilities of every row at once
    seen = []

    def spy(cls, name):
        real = getattr(cls, name)

        def recorded(self, items, *a, **k):
            seen.append((name, type(items).__name__, len(items)))
            return real(self, items, *a, **k)
        monkeypatch.setattr(cls, name, recorded)
    spy(Classifier, "split_proba")
    spy(Baseline, "predict_proba")
    monkeypatch.setattr(inference, "EVAL_BLOCK", 7)
    rep = clf.evaluate(pairs)
    members = 2 if kind == "ensemble" else 1
    assert [n for name, _, n in seen if name == "split_proba"] == [n for n in (7, 7, 7, 7, 7, 5) for _ in range(members)]
    assert {(name, t) for name, t, _ in seen} == (
        {("split_proba", "LazyPairs")} | ({("predict_proba", "LazyTexts")} if kind == "blend" else set()))
    assert max(n for _, _, n in seen) <= 7
    assert rep.pop("loss") == pytest.approx(whole.pop("loss"), rel=1e-6) and rep == whole
