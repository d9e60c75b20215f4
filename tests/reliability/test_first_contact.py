"""What a first user meets first (issue 33, rules 8, 11 and 12): a missing split is one line
that says how to give one, in every verb that reads a split; `evaluate --data FILE` never
replaces the training-time test report; training off a terminal prints a line per evaluation;
`experiment NAME` works without --out, as the docs write it."""
import json
import subprocess
import sys

import pytest
from toy_data import headlines, write_tsv

from scratchformer.cli import main

SMALL = ["--set", "model.encoder.d_model=16", "--set", "model.encoder.n_heads=2", "--set", "model.encoder.d_ff=32",
         "--set", "model.encoder.n_layers=1", "--set", "train.epochs=2", "--set", "data.batch_size=16",
         "--set", "ensemble=1", "--no-baseline"]


@pytest.fixture(scope="module")
def no_test_run(tmp_path_factory):
    """A classify run trained with --valid and no --test: it has no test split."""
    d = tmp_path_factory.mktemp("notest")
    write_tsv(d / "train.tsv", headlines(120, 0))
    write_tsv(d / "valid.tsv", headlines(30, 1))
    write_tsv(d / "test.tsv", headlines(30, 2))
    out = d / "run"
    assert main(["train", "classify", "--data", str(d / "train.tsv"), "--valid", str(d / "valid.tsv"),
                 "--out", str(out), "--set", "train.progress=false", *SMALL]) == 0
    return d, out


@pytest.fixture(scope="module")
def no_test_translation(tmp_path_factory):
    import random

    d = tmp_path_factory.mktemp("notest-mt")
    rng = random.Random(0)
    words = "ab cd ef gh".split()
    for name, n in (("train", 120), ("valid", 10)):
        src = [" ".join(rng.choice(words) for _ in range(rng.randint(2, 4))) for _ in range(n)]
        (d / f"{name}.tsv").write_text("".join(f"{s}\t{s.upper()}\n" for s in src))
    out = d / "run"
    assert main(["train", "translate", "--data", str(d / "train.tsv"), "--valid", str(d / "valid.tsv"),
                 "--out", str(out), "--set", "model.transformer.d_model=16", "--set", "model.transformer.n_heads=2",
                 "--set", "model.transformer.d_ff=32", "--set", "model.transformer.n_layers=1",
                 "--set", "data.src_tokenizer=word", "--set", "data.tgt_tokenizer=word", "--set", "data.max_tokens=200",
                 "--set", "train.epochs=1", "--set", "train.progress=false", "--set", "average_last=1",
                 "--set", "decode.beam=1", "--set", "data.bleu_sentences=2"]) == 0
    return d, out


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("error: ") and "Traceback" not in err, err
    return err[len("error: "):]


@pytest.mark.parametrize("verb", [["evaluate"], ["evaluate", "--no-blend"], ["doctor", "--split", "test"]])
def test_a_classify_run_without_a_test_split_says_so_in_every_verb(no_test_run, verb, capsys):
    _, run = no_test_run
    capsys.readouterr()
    assert main([verb[0], str(run), *verb[1:]]) == 2
    msg = _one_line(capsys)
    assert msg.startswith(f"{run} has no test split (it was trained with --valid and no --test): give a file of the "
                          f"training data's form with `{'evaluate ' + str(run) + ' ' if verb[0] == 'evaluate' else ''}"
                          "--data FILE`, or `--split valid`"), msg


def test_a_translation_run_without_a_test_split_says_so(no_test_translation, capsys):
    _, run = no_test_translation
    for verb in (["evaluate", str(run)], ["doctor", str(run), "--split", "test"]):
        capsys.readouterr()
        assert main(verb) == 2
        assert f"{run} has no test split" in _one_line(capsys)
    assert main(["evaluate", str(run), "--split", "valid", "--json"]) == 0  # the way out it names works


