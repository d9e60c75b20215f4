"""Write the exercises' skeletons from their solutions: `python exercises/_make_skeletons.py`.

A solution marks each part the learner writes between two comment lines:

        # --- TODO 03a: <hint, 中文 · English>
        ...the solution's lines...
        # --- end TODO

and the skeleton `exercises/NN_name.py` is the same file with each marked part replaced by
`raise NotImplementedError("TODO 03a: <hint>")` at the same indentation. One source for both
means a skeleton can never drift from its solution (tests/check/test_exercises.py checks that
every skeleton equals what this script writes).

It also writes `exercises/mistakes/`: a solution with one classic mistake in one line, the files
docs/check.md runs `scratchformer check` on (so the page shows the checker's real output on them).
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
START = re.compile(r"^(?P<indent>\s*)# --- (?P<hint>TODO \w+: .*)$")
END = re.compile(r"^\s*# --- end TODO$")


def skeleton(solution: str) -> str:
    out, inside = [], False
    for line in solution.splitlines():
        start = START.match(line)
        if start:
            if inside:
                raise ValueError(f"a TODO opens inside another: {line.strip()}")
            inside = True
            out.append(f"{start['indent']}raise NotImplementedError({start['hint']!r})")
        elif END.match(line):
            if not inside:
                raise ValueError("an `# --- end TODO` without its TODO")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError("a TODO is not closed by `# --- end TODO`")
    return "\n".join(out) + "\n"


# mistakes/NAME: (the solution it starts from, the line as solved, the line with the mistake)
MISTAKES = {
    "01_no_scale.py": ("01_attention.py", "scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)  # (..., Tq, Tk)",
                       "scores = query @ key.transpose(-2, -1)  # (..., Tq, Tk): the 1/√d_k is forgotten"),
    "01_mask_fill_zero.py": ("01_attention.py", "scores = scores.masked_fill(mask == 0, -1e9)",
                             "scores = scores.masked_fill(mask == 0, 0)  # 0, not -1e9: exp(0) = 1"),
}


def mistake(name: str) -> str:
    source, right, wrong = MISTAKES[name]
    text = (HERE / "solutions" / source).read_text(encoding="utf-8")
    if text.count(right) != 1:
        raise ValueError(f"mistakes/{name}: the line {right!r} is not once in solutions/{source}")
    note = f"# 一个典型错误 · A typical mistake: solutions/{source} with one line changed (docs/check.md)\n"
    return note + text.replace(right, wrong)


def pairs() -> list[tuple[Path, Path]]:
    """(solution, skeleton) for every step with a skeleton (1-11; step 12 is a whole file of yours)."""
    return [(s, HERE / s.name) for s in sorted((HERE / "solutions").glob("[0-9][0-9]_*.py")) if s.name[:2] <= "11"]


def main() -> int:
    for solution, target in pairs():
        text = skeleton(solution.read_text(encoding="utf-8"))
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
            print(f"wrote {target.relative_to(HERE.parent)}")
    (HERE / "mistakes").mkdir(exist_ok=True)
    for name in MISTAKES:
        target, text = HERE / "mistakes" / name, mistake(name)
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
            print(f"wrote {target.relative_to(HERE.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
