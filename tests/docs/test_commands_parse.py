"""Every `scratchformer ...` command a newcomer would paste from the README and the docs parses
as written (issue 33, rule 11): the verb exists, every flag exists, every required argument is
there (`experiment copy-task --bugs` once failed for a missing --out). The cheapest of them also
run: `params --config RECIPE` for every recipe the docs name."""
import re
import shlex
from pathlib import Path

import pytest

from scratchformer.cli import build_cli, main

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "docs" / "zh").glob("*.md"))]


def commands() -> list[tuple[str, str]]:
    """(page:line, command) for each `scratchformer ...` line in the pages' shell blocks."""
    out = []
    for page in PAGES:
        lang, pending = None, ""
        for n, raw in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            stripped = raw.strip()
            if stripped.startswith("```"):
                lang = None if lang is not None else stripped[3:].strip()
                continue
            if lang not in SHELL:
                continue
            line = (pending + " " + stripped if pending else stripped).removeprefix("$ ")
            if line.endswith("\\"):
                pending = line[:-1]
                continue
            pending = ""
            if line.startswith("scratchformer "):
                out.append((f"{page.relative_to(ROOT)}:{n}", line))
        # and the commands quoted in the prose, `scratchformer experiment copy-task --bugs`
        for n, raw in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for m in INLINE.finditer(raw):  # a verb named in passing (`scratchformer sweep`) is not a command
                if len(shlex.split(m.group(1), comments=True)) >= 4:
                    out.append((f"{page.relative_to(ROOT)}:{n}", m.group(1)))
    return out


INLINE = re.compile(r"(?<!`)`(scratchformer [a-z][^`]*)`(?!`)")


SHELL = {"", "bash", "sh", "console", "shell"}


CASES = commands()


def _argv(line: str) -> list[str]:
    argv = shlex.split(line, comments=True)[1:]
    # a pipe or a redirection ends the command
    for stop in ("|", ">", "2>", "&&", ";"):
        if stop in argv:
            argv = argv[:argv.index(stop)]
    return argv


def test_the_pages_hold_commands():
    assert len(CASES) > 40 and any("experiment" in c for _, c in CASES)


@pytest.mark.parametrize("where,line", CASES, ids=[w for w, _ in CASES])
def test_every_documented_command_parses_as_written(where, line, capsys):
    argv = _argv(line)
    if any(part in ("...", "…") or part.startswith(("<", "[")) or "|" in part or part.endswith("…") for part in argv):
        pytest.skip("a schematic line (placeholders), not a command to paste")
    cli = build_cli()
    try:
        args, extra = cli.parser.parse_known_args(argv)
    except SystemExit as e:
        raise AssertionError(f"{where}: `{line}` does not parse: {capsys.readouterr().err.strip()}") from e
    texts_ok = isinstance(getattr(args, "texts", None), list) and not any(e.startswith("-") for e in extra)
    assert not extra or texts_ok, f"{where}: `{line}`: unrecognized arguments {extra}"


RECIPES = sorted({a for _, line in CASES for a in _argv(line) if a.startswith("recipes/") and a.endswith(".json")
                  and (ROOT / a).is_file() and "experiments/" not in a})


@pytest.mark.parametrize("recipe", RECIPES)
def test_the_recipes_the_docs_name_exist_and_count(recipe, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code = main(["params", "--config", recipe])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "parameters" in out.out.lower() or "total" in out.out.lower()
