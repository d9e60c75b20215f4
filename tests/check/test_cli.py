"""`scratchformer check FILE.py` end to end: the learner's file runs in a child process; a hang, a crash,
an exit() or an import error is one line with the learner's own traceback lines (exit 2); a correct
file exits 0 well under 20 s. The child runs are started together (one per file) to share the cost."""
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from scratchformer.check import check_file

FIX = Path(__file__).parent / "fixtures"

BROKEN = {
    "hang": "import time\nx = 1\nwhile True:\n    x += 1\n",
    "exits": "import sys\n\n\ndef main():\n    sys.exit(3)\n\n\nmain()\n",
    "hard_exit": "import os\nos._exit(5)\n",
    "import_error": "import math\nimport not_a_module_anyone_has\n",
    "raises": "def build():\n    return {}['missing']\n\n\nLAYER = build()\n",
    "memory": "blob = bytearray(64 * 2**30)\n",
    "empty": "# nothing here yet\n",
    "syntax": "x = 1\ndef f(:\n    pass\n",
}


def cli(*args):
    return subprocess.run([sys.executable, "-m", "scratchformer.cli", "check", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("broken")
    files = {}
    for name, src in BROKEN.items():
        files[name] = tmp / f"{name}.py"
        files[name].write_text(src, encoding="utf-8")
    jobs = {name: (lambda p=p, name=name: check_file(p, lang="en", timeout_s=4 if name == "hang" else 60,
                                                      memory_mb=512)) for name, p in files.items()}
    jobs["cli_tutorial1"] = lambda: cli(FIX / "tutorial1.py", "--lang", "en")
    jobs["cli_keras_json"] = lambda: cli(FIX / "keras.py", "--json")
    jobs["cli_gpt_size"] = lambda: cli(FIX / "gpt_video.py", "--lang", "en", "--size", "n_embd=32,n_head=2")
    jobs["annotated_zh"] = lambda: check_file(FIX / "annotated.py", lang="zh")
    jobs["cli_train"] = lambda: (cli(FIX / "tutorial2.py", "--lang", "en", "--train", "--train-steps", "20",
                                     "--train-png", tmp / "curves.png"), tmp / "curves.png")
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = {k: pool.submit(f) for k, f in jobs.items()}
        return {k: f.result() for k, f in futures.items()}


def assert_one_line_and_theirs(report, first: str, theirs: list[str] = ()):
    assert report.exit_code == 2
    lines = report.error.splitlines()
    assert first in lines[0], report.error
    assert "scratchformer" not in report.error and "Traceback" not in report.error
    for t in theirs:
        assert any(t in ln for ln in lines[1:]), report.error


def test_hang_is_stopped_at_the_time_limit(runs):
    assert_one_line_and_theirs(runs["hang"], "did not finish within 4 s")


def test_exit_while_loading_names_the_learners_line(runs):
    assert_one_line_and_theirs(runs["exits"], "your file called exit(3) while being loaded",
                               ['File "exits.py", line 5, in main', "sys.exit(3)", 'line 8, in <module>'])


def test_hard_exit_and_crash(runs):
    assert_one_line_and_theirs(runs["hard_exit"], "the process exited (code 5)")


def test_import_error_gives_their_traceback_lines(runs):
    assert_one_line_and_theirs(runs["import_error"],
                               "could not be imported: ModuleNotFoundError: No module named 'not_a_module_anyone_has'",
                               ['File "import_error.py", line 2, in <module>'])
    assert_one_line_and_theirs(runs["raises"], "could not be imported: KeyError: 'missing'",
                               ["line 5, in <module>", "LAYER = build()", "line 2, in build"])


def test_syntax_error_names_its_line(runs):
    assert_one_line_and_theirs(runs["syntax"], "could not be imported: SyntaxError")
    assert "syntax.py, line 2" in runs["syntax"].error


def test_memory_limit(runs):
    assert_one_line_and_theirs(runs["memory"], "ran out of memory while being loaded (limit 512 MB)")


def test_nothing_to_check_is_exit_2(runs):
    r = runs["empty"]
    assert r.exit_code == 2 and r.components == [] and "no component found" in r.text("en")


def test_cli_names_the_first_tutorials_layernorm(runs):
    p = runs["cli_tutorial1"]
    assert p.returncode == 1, p.stderr
    lines = p.stdout.splitlines()
    assert lines[2].split() == ["layer_norm", "LayerNorm", "differs", "unbiased-std"]
    assert lines[0].split() == ["attention", "MultiHeadAttention", "ok"]
    assert "[bug] unbiased-std  where: LayerNorm.forward" in p.stdout
    assert "see: docs/from-the-tutorials.md#unbiased-std" in p.stdout


def test_cli_json_for_tools_and_a_correct_file_is_fast(runs):
    p = runs["cli_keras_json"]
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["exit_code"] == 0 and d["error"] is None
    assert [c["status"] for c in d["components"]] == ["ok"] * 6
    assert d["seconds"] < 20  # the target: a correct file checked in under 20 s on 2 cores (child included)


def test_size_flag_reaches_the_learners_constants_through_the_child(runs):
    p = runs["cli_gpt_size"]
    assert p.returncode == 0, p.stdout + p.stderr
    assert "sizes: d_model=32 (n_embd=32 from --size), heads=2 (n_head=2 from --size)" in p.stdout
    assert p.stdout.splitlines()[-2:] == ["4 checked, 0 could not be checked.",
                                          "every component checked matches the reference."]


def test_size_flag_says_how_to_write_it(capsys):
    from scratchformer.cli import main

    assert main(["check", str(FIX / "gpt_video.py"), "--size", "n_embd"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: --size 'n_embd': write NAME=NUMBER, e.g. --size d_model=64 or --size n_embd=64,n_head=4"


def test_chinese_report_through_the_child(runs):
    r = runs["annotated_zh"]
    assert r.exit_code == 1 and r.bug_ids() == ["unbiased-std"]
    text = r.text("zh")
    assert "不同  unbiased-std" in text and "[错误] unbiased-std  位置: LayerNorm.forward" in text


def test_bad_arguments_are_one_line(tmp_path, capsys):
    from scratchformer.cli import main

    assert main(["check", str(tmp_path / "nope.py")]) == 2
    assert capsys.readouterr().err.strip() == f"error: {tmp_path / 'nope.py'} does not exist; give the path of your Python file"
    assert main(["check", str(FIX / "keras.py"), "--map", "attention"]) == 2
    err = capsys.readouterr().err
    assert "write KIND=Name" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_cli_train_draws_both_curves(runs):
    p, png = runs["cli_train"]
    assert p.returncode == 0, p.stderr
    assert "train: 训练曲线和参考实现一致 / trains like the reference (loss " in p.stdout
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_language_from_the_locale_chinese_by_default(monkeypatch):
    from scratchformer.commands.check import default_lang

    for var in ("LC_ALL", "LC_MESSAGES", "LANG"):
        monkeypatch.delenv(var, raising=False)
    assert default_lang() == "zh"
    monkeypatch.setenv("LANG", "en_US.UTF-8")
    assert default_lang() == "en"
    monkeypatch.setenv("LC_ALL", "zh_CN.UTF-8")
    assert default_lang() == "zh"
