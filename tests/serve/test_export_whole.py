"""Exports are whole or absent (issue 33, rule 7), in every format (classify onnx, lm onnx,
transformers, ctranslate2): staged beside --out and renamed with a completion record; a cut,
a full disk, a link as --out or a failed parity check leaves nothing that looks finished;
`serve --backend` refuses a folder without its record; the LM export stands alone."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from scratchformer.cli import main
from scratchformer.errors import UserError
from scratchformer.serve.backends import ModelSpec, load_backend
from scratchformer.tasks.export_folder import COMPLETE, require_complete

pytest.importorskip("onnxruntime", reason="pip install -e '.[test]' brings onnxruntime")
transformers = pytest.importorskip("transformers")
pytest.importorskip("ctranslate2", reason="pip install -e '.[test]' brings ctranslate2")


@pytest.fixture(scope="module")
def postln_mt(tmp_path_factory):
    """The toy word translator, Post-LN (the Marian layout, which both translation formats take)."""
    from toy_data import train_toy_translator

    return train_toy_translator(tmp_path_factory.mktemp("mt-postln"), "--set", "model.transformer.norm_first=false",
                                "--set", "model.transformer.dropout=0.0", "--set", "train.epochs=6",
                                "--set", "decode.precision=fp32", "--set", "data.bleu_sentences=4")


FORMATS = [("clf_run", "onnx"), ("lm_run", "onnx"), ("postln_mt", "transformers"), ("postln_mt", "ctranslate2")]


def _export(request, run_fixture, fmt, out, *extra):
    run = request.getfixturevalue(run_fixture)
    # the toy translator barely learns (it repeats one word to the length limit): its logits are near
    # ties, where CTranslate2's float order can pick another token on some test sentences; these tests
    # are about the folder, so CTranslate2 runs unchecked (tests/tasks/test_translate_export.py checks parity)
    check = ["--no-check"] if fmt == "ctranslate2" and "--no-check" not in extra else []
    return main(["export", str(run), "--format", fmt, "--out", str(out), *extra, *check])


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err, err
    last = err.replace("\r", "\n").splitlines()[-1]  # after transformers' own progress bar, if any
    assert last.startswith("error: "), err
    return last[len("error: "):]


def _leftovers(parent):
    return sorted(p.name for p in parent.iterdir() if ".partial-" in p.name)


@pytest.fixture(scope="module")
def exports(request, tmp_path_factory):
    """One finished export per format (made once)."""
    done = {}
    for run_fixture, fmt in FORMATS:
        out = tmp_path_factory.mktemp(f"exp-{fmt}") / f"{run_fixture}-{fmt}"
        assert _export(request, run_fixture, fmt, out) == 0
        done[(run_fixture, fmt)] = out
    return done


@pytest.mark.parametrize("run_fixture,fmt", FORMATS)
def test_every_format_ends_with_its_completion_record(exports, run_fixture, fmt):
    out = exports[(run_fixture, fmt)]
    record = json.loads((out / COMPLETE).read_text())
    assert record["format"] == fmt
    files = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} - {COMPLETE}
    assert set(record["files"]) == files and "export.json" in files  # every file, nothing else
    import hashlib

    for name, info in record["files"].items():
        data = (out / name).read_bytes()
        assert info["bytes"] == len(data) and info["sha256"] == hashlib.sha256(data).hexdigest()
    assert not any(p.name.startswith(".") for p in out.rglob("*"))  # no staging or pid files inside
    assert _leftovers(out.parent) == []
    assert require_complete(out, "onnxruntime")["format"] == fmt


@pytest.mark.parametrize("run_fixture,fmt", FORMATS)
def test_serve_refuses_an_export_whose_weights_were_altered_at_the_same_size(exports, run_fixture, fmt, tmp_path):
    """Every file is checked against its recorded sha256 (not only its size), whatever its mtime says."""
    backend = "ctranslate2" if fmt == "ctranslate2" else "onnxruntime"
    copy = tmp_path / "copy"
    shutil.copytree(exports[(run_fixture, fmt)], copy)
    big = max((p for p in copy.rglob("*") if p.is_file() and p.name != COMPLETE), key=lambda p: p.stat().st_size)
    st = big.stat()
    data = bytearray(big.read_bytes())
    data[len(data) // 2] ^= 0xFF
    with open(big, "r+b") as f:
        f.write(bytes(data))
    os.utime(big, ns=(st.st_atime_ns, st.st_mtime_ns))
    rel = big.relative_to(copy).as_posix()
    with pytest.raises(UserError, match=f"{rel} does not have the sha256 the export recorded; delete it, export it "
                                        "again"):
        if fmt == "transformers":  # serve has no backend for it: the check that every reader calls
            require_complete(copy, backend)
        else:
            load_backend(ModelSpec("x", str(copy)), backend)


@pytest.mark.parametrize("run_fixture,fmt", [FORMATS[0], FORMATS[3]])
def test_serve_refuses_an_export_without_its_record_or_with_a_cut_file(exports, run_fixture, fmt, tmp_path):
    backend = "ctranslate2" if fmt == "ctranslate2" else "onnxruntime"
    copy = tmp_path / "copy"
    shutil.copytree(exports[(run_fixture, fmt)], copy)
    load_backend(ModelSpec("ok", str(copy)), backend)  # the whole folder serves
    big = max((p for p in copy.iterdir() if p.is_file() and p.name != COMPLETE), key=lambda p: p.stat().st_size)
    big.write_bytes(big.read_bytes()[:-10])
    with pytest.raises(UserError, match=f"{big.name} has .* bytes where the export wrote"):
        load_backend(ModelSpec("x", str(copy)), backend)
    (copy / COMPLETE).unlink()
    with pytest.raises(UserError, match=f"has no {COMPLETE}: it is not a finished export.*--format "
                                        f"{'ctranslate2' if backend == 'ctranslate2' else 'onnx'} --out NEW_FOLDER"):
        load_backend(ModelSpec("x", str(copy)), backend)


def _cut_in(monkeypatch, fmt, exc):
    """Make the writer of `fmt` fail the way a killed / full export does, after some files exist."""
    import torch

    if fmt == "onnx":
        real = torch.onnx.ONNXProgram.save

        def save(self, path, *a, **k):
            real(self, path, *a, **k)  # the model is on disk, the rest not yet
            raise exc
        monkeypatch.setattr(torch.onnx.ONNXProgram, "save", save)
    elif fmt == "transformers":
        def save_pretrained(self, folder, *a, **k):
            os.makedirs(folder, exist_ok=True)
            open(os.path.join(folder, "config.json"), "w").write("{}")
            raise exc
        monkeypatch.setattr(transformers.PreTrainedModel, "save_pretrained", save_pretrained)
    else:
        from scratchformer.tasks.translate import export

        def convert(hf_dir, ct2_dir, meta, quantization=None):
            os.makedirs(ct2_dir, exist_ok=True)
            open(os.path.join(ct2_dir, "model.bin"), "wb").write(b"\0" * 100)
            raise exc
        monkeypatch.setattr(export, "convert", convert)


@pytest.mark.parametrize("run_fixture,fmt", FORMATS)
def test_a_full_disk_is_one_line_in_every_format_and_leaves_nothing(request, run_fixture, fmt, tmp_path, monkeypatch,
                                                                    capsys):
    # the writers' own exception types, as they report ENOSPC (none of them is an OSError)
    errors = {"onnx": RuntimeError("failed to write model.onnx: No space left on device"),
              "transformers": RuntimeError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, '
                                           'message: "No space left on device" })'),
              "ctranslate2": RuntimeError("Error while writing model.bin: No space left on device")}
    _cut_in(monkeypatch, fmt, errors[fmt])
    out = tmp_path / "out"
    assert _export(request, run_fixture, fmt, out) == 2
    msg = _one_line(capsys)
    assert msg.startswith(f"no space left on the device writing {out}: ") and "free some space" in msg
    assert not out.exists() and _leftovers(tmp_path) == []


@pytest.mark.parametrize("run_fixture,fmt", FORMATS)
def test_a_cut_export_leaves_no_finished_folder_and_the_rerun_works(request, run_fixture, fmt, tmp_path, monkeypatch,
                                                                   capsys):
    out = tmp_path / "out"
    _cut_in(monkeypatch, fmt, KeyboardInterrupt())  # Ctrl-C in the middle of writing
    assert _export(request, run_fixture, fmt, out) == 130  # "interrupted"
    assert not out.exists() and _leftovers(tmp_path) == []
    # a SIGKILL leaves its staging folder: the rerun removes it (its process is gone) and finishes
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / ".out.partial-killed"
    stale.mkdir()
    (stale / "model.onnx").write_bytes(b"half")
    (stale / ".pid").write_text(str(dead.pid))
    monkeypatch.undo()
    assert _export(request, run_fixture, fmt, out) == 0
    assert (out / COMPLETE).is_file() and _leftovers(tmp_path) == []


@pytest.mark.parametrize("run_fixture,fmt", FORMATS)
def test_a_link_as_out_is_refused_before_any_work(request, run_fixture, fmt, tmp_path, monkeypatch, capsys):
    import torch

    def no_work(*a, **k):
        raise AssertionError("work started before --out was checked")
    monkeypatch.setattr(torch.onnx, "export", no_work)
    monkeypatch.setattr(transformers.PreTrainedModel, "save_pretrained", no_work)
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = tmp_path / "out"
    link.symlink_to(target)
    assert _export(request, run_fixture, fmt, link) == 2
    assert f"{link} is a symbolic link" in _one_line(capsys)
    assert list(target.iterdir()) == []
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert _export(request, run_fixture, fmt, tmp_path / "dangling") == 2
    assert "is a symbolic link" in _one_line(capsys) and not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("run_fixture,fmt", FORMATS[:2])
def test_a_failed_parity_check_says_what_differs_and_that_no_check_writes_anyway(request, run_fixture, fmt, tmp_path,
                                                                                 monkeypatch, capsys):
    if run_fixture == "clf_run":
        from scratchformer.tasks.classify import export
        monkeypatch.setattr(export, "check_parity",
                            lambda *a, **k: {"n_texts": 3, "max_abs_diff": 0.25, "argmax_agree": False})
        what = "the export differs from our model by 2.50e-01 in the logits (tolerance 0.0001; argmax agrees"
    else:
        from scratchformer.tasks.lm import export
        monkeypatch.setattr(export, "check_lm_parity", lambda *a, **k: {
            "steps": 24, "max_abs_diff": 0.5, "greedy_equal": False, "tokenizer_equal": True})
        what = "the export differs from our model (max |Δ logits| 5.00e-01 over 24 greedy steps"
    out = tmp_path / "out"
    assert _export(request, run_fixture, fmt, out) == 2
    msg = _one_line(capsys)
    assert msg.startswith(what) and msg.endswith(
        f"{out} not written (`scratchformer export ... --no-check` writes it anyway, unchecked)")
    assert not out.exists() and _leftovers(tmp_path) == []
    assert _export(request, run_fixture, fmt, out, "--no-check") == 0 and (out / COMPLETE).is_file()


def test_the_lm_export_stands_alone(exports, lm_run):
    """A standard tokenizer.json, encode / decode / generation beside it (generate.py), a README: in
    a fresh interpreter without torch or scratchformer, greedy generation past the window gives our
    tokens, an empty prompt is refused, a prompt longer than the window is read by its tail."""
    out = exports[("lm_run", "onnx")]
    meta = json.loads((out / "export.json").read_text())
    assert meta["parity"]["greedy_equal"] and meta["parity"]["tokenizer_equal"]
    assert meta["parity"]["window_steps"] > meta["context"]
    assert "from generate import ExportedLM" in (out / "README.md").read_text()
    code = f"""
