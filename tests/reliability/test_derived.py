"""What a run derived stays tied to what it was derived from (issue 33, rule 12): the blend
weight to the weights (a --resume that changes them refits or drops it, and says so), the
teacher's targets to the teacher, files compared by identity; nothing executable read from a
run folder (a crafted regex in the baseline file), a tokenizer listing a token twice refused,
soft targets that are not finite named as such."""
import json
import os
import shutil
from pathlib import Path

import pytest
from toy_data import headlines, write_tsv

from scratchformer.cli import main
from scratchformer.errors import UserError

SMALL = ["--set", "model.encoder.d_model=16", "--set", "model.encoder.n_heads=2", "--set", "model.encoder.d_ff=32",
         "--set", "model.encoder.n_layers=1", "--set", "train.epochs=1", "--set", "data.batch_size=16",
         "--set", "ensemble=1", "--set", "train.progress=false"]


@pytest.fixture(scope="module")
def blended(tmp_path_factory):
    d = tmp_path_factory.mktemp("blended")
    write_tsv(d / "train.tsv", headlines(160, 0))
    write_tsv(d / "valid.tsv", headlines(40, 1))
    out = d / "run"
    assert main(["train", "classify", "--data", str(d / "train.tsv"), "--valid", str(d / "valid.tsv"),
                 "--out", str(out), "--set", "blend=true", *SMALL]) == 0
    assert (out / "baseline" / "blend.json").is_file()
    return d, out


