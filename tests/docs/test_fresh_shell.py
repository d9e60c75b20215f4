"""The docs work pasted into a fresh shell (issue 54, rule 5): where a newcomer looks first (the
README, docs/index.md, their Chinese twins, exercises/README.md) says once how `scratchformer` is
reached after `make demo` / `make test`, `make demo` ends by printing it, and the exercises' commands,
pasted as written into a shell whose PATH has no activated `.venv`, find `scratchformer` and torch."""
import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ACTIVATE = ". .venv/bin/activate"
PAGES = ["README.md", "docs/index.md", "docs/zh/index.md", "exercises/README.md"]


@pytest.mark.parametrize("page", PAGES)
def test_the_first_pages_say_how_scratchformer_is_reached(page):
    text = (ROOT / page).read_text(encoding="utf-8")
    assert f"`{ACTIVATE}`" in text and "`.venv/bin/scratchformer ...`" in text
    if page == "README.md":  # English and Chinese halves
        assert "once per shell" in text and "每打开一个新终端" in text


def test_make_demo_ends_by_printing_it():
    recipe = re.search(r"^demo:.*?\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M).group(1).splitlines()
    assert recipe[-1].startswith("\t@echo") and f"'{ACTIVATE}'" in recipe[-1] and ".venv/bin/scratchformer" in recipe[-1]


def fresh_shell(script: str) -> subprocess.CompletedProcess:
    """bash with nothing of this session: PATH=/usr/bin:/bin, no VIRTUAL_ENV, at the repository root.
    PYTHONPATH names this checkout's src because the shared test venv may hold an editable install of
    another checkout; `make test` installs this one, where it changes nothing."""
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp"), "PYTHONPATH": str(ROOT / "src"),
           "OMP_NUM_THREADS": "1", "LANG": "C.UTF-8"}
    return subprocess.run(["bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def venv():
    if not (ROOT / ".venv" / "bin" / "activate").is_file():
        pytest.skip("no .venv here (make test makes it)")


def test_the_exercises_commands_pasted_into_a_fresh_shell(venv):
    readme = (ROOT / "exercises" / "README.md").read_text(encoding="utf-8")
    block = next(b for b in re.findall(r"```bash\n(.*?)```", readme, re.S) if ACTIVATE in b)
    assert "command not found" in fresh_shell("scratchformer --help").stderr  # the fault: not on PATH
    lines = [ln.split("  #")[0].strip() for ln in block.strip().splitlines()]
    assert lines[0] == ACTIVATE and len(lines) == 3
    script = "\n".join(lines[:1] + [f'{ln}; echo "rc=$?"' for ln in lines[1:]])
    res = fresh_shell(script)
    out = res.stdout + res.stderr
    assert "command not found" not in out and "No module named" not in out, out[-2000:]
    assert re.findall(r"rc=\d+", res.stdout) == ["rc=1", "rc=1"], out[-2000:]  # skeletons: a TODO each
    assert "TODO 03" in res.stdout and "TODO 09a" in res.stdout


def test_the_venv_commands_work_without_activating(venv):
    res = fresh_shell(".venv/bin/scratchformer --help >/dev/null && echo found")
    assert res.returncode == 0 and res.stdout.strip() == "found", res.stderr[-2000:]
