"""A Jupyter notebook read as its learner runs it: the code cells in order, one Python file, every line mapped back.

读 Jupyter 笔记本：按顺序取出代码单元，跳过魔法命令和 shell 行，报告里的位置写成“第 7 个单元，第 3 行”。

- `%matplotlib inline`, `%%time`, `!pip install ...` and other magics or shell lines become comments (their
  lines stay, so every line number still points at the learner's own line); a cell run by a cell magic
  (`%%bash`, `%%writefile`, `%%capture`, ...) is left out whole, as is a cell that downloads (`wget`,
  `urlretrieve`, `download=True`, `load_dataset(`): the check runs offline and never waits on a network.
- A cell that is not valid Python on its own is left out and said (the notebook may still run the others).
- Training cells are run like the rest: the watch (`watch.py`) stops the program at the model's second step.

`to_source(path)` gives (the Python text, `Cells`); `Cells.where(line)` turns a line of that text into
"cell 7, line 3" (code cells counted from 1 as the notebook shows them, markdown cells not counted).
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

PRELUDE = "try:\n    display\nexcept NameError:\n    display = print  # IPython's display() outside IPython\n"
_DOWNLOAD = re.compile(r"\bwget\b|urlretrieve|urlopen|requests\.get|download\s*=\s*True|load_dataset\(|hf_hub_download|"
                       r"snapshot_download|gdown\b|kaggle\b")
_SKIP_MAGIC = re.compile(r"^\s*%%(?!time\b|timeit\b)\w+")


@dataclass
class Cells:
    path: str
    lines: list = field(default_factory=list)   # line of the text (0-based) -> (cell number, line in cell) | None
    skipped: list = field(default_factory=list)  # "cell 3 (a download)" ...

    def where(self, line: int | None) -> str | None:
        """1-based line of the converted text -> "cell 7, line 3"."""
        if line is None or not 1 <= line <= len(self.lines) or self.lines[line - 1] is None:
            return None
        cell, ln = self.lines[line - 1]
        return f"cell {cell}, line {ln}"

    def describe(self) -> str:
        n = len({c[0] for c in self.lines if c is not None})
        out = f"{Path(self.path).name}: {n} code cells read"
        if self.skipped:
            out += "; left out: " + ", ".join(self.skipped)
        return out


class NotebookError(ValueError):
    """The file is not a notebook we can read; the message says why in one line."""


def _cell_text(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def _magic_free(text: str) -> str:
    """Magics and shell lines as comments (at their indent, with `pass` where a block needs a statement)."""
    out = []
    for line in text.split("\n"):
        s = line.lstrip()
        if s.startswith(("%", "!")) or re.match(r"^\w+\s*=\s*!", s):
            indent = line[: len(line) - len(s)]
            out.append(f"{indent}pass  # {s}" if indent else f"# {s}")
        else:
            out.append(line)
    return "\n".join(out)


def to_source(path) -> tuple[str, Cells]:
    try:
        nb = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise NotebookError(f"{path} is not a readable notebook (.ipynb JSON): {e}") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise NotebookError(f"{path} has no list of cells: is it a Jupyter notebook (nbformat 4)?")
    cells = Cells(str(path))
    parts = [PRELUDE]
    cells.lines.extend([None] * PRELUDE.count("\n"))
    number = 0
    for cell in nb["cells"]:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        number += 1
        text = _cell_text(cell).replace("\r\n", "\n")
        why = None
        if _SKIP_MAGIC.match(text):
            why = "a cell magic"
        elif _DOWNLOAD.search(text):
            why = "a download"
        body = _magic_free(text)
        if why is None:
            try:
                ast.parse(body)
            except SyntaxError as e:
                why = f"not valid Python: {e.msg} at its line {e.lineno}"
        n_lines = body.count("\n") + 1
        if why is not None:
            cells.skipped.append(f"cell {number} ({why})")
            body = "\n".join("# " + ln for ln in body.split("\n"))
        parts.append(body + "\n")
        cells.lines.extend((number, i + 1) for i in range(n_lines))
    if number == 0:
        raise NotebookError(f"{path} has no code cells")
    return "".join(parts), cells