def test_evaluate_data_writes_its_own_report_and_keeps_the_training_time_one(no_test_run, tmp_path, capsys):
    d, run = no_test_run
    # a run with a test split: its test_metrics.json is the training-time report
    out = tmp_path / "with-test"
    assert main(["train", "classify", "--data", str(d / "train.tsv"), "--valid", str(d / "valid.tsv"), "--test",
                 str(d / "valid.tsv"), "--out", str(out), "--set", "train.progress=false", *SMALL]) == 0
    before = (out / "test_metrics.json").read_bytes()
    assert main(["evaluate", str(out), "--data", str(d / "test.tsv"), "--json"]) == 0  # a file called test.tsv
    assert (out / "test_metrics.json").read_bytes() == before
    rep = json.loads((out / "file_test_metrics.json").read_text())
    assert rep["n"] == 30 if "n" in rep else True
    assert (out / "confusion_file_test.png").is_file()


def test_training_off_a_terminal_prints_a_line_at_every_evaluation(tmp_path):
    write_tsv(tmp_path / "train.tsv", headlines(120, 0))
    out = tmp_path / "run"
    res = subprocess.run([sys.executable, "-m", "scratchformer.cli", "train", "classify", "--data",
                          str(tmp_path / "train.tsv"), "--out", str(out), *SMALL, "--set", "train.epochs=3"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    evals = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()
             if json.loads(line).get("split") == "valid"]
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("step ") and ": valid " in ln]
    assert len(evals) >= 3 and len(lines) == len(evals), res.stderr
    assert lines[-1].startswith(f"step {evals[-1]['step']}/")


def test_experiment_runs_without_out_as_the_docs_write_it(tmp_path, monkeypatch, capsys):
    from scratchformer.experiments import programs

    seen = {}

    def fake(out, seeds, quick, log, **options):
        seen.update(out=out, options=options)
        return "report"
    monkeypatch.setattr(programs, "program", lambda name: fake if name == "copy-task" else None)
    monkeypatch.chdir(tmp_path)
    assert main(["experiment", "copy-task", "--bugs"]) == 0
    assert str(seen["out"]) == "runs/exp-copy-task" and seen["options"] == {"bugs": "all"}
    assert "--out not given: writing into runs/exp-copy-task/" in capsys.readouterr().err


def test_a_signal_to_a_sweep_or_experiment_stops_its_child(tmp_path):
    """SIGTERM to the parent reaches the cell's child (which would otherwise train on, alone) and
    then stops the parent; the child is gone when the parent returns."""
    import os
    import signal
    import threading
    import time

    from scratchformer.experiments.runner import run_child

    pidfile = tmp_path / "child.pid"
    code = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(120)"

    def term_the_parent():
        deadline = time.time() + 60
        while not (pidfile.exists() and pidfile.read_text()) and time.time() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    threading.Thread(target=term_the_parent, daemon=True).start()
    start = time.time()
    with open(tmp_path / "log", "w") as log, pytest.raises(SystemExit) as stop:
        run_child([sys.executable, "-c", code], log)
    assert stop.value.code == 128 + signal.SIGTERM and time.time() - start < 60
    with pytest.raises(ProcessLookupError):
        os.kill(int(pidfile.read_text()), 0)  # reaped: not left training
    assert signal.getsignal(signal.SIGTERM) is before  # the handler before it is back


def test_label_case_and_repeated_test_texts_are_said(tmp_path):
    from scratchformer.tasks.classify import load_classification
    from scratchformer.tasks.classify.recipe import ClassifyDataConfig

    rows = [(f"text {i}", "Pos" if i % 3 == 0 else "pos" if i % 3 == 1 else "neg") for i in range(30)]
    write_tsv(tmp_path / "train.tsv", rows)
    write_tsv(tmp_path / "test.tsv", [("text 4", "pos"), ("text 9", "Pos"), ("new text", "neg")])
    dc = ClassifyDataConfig(dataset=str(tmp_path / "train.tsv"), test_file=str(tmp_path / "test.tsv"))
    data = load_classification(dc)
    notes = data.meta["hygiene"]
    assert notes[0] == "labels 'Pos', 'pos' differ only in case: they are 2 classes; if one was meant, write it one " \
                       "way in the file"
    assert "2 of the 3 test texts also occur in the training data" in notes[-1]
    assert data.meta["test_in_train"] == [0, 1]