def _copy(run, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(run, dst, ignore=shutil.ignore_patterns(".lock"))
    return dst


def _err(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and "Traceback" not in err, err
    return err[len("error: "):]


@pytest.mark.parametrize("pattern", [r"(a+)+$", r"(?u)\b(\w+\s?)*$", 42])
def test_a_crafted_regex_in_the_baseline_file_is_refused_before_it_is_compiled(blended, tmp_path, pattern, capsys):
    _, run = blended
    run = _copy(run, tmp_path)
    spec_file = run / "baseline" / "baseline.json"
    spec = json.loads(spec_file.read_text())
    spec["vectorizers"][0]["token_pattern"] = pattern
    spec_file.write_text(json.dumps(spec))
    capsys.readouterr()
    assert main(["predict", str(run), "股市涨跌" + "a" * 40 + "!"]) == 2  # would backtrack for ever
    msg = _err(capsys)
    assert "token_pattern" in msg and "is not one scratchformer writes" in msg
    from scratchformer.tasks.classify.baseline import Baseline

    with pytest.raises(UserError, match="token_pattern .* is not one scratchformer writes"):
        Baseline.load(run / "baseline")


@pytest.mark.parametrize("key,value", [("analyzer", "callable"), ("ngram_range", [1, 10 ** 6]), ("lowercase", "yes")])
def test_other_edited_vectorizer_settings_are_refused(blended, tmp_path, key, value):
    from scratchformer.tasks.classify.baseline import Baseline

    _, run = blended
    run = _copy(run, tmp_path)
    spec_file = run / "baseline" / "baseline.json"
    spec = json.loads(spec_file.read_text())
    spec["vectorizers"][0][key] = value
    spec_file.write_text(json.dumps(spec))
    with pytest.raises(UserError, match=key):
        Baseline.load(run / "baseline")


def test_a_tokenizer_file_listing_a_token_twice_is_refused(blended, tmp_path, capsys):
    from scratchformer.data.tokenizers import CharTokenizer, Tokenizer, TokenizerFileError

    _, run = blended
    run = _copy(run, tmp_path)
    data = json.loads((run / "tokenizer.json").read_text())
    key = next(k for k, v in data.items() if isinstance(v, list) and len(v) > 8)
    data[key][7] = data[key][6]  # the same character at ids 6 and 7
    (run / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False))
    with pytest.raises(TokenizerFileError, match="is listed twice \\(ids 6 and 7\\)"):
        Tokenizer.load(run / "tokenizer.json")
    capsys.readouterr()
    assert main(["predict", str(run), "股市"]) == 2
    assert "listed twice" in _err(capsys)
    with pytest.raises(ValueError, match="listed twice"):
        CharTokenizer(["<pad>", "<unk>", "<bos>", "<eos>", "<cls>", "a", "b", "a"])


def test_a_resume_that_changes_the_weights_drops_the_blend_and_says_so(blended, tmp_path, capsys, monkeypatch):
    from scratchformer.tasks.classify import Classifier, pipeline

    d, run = blended
    run = _copy(run, tmp_path)
    resume = ["train", "classify", "--data", str(d / "train.tsv"), "--valid", str(d / "valid.tsv"), "--out", str(run),
              "--resume", "--no-baseline", *SMALL]
    assert main(resume) == 0  # the weights did not change: the blend stays theirs
    assert (run / "baseline" / "blend.json").is_file()
    digests = iter(["before", "after"])  # the resumed training moved the saved weights
    monkeypatch.setattr(pipeline, "_digest", lambda path: next(digests))
    capsys.readouterr()
    assert main(resume) == 0
    out = capsys.readouterr()
    assert "blend dropped: --resume changed the weights it was chosen for" in out.out + out.err
    assert not (run / "baseline" / "blend.json").exists()
    assert not hasattr(Classifier.load(run), "baseline")  # the model alone, not a stale blend
    # with the baseline refitted after the resume, the blend is chosen again (and said so)
    (run / "baseline" / "blend.json").write_text("{}")
    lines = []
    pipeline.stale_blend(run, refit=True, log=lines.append)
    assert lines == ["blend: --resume changed the weights; its weight is chosen again on valid below"]


def test_the_teacher_is_tied_to_its_targets_and_a_bad_temperature_is_named(blended, tmp_path):
    from scratchformer.tasks.classify.distill import check_teacher, teacher_probabilities

    d, run = blended
    pairs = [tuple(line.split("\t")) for line in (d / "valid.tsv").read_text().splitlines()[1:]]
    soft = teacher_probabilities(run, pairs, ["体育", "财经"], log=lambda m: None)
    student = tmp_path / "student"
    check_teacher(student, run, soft, resume=False)
    check_teacher(student, run, soft, resume=True)  # the same teacher: fine
    other = soft[::-1].copy()
    with pytest.raises(UserError, match="gives other probabilities of the training texts than when"):
        check_teacher(student, run, other, resume=True)



def test_non_finite_distillation_is_named_not_called_a_learning_rate(blended, tmp_path, capsys):
    d, run = blended
    capsys.readouterr()
    assert main(["train", "classify", "--data", str(d / "train.tsv"), "--valid", str(d / "valid.tsv"),
                 "--out", str(tmp_path / "student"), "--teacher", str(run), "--no-baseline",
                 "--set", "distill_temperature=1e-300", *SMALL]) == 2
    msg = _err(capsys)
    assert msg.startswith("the distillation term is") and "distill_temperature 1e-300" in msg
    assert "learning rate" not in msg


def test_files_are_compared_by_identity_not_spelling(tmp_path, monkeypatch):
    from scratchformer.tasks.runs import same_source

    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.tsv").write_text("a\tb\n")
    (tmp_path / "link.tsv").symlink_to(tmp_path / "data" / "x.tsv")
    (tmp_path / "data" / "y.tsv").write_text("a\tb\n")
    monkeypatch.chdir(tmp_path)
    assert same_source("./data/x.tsv", "data/x.tsv") and same_source("data/../data/x.tsv", str(tmp_path / "data/x.tsv"))
    assert same_source("link.tsv", "data/x.tsv")
    assert not same_source("data/y.tsv", "data/x.tsv")  # same bytes, another file
    assert same_source("thucnews", "thucnews") and not same_source("thucnews", "tnews")
    assert same_source(None, None) and not same_source("data/x.tsv", None)


def test_a_file_of_the_wrong_kind_is_refused_by_kind(tmp_path, capsys):
    root = Path(__file__).resolve().parents[2]
    spec = root / "recipes" / "experiments" / "heads.json"
    recipe = root / "recipes" / "thucnews-demo.json"
    for argv, want in ((["params", "--config", str(spec)], f"{spec} is an experiment spec"),
                       (["train", "classify", "--data", "x.tsv", "--config", str(spec), "--out", str(tmp_path / "r")],
                        f"{spec} is an experiment spec"),
                       (["experiment", str(recipe), "--out", str(tmp_path / "e")], f"{recipe} is a recipe, not an "
                                                                                    "experiment spec")):
        capsys.readouterr()
        assert main(argv) == 2
        assert _err(capsys).startswith(want)
    bad = json.loads(spec.read_text())
    bad["checks"][0]["kind"] = "median"
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    capsys.readouterr()
    assert main(["experiment", str(tmp_path / "bad.json"), "--out", str(tmp_path / "e2")]) == 2
    assert _err(capsys) == (f"{tmp_path / 'bad.json'}: check 1 has kind 'median'; known kinds: diff, ratio, value, "
                            "diverged_more")
    assert not (tmp_path / "e2" / "cells").exists()


def test_embed_given_a_classifier_run_says_what_to_use(blended, capsys):
    _, run = blended
    capsys.readouterr()
    assert main(["embed", "--model", str(run), "a text"]) == 2
    assert _err(capsys).startswith(f"{run} is a scratchformer classify run, not a pretrained encoder; its sentence "
                                   f"embeddings come from `scratchformer serve {run}`")
