"""Score `train classify|lm --model FILE` on a folder of learner model files written apart from the engine
(a manifest.json lists each file's task, correctness and planted bug): does each train from the CLI, what
calling convention was read, and is each planted bug named by the check before training?

    python scripts/your_model_first_contact.py tests/your_model/first_contact [--json] [--write FILE.md]

Each file trains for a few steps on toy data (two-topic headlines for classifiers, a patterned text for
language models) in its own process, from a copy in a scratch folder without its neighbours."""
from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def _data(tmp: Path) -> dict:
    from toy_data import headlines, write_tsv

    (tmp / "data").mkdir()
    write_tsv(tmp / "data" / "train.tsv", headlines(240, 0))
    rng = random.Random(0)
    words = ["abc", "bcd", "cab", "dab"]
    (tmp / "data" / "text.txt").write_text("\n".join(" ".join(rng.choice(words) for _ in range(10)) for _ in range(300)))
    return {"classify": ["--data", str(tmp / "data" / "train.tsv"), "--set", "train.epochs=2", "--set", "data.max_len=24",
                         "--set", "time_budget=null", "--no-baseline"],
            "lm": ["--data", str(tmp / "data" / "text.txt"), "--set", "data.context=32", "--set", "train.max_steps=20",
                   "--set", "train.eval_every=20"]}


def score(folder: Path) -> list[dict]:
    manifest = json.loads((folder / "manifest.json").read_text())
    entries = manifest if isinstance(manifest, list) else manifest.get("files", manifest)
    rows = []
    with tempfile.TemporaryDirectory(prefix="yours-fc-") as tmp:
        tmp = Path(tmp)
        args = _data(tmp)
        for e in entries:
            name = e["file"]
            work = tmp / Path(name).stem
            work.mkdir()
            shutil.copy(folder / name, work / name)
            cmd = [sys.executable, "-m", "scratchformer.cli", "train", e["task"], "--out", str(work / "run"),
                   "--model", str(work / name), "--set", "train.progress=false", *args[e["task"]]]
            t0 = time.monotonic()
            p = subprocess.run(cmd, capture_output=True, text=True, cwd=work, timeout=600)
            err = p.stderr.strip().splitlines()
            row = {"file": name, "task": e["task"], "correct": e.get("correct", True), "bug": e.get("bug"),
                   "rc": p.returncode, "seconds": round(time.monotonic() - t0, 1),
                   "named": sorted({ln.split()[1] for ln in err if ln.startswith("check: ") and " in " in ln}),
                   "notes": [ln.removeprefix("your model: ") for ln in err if ln.startswith("your model: ")][1:],
                   "error": next((ln for ln in reversed(err) if ln.startswith("error:")), "" if p.returncode == 0
                                 else (err[-1] if err else "?"))}
            cfg = work / "run" / "config.json"
            if cfg.is_file():
                row["call"] = json.loads(cfg.read_text())["model"]["yours"]["call"]
            rows.append(row)
            print(f"{name}: rc {row['rc']}, named {row['named'] or '-'}, {row['error'][:160]}", file=sys.stderr)
    return rows


# the manifest's words for a planted bug -> the catalogue's id (the writer did not know the catalogue)
CATALOGUE_ID = {"reads-future": "no-causal-mask"}


def table(rows: list[dict]) -> str:
    trained = sum(r["rc"] == 0 for r in rows if r["correct"])
    correct = sum(r["correct"] for r in rows)
    bugs = [r for r in rows if r["bug"]]
    named = sum(CATALOGUE_ID.get(r["bug"], r["bug"]) in r["named"] for r in bugs)
    accused = sum(bool(r["named"]) for r in rows if r["correct"])
    lines = [f"correct files that train from the CLI: {trained}/{correct}; planted bugs named before training: "
             f"{named}/{len(bugs)}; correct files with a bug named: {accused}", "",
             "| file | task | rc | named | convention / error |", "|---|---|---|---|---|"]
    for r in rows:
        how = r.get("call", {}).get("mask")
        meaning = {"keep": "keep", "pad": "masked" if how and how["shape"] in ("TT", "11TT") else "pad"}
        how = (f"mask `{how['param']}` {how['shape']} " + ("additive" if how.get("additive") else
               f"{how['dtype']} True={meaning[how['true']]}")) if how else ("no mask" if r["rc"] == 0 else "")
        if r.get("call", {}).get("targets"):
            how += f", passes `{r['call']['targets']}`"
        lines.append(f"| {r['file']} | {r['task']} | {r['rc']} | {', '.join(r['named']) or '-'} | "
                     f"{how if r['rc'] == 0 else r['error'][:200]} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder", type=Path)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--write", type=Path, help="write the table (Markdown) to this file")
    a = ap.parse_args()
    rows = score(a.folder)
    if a.json:
        print(json.dumps(rows, ensure_ascii=False, indent=1))
    text = table(rows)
    print(text)
    if a.write:
        a.write.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
