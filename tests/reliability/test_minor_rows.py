"""The MINOR rows of issue 54 (rule 7): messages that said the wrong thing. `embed RUN_DIR TEXT`
names the folder instead of downloading a model to embed its path; `--json` puts argument errors
on stdout as JSON; check reads a PEP 263 latin-1 file as latin-1; a header and one row says the
split is short, not "0 labels"; NFC/NFD twins of a label are named; `--train-png` into a folder that
cannot be written is refused before the check, not after it in place of the verdict."""
import json
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from scratchformer.cli import main

FIX = Path(__file__).resolve().parents[1] / "check" / "fixtures"


def test_embed_with_a_run_folder_as_text_says_what_was_meant(tmp_path, capsys):
    run = tmp_path / "news"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"task": "classify"}))
    for verb in ("embed", "similarity"):
        assert main([verb, str(run), "a sentence", "another"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {str(run)!r} is a model or run folder, not a text to embed; to embed with it, "
                              f"put it after --model: `scratchformer {verb} --model {run} TEXT ...`"), err


@pytest.mark.parametrize("argv, error", [
    (["check", "/no/such.py", "--json"], "/no/such.py does not exist; give the path of your Python file"),
    (["check", str(FIX / "keras.py"), "--json", "--timeout", "abc"],
     "argument --timeout: invalid float value: 'abc' (see `scratchformer check --help`)"),
    (["check", str(FIX / "keras.py"), "--json", "--memory-mb", "0"],
     "--memory-mb 0.0: give a finite number above 0 (megabytes, e.g. --memory-mb 4096)"),
])
def test_json_argument_errors_are_json_on_stdout(argv, error):
    res = subprocess.run([sys.executable, "-m", "scratchformer.cli", *argv], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert json.loads(res.stdout) == {"error": error, "exit_code": 2}
    assert res.stderr == f"error: {error}\n"  # the person's line stays


def test_a_latin1_file_declared_by_pep_263_is_read_as_latin1(tmp_path):
    from scratchformer.check import check_file

    src = "# -*- coding: latin-1 -*-\n# Entraînement de l'attention, café\n" + (FIX / "keras.py").read_text(encoding="utf-8")
    learner = tmp_path / "latin.py"
    learner.write_bytes(src.encode("latin-1"))
    with pytest.raises(UnicodeDecodeError):
        learner.read_text(encoding="utf-8")  # the fault: read as UTF-8 it could not be checked
    report = check_file(learner, lang="en", timeout_s=60)
    assert report.error is None and report.exit_code == 0, report.error


def test_a_header_and_one_row_says_the_split_is_short(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SCRATCHFORMER_CACHE", str(tmp_path / "cache"))
    data = tmp_path / "one.tsv"
    data.write_text("text\tlabel\n好消息\t体育\n", encoding="utf-8")
    assert main(["train", "classify", "--data", str(data), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (f"error: {data} has 1 labelled row(s) with 1 distinct label(s); a classifier needs at least 2 "
                   "labels; the file has too few rows for its split (80/10/10 into train/valid/test): give at least "
                   "a few rows of each label")  # one row is one label (issue 62), not "0 distinct label(s)"


def test_nfc_and_nfd_twins_of_a_label_are_named():
    from scratchformer.tasks.classify.data import hygiene

    nfc, nfd = unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")
    assert nfc != nfd
    lines = hygiene([("a", nfc), ("b", nfd), ("c", "Sport"), ("d", "sport")], {}, sorted([nfc, nfd, "Sport", "sport"]))["hygiene"]
    assert lines == [  # in the labels' sorted order: "Sport" < "cafe\u0301" (NFD) < "caf\u00e9" (NFC)
        "labels 'Sport', 'sport' differ only in case: they are 2 classes; if one was meant, write it one way in the file",
        f"labels {nfd!r} (not NFC), {nfc!r} (NFC) look the same but differ in their Unicode form (NFC/NFD or "
        "full-width): they are 2 classes; if one was meant, write it one way in the file (e.g. NFC)"]


def test_an_unwritable_train_png_is_refused_before_the_check(tmp_path, capsys):
    png = tmp_path / "missing" / "curves.png"
    assert main(["check", str(FIX / "keras.py"), "--train", "--train-png", str(png)]) == 2
    assert capsys.readouterr().err == (f"error: --train-png {png}: cannot write into {png.parent} (no such folder); "
                                       "give a path you can write\n")
