"""A learner's code never outlives or bends its check (issue 54, rule 2): every process it starts
ends with the check (a fork, a `setsid` grandchild, Ctrl-C on an endless loop), its output is
bounded, the message names what happened, and a replaced torch function is reported (exit 2)
instead of bending the reference. The exercises' grader goes through the same machinery."""
import importlib.util
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from scratchformer.check import check_file
from scratchformer.check.guard import TorchGuard

FIX = Path(__file__).parent / "fixtures"
EX = Path(__file__).resolve().parents[2] / "exercises"
FORK = ("import os, time\n"
        "r, w = os.pipe()\n"
        "if os.fork() == 0:\n"  # a child that sleeps, and a setsid grandchild (double fork) that sleeps
        "    if os.fork() == 0:\n"
        "        os.setsid()\n"
        "        os.write(w, b'x')\n"
        "        time.sleep(300)\n"
        "    time.sleep(300)\n"
        "os.read(r, 1)\n")  # both exist before the file goes on, so the count is 2 however loaded the machine
PLANTED = {
    "fork": "import torch\n" + FORK,
    "fork_loop": "import torch\n" + FORK + "while True:\n    pass\n",
    "flood": "import torch, sys\nwhile True:\n    print('x' * 1000)\n",
    "thread": "import threading, time, torch\nthreading.Thread(target=lambda: time.sleep(300), name='looper').start()\n",
}


