"""Every output README.md and docs/ quote is what the command printed (scripts/quoted_outputs.py
writes the blocks from real runs and keeps each run's output in docs/quoted.json)."""
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("quoted_outputs", ROOT / "scripts" / "quoted_outputs.py")
Q = importlib.util.module_from_spec(_spec)
sys.modules["quoted_outputs"] = Q  # its dataclasses look their module up there
_spec.loader.exec_module(Q)
RECORD = json.loads(Q.RECORD.read_text(encoding="utf-8"))


def test_every_quoted_block_equals_its_record():
    used = {}
    for path in Q.markdown_files():
        for name, body in Q.blocks(path):
            assert name in Q.QUOTES, f"{path.name}: unknown quoted block {name!r}"
            assert body == Q.render(name, RECORD[name]["output"]), (
                f"{path.relative_to(ROOT)}: the {name!r} block differs from docs/quoted.json; "
                "run `python scripts/quoted_outputs.py`")
            used.setdefault(name, []).append(path.name)
    assert set(used) == set(Q.QUOTES), "a quote nobody shows, or a block nobody writes"
    assert "README.md" in used["predict"] and "README.md" in used["python"]
    for name, q in Q.QUOTES.items():
        assert RECORD[name]["command"] == q.shell()


def test_a_hand_edited_block_is_caught(tmp_path, monkeypatch):
    page = tmp_path / "page.md"
    good = Q.render("params", RECORD["params"]["output"])
    page.write_text(f"<!-- quoted: params -->\n{good.replace('6,665,474', '6,665,475')}<!-- /quoted -->\n")
    monkeypatch.setattr(Q, "markdown_files", lambda: [page])
    assert Q.main(["--check"]) == 1
    page.write_text(f"<!-- quoted: params -->\n{good}<!-- /quoted -->\n")
    assert Q.main(["--check"]) == 0


def test_the_python_example_and_the_command_line_agree():
    """The first thing a newcomer types after `make demo` is the line it prints: the CLI and the
    README's Python example answer the same label for the same headline, and it is the right one."""
    cli = {line.split("\t")[-1]: line.split("\t")[0] for line in RECORD["predict"]["output"].splitlines()}
    py = [line.split() for line in RECORD["python"]["output"].splitlines()]
    headlines = re.findall(r'"([^"]+)"', Q.QUOTES["python"].argv[0].split("predict(")[1].split("]")[0])
    assert headlines[0] == Q.TRY and list(cli) == headlines
    assert [label for label, _ in py] == [cli[h] for h in headlines]
    assert cli[Q.TRY] == "sports"  # 国足 (the national football team) won at home
    assert RECORD["predict"]["model_sha256"] == RECORD["python"]["model_sha256"]  # one model


def test_commands_that_need_no_trained_run_still_print_what_is_quoted(capsys, monkeypatch):
    from scratchformer.cli import main

    monkeypatch.chdir(ROOT)  # the commands name repository paths, as the script runs them
    cheap = [name for name, q in Q.QUOTES.items() if q.run is None and not q.python]
    assert cheap
    for name in cheap:
        capsys.readouterr()
        assert main(Q.QUOTES[name].argv) == Q.QUOTES[name].exit, name
        assert Q.QUOTES[name].pick(capsys.readouterr().out) == RECORD[name]["output"], name


def test_the_demo_model_still_answers_what_is_quoted(capsys, monkeypatch):
    """Rerun where the same demo model is at hand (`make demo` leaves it; a fresh clone has none,
    and training it takes minutes, so CI compares the records above instead)."""
    if Q.model_sha(Q.DEMO) != RECORD["predict"]["model_sha256"]:
        pytest.skip(f"{Q.DEMO} is absent or holds another model than the one the docs quote")
    from scratchformer.cli import main

    monkeypatch.chdir(ROOT)
    capsys.readouterr()
    assert main(Q.QUOTES["predict"].argv) == 0
    assert capsys.readouterr().out == RECORD["predict"]["output"]
    exec(Q.QUOTES["python"].argv[0], {})  # the README's example, as written there
    assert capsys.readouterr().out == RECORD["python"]["output"]
