"""Issue 62: a learner's file cannot cheaply tell that it is being checked. It used to see our
modules in `sys.modules` (`scratchformer.check.run`), `__main__` being our child, its own module
named `learner_module`, and SCRATCHFORMER_CHECKING (set by `check()`); a file that behaves
differently under the check then got a verdict about another program. Each file below is right
when it believes it runs alone and wrong (or broken) when it sees the checker."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scratchformer.check import check_file

FIX = Path(__file__).parent / "fixtures"
TELLS = '''import os, sys


def _checked():
    main = sys.modules.get("__main__")
    return (any(k == "scratchformer" or k.startswith("scratchformer.") for k in sys.modules)
            or "SCRATCHFORMER_CHECKING" in os.environ or __name__ == "learner_module"
            or "scratchformer" in (getattr(main, "__file__", "") or ""))


'''
KERAS = (FIX / "keras.py").read_text(encoding="utf-8")
SOFTMAX = "torch.softmax(scaled_attention_logits, dim=-1)"
PLANTED = {
    # decided once, at import: a wrong attention (softmax over the queries) when it sees the checker
    "import": TELLS + "_DIM = -2 if _checked() else -1\n"
              + KERAS.replace(SOFTMAX, "torch.softmax(scaled_attention_logits, dim=_DIM)"),
    # decided at each call, while the checks call it
    "call": TELLS + KERAS.replace(SOFTMAX, "torch.softmax(scaled_attention_logits, dim=-2 if _checked() else -1)"),
}


def statuses(report):
    return [(c.kind, c.name, c.status) for c in report.components]


@pytest.mark.parametrize("when", sorted(PLANTED))
def test_a_file_that_looks_for_the_checker_gets_the_verdict_of_the_file_alone(tmp_path, monkeypatch, when):
    assert SOFTMAX in KERAS
    learner = tmp_path / "my_transformer.py"
    learner.write_text(PLANTED[when], encoding="utf-8")
    alone = subprocess.run([sys.executable, str(learner)], capture_output=True, text=True, timeout=120,
                           env={k: v for k, v in os.environ.items() if k != "SCRATCHFORMER_CHECKING"})
    assert alone.returncode == 0, alone.stderr[-2000:]  # run alone, it is the correct file
    monkeypatch.setenv("SCRATCHFORMER_CHECKING", "1")  # as check() in a notebook used to set it
    report = check_file(learner, lang="en", timeout_s=60)
    assert report.error is None and report.exit_code == 0, (report.error, statuses(report))
    assert statuses(report) == statuses(check_file(FIX / "keras.py", lang="en", timeout_s=60))


def test_a_check_called_inside_the_checked_file_checks_nothing(tmp_path):
    """Without the variable in the child, `check()` in their file (a script that checks itself, or a notebook
    replayed) still starts no check in the check: a nested one would have checked our child instead."""
    learner = tmp_path / "calls_check.py"
    learner.write_text("from scratchformer.check import check\n_NESTED = check(quiet=True)\n" + KERAS.replace(
        SOFTMAX, "torch.softmax(scaled_attention_logits, dim=-1 if _NESTED is None else -2)"), encoding="utf-8")
    report = check_file(learner, lang="en", timeout_s=60)
    assert report.error is None and report.exit_code == 0, report.error
