"""The small rows of issue 62 (docs/bad-input.md): `--sort` without `--per-sentence` is one line;
the export hint of an LSTM translation run names what works for it (nothing); one labelled row
counts as one label; a torchrun job over several nodes says at once what it waits for. (The LM ONNX
export's sampler is in tests/serve/test_export_lm.py, the checker out of sight in
tests/check/test_unseen.py.)"""
import json
import socket
import subprocess
import sys
import time

import pytest

from scratchformer.cli import main
from scratchformer.errors import UserError


def _run_folder(path, task, **config):
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"task": task, **config}))
    return path


# ---------------------------------------------------------------- evaluate --sort
def test_sort_without_per_sentence_is_one_line(tmp_path, capsys):
    run = _run_folder(tmp_path / "mt", "translate")  # refused before anything is loaded: a config is enough
    assert main(["evaluate", str(run), "--sort", "bleu"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --sort bleu orders the per-sentence table, which only --per-sentence prints: add it (scratchformer "
        f"evaluate {run} --per-sentence --sort bleu), or leave --sort out")
    # a task that prints no such table still names its own reason
    clf = _run_folder(tmp_path / "clf", "classify")
    assert main(["evaluate", str(clf), "--sort", "chrf"]) == 2
    assert "are for translation runs (sentence BLEU); this is a classification run" in capsys.readouterr().err


def test_the_python_api_refuses_an_order_of_nothing():
    from scratchformer.tasks.translate.inference import Translator

    tr = Translator.__new__(Translator)  # the check comes before any decoding: no model needed
    tr.decode_config = lambda **kw: None
    tr._precision = lambda overrides: overrides
    with pytest.raises(UserError, match=r"^sort='bleu' orders the per-sentence table: pass per_sentence=True too"):
        tr.evaluate([("a", "b")], sort="bleu")


# ---------------------------------------------------------------- export of an LSTM run
def test_the_export_hint_of_an_lstm_run_names_only_what_works(tmp_path):
    from scratchformer.tasks.faces import export_of

    lstm = _run_folder(tmp_path / "lstm", "translate", model={"kind": "lstm"})
    with pytest.raises(UserError) as e:
        export_of(lstm, "onnx")
    assert str(e.value) == (
        f"{lstm} holds a 'translate' run; --format onnx exports classify and lm runs (this run exports to no format: "
        "--format transformers and ctranslate2 export Transformer translators, and this one is model.kind=lstm: "
        f"serve the run folder itself, scratchformer serve {lstm})")
    assert "--format transformers or ctranslate2" not in str(e.value)
    transformer = _run_folder(tmp_path / "tr", "translate", model={"kind": "transformer"})
    with pytest.raises(UserError, match=r"\(translation runs: --format transformers or ctranslate2\)$"):
        export_of(transformer, "onnx")  # a Transformer translator keeps the hint that works for it


# ---------------------------------------------------------------- one row, one label
@pytest.mark.parametrize("prepared", ["1", "0"])  # the prepared row index, and in memory
def test_one_labelled_row_counts_as_one_label(tmp_path, monkeypatch, capsys, prepared):
    monkeypatch.setenv("SCRATCHFORMER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SCRATCHFORMER_PREPARED", prepared)
    one, two = tmp_path / "one.tsv", tmp_path / "two.tsv"
    one.write_text("text\tlabel\n好消息\t体育\n", encoding="utf-8")
    two.write_text("text\tlabel\n好消息\t体育\n坏消息\t财经\n", encoding="utf-8")
    short = ("; the file has too few rows for its split (80/10/10 into train/valid/test): give at least a few rows "
             "of each label")
    assert main(["train", "classify", "--data", str(one), "--out", str(tmp_path / "r1")]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: {one} has 1 labelled row(s) with 1 distinct label(s); a classifier needs at least 2 labels" + short)
    assert main(["train", "classify", "--data", str(two), "--out", str(tmp_path / "r2")]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: {two}: the training split has 1 row(s) with 1 of the file's 2 labels; a classifier needs at least "
        "2 labels in training" + short)


# ---------------------------------------------------------------- a node that never joins
def _torchrun_args(*argv):
    from torch.distributed.run import parse_args

    return parse_args([*argv, "-m", "scratchformer.cli", "--help"])


def test_the_waiting_line_names_the_nodes_the_endpoint_and_the_join_timeout():
    from scratchformer.train.launch import waiting_line

    c10d = ["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "HOST:29400"]
    assert waiting_line(_torchrun_args(*c10d)) == (
        "waiting for 2 nodes to join at HOST:29400 (join timeout 600 s, --rdzv-conf join_timeout=SECONDS); a node "
        "that has not joined by then ends the job with torchrun's RendezvousTimeoutError")
    assert "to join at HOST:29400 (join timeout 5 s," in waiting_line(
        _torchrun_args(*c10d, "--rdzv-conf", "last_call_timeout=1,join_timeout=5"))
    elastic = _torchrun_args("--nnodes", "1:4", "--rdzv-backend", "c10d", "--rdzv-endpoint", "H:1")
    assert waiting_line(elastic).startswith("waiting for 1 to 4 nodes to join at H:1 ")
    static = waiting_line(_torchrun_args("--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1"))
    assert static.startswith("node 2 of 2: waiting for 2 nodes to join at 10.0.0.1:29500 (join timeout 900 s, "
                             "--rdzv-conf timeout=SECONDS)")
    for one in (["--nnodes", "1"], ["--standalone"]):
        assert waiting_line(_torchrun_args(*one)) is None


def test_a_node_that_never_joins_is_said_at_once_not_after_the_timeout(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    agent = subprocess.Popen([sys.executable, "-m", "scratchformer.train.launch", "--nnodes", "2",
                              "--nproc-per-node", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}",
                              "--rdzv-id", "alone", "--rdzv-conf", "join_timeout=4", "-m", "scratchformer.cli", "--help"],
                             stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=tmp_path)
    try:
        first = agent.stderr.readline().strip()
        said = time.monotonic() - t0
        rest = agent.communicate(timeout=120)[1]
    finally:
        agent.kill()
    assert first == (f"waiting for 2 nodes to join at 127.0.0.1:{port} (join timeout 4 s, --rdzv-conf "
                     "join_timeout=SECONDS); a node that has not joined by then ends the job with torchrun's "
                     "RendezvousTimeoutError")
    assert agent.returncode != 0 and "RendezvousTimeoutError" in rest, rest[-2000:]
    took = time.monotonic() - t0
    assert said < took - 2, (said, took)  # the line came well before the 4 s wait ended