import json, sys
sys.path.insert(0, {str(out)!r})
from tokenizers import Tokenizer
from generate import ExportedLM
tok = Tokenizer.from_file({str(out / 'tokenizer.json')!r})
lm = ExportedLM({str(out)!r}, threads=1)
short = lm.generate_ids(lm.encode("天地人和"), 30)
long = lm.generate_ids(lm.encode("春夏" * 20), 5)
try:
    lm.generate("", 3)
    empty = "accepted"
except ValueError as e:
    empty = str(e)
assert "torch" not in sys.modules and "scratchformer" not in sys.modules
print(json.dumps({{"ids": tok.encode("天地人和", add_special_tokens=False).ids, "short": short, "long": long,
                  "text": lm.decode(short), "empty": empty}}))
"""
    got = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                    check=True).stdout)
    from scratchformer.tasks.lm import LanguageModel

    lm = LanguageModel.load(lm_run)
    assert got["ids"] == lm.tokenizer.encode("天地人和")
    assert got["short"] == lm.generate_ids(lm.tokenizer.encode("天地人和"), 30, temperature=0.0)
    assert got["long"] == lm.generate_ids(lm.tokenizer.encode("春夏" * 20), 5, temperature=0.0)
    assert got["text"] == lm.tokenizer.decode(got["short"])
    assert got["empty"].startswith("the prompt is empty")
    with pytest.raises(UserError, match="the prompt is empty"):
        lm.generate("", 3)


def test_the_classifier_export_refuses_and_truncates_as_ours(exports, clf_run):
    from scratchformer.tasks.classify import Classifier
    from scratchformer.tasks.classify.onnx_runtime import OnnxClassifier

    ours, theirs = Classifier.load(clf_run, blend=False), OnnxClassifier(exports[("clf_run", "onnx")])
    for bad in ([""], ["ok", "   "]):
        with pytest.raises(UserError) as a:
            ours.predict_proba(bad)
        with pytest.raises(UserError) as b:
            theirs.predict_proba(bad)
        assert str(a.value) == str(b.value)
    long = "球赛队胜负冠军进攻" * 20  # far past max_len 24: both read its head
    import numpy as np

    assert np.abs(ours.predict_proba([long]) - theirs.predict_proba([long])).max() < 1e-4


def test_non_finite_probabilities_and_vectors_are_one_line_never_numbers(clf_run):
    """Rule 6's other half: a NaN in the weights reaches no printed or returned number."""
    import torch

    from scratchformer.tasks.classify import Classifier

    clf = Classifier.load(clf_run, blend=False)
    assert np.isfinite(clf.predict_proba(["股市涨跌"])).all()
    with torch.no_grad():
        clf.model.head[1].weight[0, 0] = float("nan")
    for call in (lambda: clf.predict(["股市涨跌", "球赛"]), lambda: clf.predict_proba(["股市涨跌"])):
        with pytest.raises(UserError, match=r"probabilities of 1 of 1 texts|probabilities of 2 of 2 texts"):
            call()
    with torch.no_grad():
        next(clf.model.encoder.parameters()).fill_(float("inf"))
    with pytest.raises(UserError, match="sentence embeddings of .* not finite"):
        clf.embed(["股市涨跌"])


def test_the_ctranslate2_export_refuses_an_over_long_sentence_as_ours(exports, postln_mt):
    from scratchformer.tasks.translate import Translator
    from scratchformer.tasks.translate.ct2_runtime import Ct2Translator

    ours, theirs = Translator.load(postln_mt), Ct2Translator(exports[("postln_mt", "ctranslate2")])
    limit = ours.decode_config().max_input_len
    long = " ".join(["ab"] * (limit + 1))
    with pytest.raises(UserError) as a:
        ours.translate([long])
    with pytest.raises(UserError) as b:
        theirs.translate(["ab cd", long])
    assert str(a.value).replace("sentence 1", "sentence 2") == str(b.value)
    for bad in ("", "  "):
        with pytest.raises(UserError, match="is empty"):
            theirs.translate([bad])
