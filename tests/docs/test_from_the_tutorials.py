"""docs/from-the-tutorials.md cannot rot: every ```python block of the page runs (in a fresh
namespace: each snippet stands alone, as a reader copies it), its assertions hold, and an
```text block right after a snippet is exactly what that snippet prints."""
from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
import torch

PAGE = Path(__file__).resolve().parents[2] / "docs" / "from-the-tutorials.md"
FENCE = re.compile(r"```(\w+)\n(.*?)```", re.S)


def snippets() -> list[tuple[int, str, str | None]]:
    """(line, code, expected output or None) for each ```python block, in page order."""
    text = PAGE.read_text(encoding="utf-8")
    blocks = [(text[: m.start()].count("\n") + 1, m.group(1), m.group(2), m.start(), m.end())
              for m in FENCE.finditer(text)]
    out = []
    for i, (line, lang, body, _, end) in enumerate(blocks):
        if lang != "python":
            continue
        nxt = blocks[i + 1] if i + 1 < len(blocks) else None
        follows = nxt is not None and nxt[1] == "text" and text[end:nxt[3]].strip() == ""
        out.append((line, body, nxt[2] if follows else None))
    return out


def test_the_page_has_its_snippets():
    found = snippets()
    assert len(found) >= 8, f"expected a snippet per item, found {len(found)}"
    assert sum(expected is not None for _, _, expected in found) >= 6


@pytest.mark.parametrize("line,code,expected", snippets(), ids=lambda v: f"line{v}" if isinstance(v, int) else "")
def test_snippet_runs_and_prints_what_the_page_shows(line, code, expected):
    torch.manual_seed(0)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, f"{PAGE.name}:{line}", "exec"), {"__name__": "snippet"})
    if expected is not None:
        assert buf.getvalue() == expected