def alive(marker: str) -> list[str]:
    """Command lines of live (non-zombie) processes that mention `marker`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmd and state != "Z" and int(pid) != os.getpid():
            found.append(cmd)
    return found


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("planted")
    files = {}
    for name, src in PLANTED.items():
        files[name] = tmp / f"{name}.py"
        files[name].write_text(src, encoding="utf-8")

    def timed(p):
        t0 = time.perf_counter()
        return check_file(p, lang="en", timeout_s=2, memory_mb=1024), time.perf_counter() - t0, p

    with ThreadPoolExecutor(max_workers=len(files)) as pool:
        return dict(zip(files, pool.map(timed, files.values())))


@pytest.mark.parametrize("name", ["fork", "fork_loop"])
def test_a_fork_and_a_setsid_grandchild_end_with_the_check(planted, name):
    report, seconds, path = planted[name]
    assert report.exit_code == 2
    if name == "fork":
        assert report.error.startswith("your code started 2 process(es) (a fork, a subprocess, a setsid) still "
                                       "running when the check ended; they were stopped"), report.error
    else:
        assert report.error.startswith("the check did not finish within 2 s: an endless loop"), report.error
        assert "; the 2 process(es) it started were stopped too" in report.error.split(" / ")[0]
    assert seconds < 45  # was: waiting for the grandchildren's 300 s (it held `--timeout 5` for 54 s)
    assert alive(str(path)) == []


def test_an_output_flood_is_named_and_bounded(planted):
    report, _, path = planted["flood"]
    assert report.exit_code == 2
    assert report.error.startswith("your code printed more than 8 MB (a print in a loop?): the check stopped it")
    assert alive(str(path)) == []


def test_a_thread_left_running_is_named_not_an_endless_loop(planted):
    report, seconds, path = planted["thread"]
    assert report.error.startswith("your code left a thread running (looper) after the check"), report.error
    assert alive(str(path)) == []


def test_ctrl_c_on_an_endless_loop_stops_every_process_it_started(tmp_path):
    learner = tmp_path / "endless.py"
    learner.write_text("import torch\n" + FORK + "while True:\n    pass\n", encoding="utf-8")
    p = subprocess.Popen([sys.executable, "-m", "scratchformer.cli", "check", str(learner), "--timeout", "600"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(alive(str(learner))) < 4 and time.monotonic() < deadline:  # the child, its fork, the grandchild
        time.sleep(0.1)                                                  # (and the supervisor naming it)
    assert len(alive(str(learner))) >= 4, alive(str(learner))
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 130 and err.strip() == "interrupted", (out, err)
    assert alive(str(learner)) == []


WRONG_ATTENTION = (FIX / "keras.py").read_text(encoding="utf-8").replace(
    "torch.softmax(scaled_attention_logits, dim=-1)", "torch.softmax(scaled_attention_logits, dim=-2)")


@pytest.mark.parametrize("patch, name", [
    ("_soft = torch.softmax\ntorch.softmax = lambda x, dim=-1, **k: _soft(x, dim=-2)\n", "torch.softmax"),
    ("import torch.nn.functional as F\n_soft = torch.Tensor.softmax\n"
     "torch.Tensor.softmax = lambda self, dim=-1, **k: _soft(self, -2)\n", "torch.Tensor.softmax"),
])
def test_a_patched_torch_function_is_reported_not_matched(tmp_path, patch, name):
    assert "dim=-2" in WRONG_ATTENTION
    learner = tmp_path / "patched.py"
    learner.write_text("import torch\n" + patch + WRONG_ATTENTION, encoding="utf-8")
    report = check_file(learner, lang="en", timeout_s=60)
    assert report.exit_code == 2
    assert report.error.startswith(f"your file replaces {name}: the reference computes with torch's own"), report.error


def test_the_guard_refuses_a_module_function_and_sees_a_tensor_method():
    import torch.nn.functional as F

    real_softmax, real_relu = torch.softmax, torch.Tensor.relu
    guard = TorchGuard()
    try:
        torch.softmax = lambda x, dim=-1: x  # refused: the reference keeps torch's own
        F.gelu = F.relu
        assert torch.softmax is real_softmax and F.gelu is not F.relu
        torch.Tensor.relu = lambda self: self  # a class attribute: seen after
        assert guard.replaced() == ["torch.softmax", "torch.nn.functional.gelu", "torch.Tensor.relu"]
    finally:
        torch.Tensor.relu = real_relu
        guard.release()
    torch.softmax = real_softmax  # after release, a plain module again


def grader():
    spec = importlib.util.spec_from_file_location("grade_under_test", EX / "_grade.py")
    g = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = g  # its dataclasses look their module up there
    spec.loader.exec_module(g)
    return g


def test_the_grader_fails_an_exit_at_import_and_grades_through_the_same_machinery(tmp_path, capsys):
    G = grader()
    exits = tmp_path / "09_transformer.py"
    exits.write_text("import sys\n\n\ndef main():\n    return 0\n\n\nsys.exit(main())\n", encoding="utf-8")
    grade = G.grade_file(exits)
    assert grade.exit_code == 2
    assert grade.error.startswith("your file called exit(0) while being loaded (09_transformer.py, line 8)")
    forks = tmp_path / "02_masks.py"
    forks.write_text((EX / "solutions" / "02_masks.py").read_text(encoding="utf-8") + FORK, encoding="utf-8")
    assert G.main([str(exits)]) == 2 and "called exit(0)" in capsys.readouterr().out
    assert G.main([str(forks)]) == 2
    assert "02_masks.py: could not be graded · 无法评分: your code started 2 process(es)" in capsys.readouterr().out
    assert alive(str(forks)) == []


@pytest.mark.parametrize("flag, value", [("--timeout", "-5"), ("--timeout", "0"), ("--timeout", "nan"),
                                         ("--timeout", "inf"), ("--memory-mb", "-5"), ("--memory-mb", "0"),
                                         ("--memory-mb", "nan"), ("--memory-mb", "inf")])
def test_limits_are_finite_and_above_zero(capsys, flag, value):
    from scratchformer.cli import main

    assert main(["check", str(FIX / "keras.py"), flag, value]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {flag} {float(value)}: give a finite number above 0 ({'seconds' if flag == '--timeout' else 'megabytes'}"\
        f", e.g. {flag} {60 if flag == '--timeout' else 4096})\n"


def test_a_directory_named_like_a_file_is_called_a_directory(tmp_path, capsys):
    from scratchformer.cli import main

    (tmp_path / "x.py").mkdir()
    assert main(["check", str(tmp_path / "x.py")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'x.py'} is a directory, not a file; give the .py file of your Transformer\n"
