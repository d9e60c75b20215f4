"""Score `scratchformer check` on a frozen first-contact set, the way a learner meets it: the CLI, one
file at a time, in a child process (exactly `scratchformer check FILE --json --lang en`).

    python scripts/check_first_contact.py tests/check/first_contact/round1 --label "round1, before tuning"
    python scripts/check_first_contact.py tests/check/first_contact/round1 --write   # append to the results page

A set is a folder with `manifest.json`: {"files": {NAME: {"style", "expected": [ids], "what"}}}; an empty
`expected` is a correct file. The figures, as issue 59 counts them:
- correct files: how many exit 0, and how many exit 1 (accused: the worst outcome; must be 0);
- buggy files: how many have one of their expected ids named, and how many exit 0 (a bug let through).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "check_first_contact.md"


def run_one(path: Path, timeout: float) -> dict:
    exe = Path(sys.executable).with_name("scratchformer")
    cmd = [str(exe) if exe.exists() else sys.executable, *([] if exe.exists() else ["-m", "scratchformer.cli"]),
           "check", str(path), "--json", "--lang", "en"]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"rc": None, "ids": [], "seconds": timeout, "error": "timeout"}
    seconds = time.perf_counter() - t0
    try:
        rep = json.loads(p.stdout)
    except json.JSONDecodeError:
        return {"rc": p.returncode, "ids": [], "seconds": seconds, "error": (p.stderr or p.stdout)[-300:]}
    ids = [f["id"] for f in rep.get("findings", []) if f["severity"] == "bug" and f["id"] != "unknown-difference"]
    comps = [(c["kind"], c["name"], c["status"], c["ids"]) for c in rep.get("components", [])]
    return {"rc": p.returncode, "ids": ids, "seconds": seconds, "error": rep.get("error"), "components": comps,
            "where": [f["where"] for f in rep.get("findings", []) if f["severity"] == "bug"]}


def score(folder: Path, timeout: float = 120.0, jobs: int = 2) -> dict:
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    files = manifest["files"]
    with ThreadPoolExecutor(jobs) as ex:
        results = dict(zip(files, ex.map(lambda n: run_one(folder / n, timeout), files)))
    rows = []
    for name, meta in files.items():
        r = results[name]
        expected = set(meta["expected"])
        rows.append({"file": name, "style": meta.get("style", ""), "expected": sorted(expected), **r,
                     "named": bool(expected & set(r["ids"])) if expected else None})
    correct = [r for r in rows if not r["expected"]]
    buggy = [r for r in rows if r["expected"]]
    return {
        "folder": str(folder.relative_to(ROOT)) if folder.is_relative_to(ROOT) else str(folder),
        "correct": len(correct), "correct_exit0": sum(r["rc"] == 0 for r in correct),
        "correct_exit1": sum(r["rc"] == 1 for r in correct),
        "buggy": len(buggy), "named": sum(bool(r["named"]) for r in buggy),
        "buggy_exit0": sum(r["rc"] == 0 for r in buggy),
        "max_seconds": max((r["seconds"] for r in rows), default=0.0),
        "mean_seconds": sum(r["seconds"] for r in rows) / max(1, len(rows)),
        "styles": len({r["style"] for r in rows}),
        "rows": rows,
    }


def table(s: dict, label: str) -> str:
    pct = 100 * s["named"] / max(1, s["buggy"])
    lines = [f"### {label}", "",
             f"`python scripts/check_first_contact.py {s['folder']}` ({s['styles']} styles, "
             f"{s['correct']} correct files, {s['buggy']} with one planted bug; the CLI, one child per file)", "",
             "| figure | measured | goal |", "|---|---|---|",
             f"| correct files that exit 0 | {s['correct_exit0']}/{s['correct']} | ≥ 90% |",
             f"| correct files told \"bugs found\" (exit 1) | **{s['correct_exit1']}** | 0 |",
             f"| planted bugs named by id | **{s['named']}/{s['buggy']} ({pct:.0f}%)** | ≥ 75% at first contact |",
             f"| buggy files that exit 0 | {s['buggy_exit0']} | 0 |",
             f"| seconds a file (mean / max, 2 at a time) | {s['mean_seconds']:.1f} / {s['max_seconds']:.1f} | < 20 |", "",
             "| file | expected | exit | named |", "|---|---|---|---|"]
    for r in s["rows"]:
        exp = ", ".join(r["expected"]) or "(correct)"
        got = ", ".join(dict.fromkeys(r["ids"])) or ("-" if not r.get("error") else "error: " + str(r["error"])[:60].replace("|", "/").replace("\n", " "))
        lines.append(f"| {r['file']} | {exp} | {r['rc']} | {got} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--label", default=None)
    ap.add_argument("--write", action="store_true", help=f"append the table to {RESULTS.relative_to(ROOT)}")
    ap.add_argument("--json", type=Path, default=None, help="also write every row as JSON here")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args(argv)
    s = score(a.folder.resolve(), jobs=a.jobs)
    text = table(s, a.label or a.folder.name)
    print(text)
    if a.json:
        a.json.write_text(json.dumps(s, indent=1, ensure_ascii=False), encoding="utf-8")
    if a.write:
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        head = "" if RESULTS.exists() else (
            "# The checker at first contact\n\nEach round's set was written by someone who did not read the engine, "
            "frozen in `tests/check/first_contact/<round>/`, and scored here before any change was made for it "
            "(issue 59). The figure that counts is the first one of each round.\n\n")
        from scratchformer.fileio import atomic_write_text  # the one writer: whole or not at all
        before = RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else ""
        atomic_write_text(RESULTS, before + head + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
