"""Write the command outputs that README.md and docs/ quote, from real runs.

    make demo                                  # leaves runs/demo, the run most quotes read
    python scripts/quoted_outputs.py           # run every quoted command, rewrite the blocks
    python scripts/quoted_outputs.py --check   # exit 1 if a block differs from its record

A quoted block stands between two markers in the Markdown:

    <!-- quoted: NAME -->
    ... written by this script ...
    <!-- /quoted -->

NAME is a key of QUOTES below. Each run's output is kept in docs/quoted.json (the command, what it
printed, and the sha256 of the model it read), and tests/docs/test_quoted.py checks that every block
still equals its record, reruns the cheap commands, and reruns the others when the same model is at
hand (a fresh clone has no runs/demo: training it takes minutes).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "quoted.json"
DEMO = "runs/demo"
sys.path.insert(0, str(ROOT / "src"))
from scratchformer.demo import TRY  # noqa: E402  the headline `make demo` suggests

SAFE = re.compile(r"[\w./=:-]+", re.A)  # an argument shown without quotes
BLOCK = re.compile(r"(<!-- quoted: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /quoted -->)", re.S)
PYTHON_EXAMPLE = f'''from scratchformer.tasks.classify import Classifier

clf = Classifier.load("{DEMO}")
for r in clf.predict(["{TRY}", "央行宣布下调存款准备金率"]):
    print(r["label"], round(r["score"], 3))
'''


def whole(out: str) -> str:
    return out


def head_block(layer_head: str, rows: int | None = None, queries: tuple[int, ...] = ()) -> Callable[[str], str]:
    """From the top-K table: its first line, then one layer and head with its first `rows` query
    rows, or the rows of the query positions `queries`."""
    def pick(out: str) -> str:
        lines = out.splitlines()
        start = lines.index(f"  {layer_head}")
        end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("    ")), len(lines))
        body = lines[start + 1:end]
        if queries:
            body = [b for b in body if int(b.split(") ->")[0].rsplit("(", 1)[1]) in queries]
        kept = body if rows is None else body[:rows]
        return "\n".join([lines[0], lines[start], *kept, "    ..."]) + "\n"
    return pick


@dataclass
class Quote:
    argv: list[str]  # after `scratchformer` (or `python -c`, with python=True)
    run: str | None = DEMO  # the run folder it reads (None: nothing trained)
    pick: Callable[[str], str] = whole  # the part of the output that is quoted
    python: bool = False
    lang: str = "text"
    exit: int = 0  # the status the command ends with (`check` on a file with a bug: 1)

    def shell(self) -> str:
        if self.python:
            return self.argv[0]
        return "scratchformer " + " ".join(a if SAFE.fullmatch(a) else f'"{a}"' for a in self.argv)


QUOTES = {
    "predict": Quote(["predict", DEMO, TRY, "央行宣布下调存款准备金率"]),
    "attention-keyword-head": Quote(["attention", DEMO, "火箭客场击败湖人 姚明砍下28分", "--top", "3"],
                                    pick=head_block("layer 1 head 2", queries=(4, 6, 11, 13, 15))),
    "doctor": Quote(["doctor", DEMO]),
    "python": Quote([PYTHON_EXAMPLE], python=True, lang="python"),
    "params": Quote(["params", "--config", "recipes/thucnews-demo.json"], run=None),
    # docs/check.md and docs/zh/check.md: the checker on two classic mistakes (exercises/mistakes/)
    "check-no-scale": Quote(["check", "exercises/mistakes/01_no_scale.py", "--lang", "en"], run=None, exit=1),
    "check-mask-fill-zero": Quote(["check", "exercises/mistakes/01_mask_fill_zero.py", "--lang", "en"], run=None, exit=1),
    "check-no-scale-zh": Quote(["check", "exercises/mistakes/01_no_scale.py", "--lang", "zh"], run=None, exit=1),
    "check-mask-fill-zero-zh": Quote(["check", "exercises/mistakes/01_mask_fill_zero.py", "--lang", "zh"], run=None,
                                     exit=1),
    # the styles of today's GPT and LLaMA courses, one planted mistake each (issue 51)
    "check-gpt-video": Quote(["check", "tests/check/fixtures/mistakes/gpt_video_no_causal_mask.py", "--lang", "en"],
                             run=None, exit=1),
    "check-llama": Quote(["check", "tests/check/fixtures/mistakes/llama_rmsnorm_eps_outside.py", "--lang", "en"],
                         run=None, exit=1),
    "check-gpt-video-zh": Quote(["check", "tests/check/fixtures/mistakes/gpt_video_no_causal_mask.py", "--lang", "zh"],
                                run=None, exit=1),
    "check-llama-zh": Quote(["check", "tests/check/fixtures/mistakes/llama_rmsnorm_eps_outside.py", "--lang", "zh"],
                            run=None, exit=1),
}


def run(q: Quote) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, "-c", q.argv[0]] if q.python else [sys.executable, "-m", "scratchformer.cli", *q.argv]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != q.exit:
        raise SystemExit(f"{q.shell()} exited {done.returncode}, not {q.exit}:\n{done.stderr[-2000:]}")
    return q.pick(done.stdout)


def model_sha(run_dir: str | None) -> str | None:
    if run_dir is None:
        return None
    path = ROOT / run_dir / "model.safetensors"
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def render(name: str, output: str) -> str:
    """The Markdown between the markers: the command, then what it printed."""
    q = QUOTES[name]
    if q.python:
        printed = "".join(f"# {line}\n" for line in output.splitlines())
        return f"```python\n{q.argv[0]}{printed}```\n"
    return f"```{q.lang}\n$ {q.shell()}\n{output.rstrip()}\n```\n"


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(path: Path) -> list[tuple[str, str]]:
    return [(m["name"], m["body"]) for m in BLOCK.finditer(path.read_text(encoding="utf-8"))]


def rewrite(path: Path, record: dict) -> bool:
    text = path.read_text(encoding="utf-8")
    new = BLOCK.sub(lambda m: m[1] + render(m["name"], record[m["name"]]["output"]) + m[4], text)
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only compare the blocks with docs/quoted.json")
    ap.add_argument("--only", default=None, help="comma-separated names to run again (default: all)")
    a = ap.parse_args(argv)
    record = json.loads(RECORD.read_text(encoding="utf-8")) if RECORD.exists() else {}
    used = {name for p in markdown_files() for name, _ in blocks(p)}
    unknown = used - set(QUOTES)
    if unknown:
        raise SystemExit(f"unknown quoted block(s): {', '.join(sorted(unknown))}; known: {', '.join(QUOTES)}")
    if a.check:
        stale = [f"{os.path.relpath(p, ROOT)}: {name}" for p in markdown_files() for name, body in blocks(p)
                 if name not in record or body != render(name, record[name]["output"])]
        print("\n".join(stale) or "every quoted block equals its record")
        return 1 if stale else 0
    todo = sorted(used) if a.only is None else a.only.split(",")
    for name in todo:
        q = QUOTES[name]
        if q.run is not None and model_sha(q.run) is None:
            raise SystemExit(f"{q.run}/model.safetensors is missing: run `make demo` first")
        record[name] = {"command": q.shell(), "output": run(q), "run": q.run, "model_sha256": model_sha(q.run)}
        print(f"{name}: {q.shell()}")
    RECORD.write_text(json.dumps(record, ensure_ascii=False, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    changed = [os.path.relpath(p, ROOT) for p in markdown_files() if rewrite(p, record)]
    print("rewrote: " + (", ".join(changed) or "nothing (already current)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
