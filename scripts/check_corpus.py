"""Measure `scratchformer check` on the mutation corpus (tests/check/corpus/): recall of the planted
bug ids over the mutants, precision of the named bug ids over all files, exit 0 on every correct
file, overall, per style and per id, with the seconds per file and the list of misses and false
findings. Writes benchmarks/results/check_corpus.json and .md.

    PYTHONPATH=$PWD/src OMP_NUM_THREADS=1 python scripts/check_corpus.py
    PYTHONPATH=$PWD/src OMP_NUM_THREADS=1 python scripts/check_corpus.py --only llama   # cases whose name has it

The same measurement as tests/check/test_corpus.py (which asserts recall >= 90%, precision >= 95%,
every correct file exit 0); the checker runs in process, one file after another, on one thread.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # benchmarks/
sys.path.insert(0, str(ROOT / "tests" / "check" / "corpus"))
from benchmarks.common import header_md, machine_info, md_table, write_result  # noqa: E402
from measure import figures, load_sibling, run_all  # noqa: E402


def pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def markdown(f, machine: dict, only: str | None, checker: str) -> str:
    extra = (f"Checker: `{checker}`. {f.mutants} mutants and {f.correct_files} correct files"
             + (f" (only cases whose name contains `{only}`)" if only else "")
             + f"; {f.seconds_total:.0f} s in all, {f.seconds_per_file:.2f} s per file on average,"
             f" {f.seconds_max:.1f} s the slowest, one thread.\n")
    out = [header_md("scratchformer check on the mutation corpus", machine, extra)]
    out.append(md_table(["", "figure", "goal"], [
        ["recall of the planted ids (mutants)", f"{pct(f.recall)} ({f.hits}/{f.mutants})", ">= 90%"],
        ["precision of the named bug ids (all files)", f"{pct(f.precision)} ({f.named_right}/{f.named})", ">= 95%"],
        ["correct files that exit 0", f"{f.correct_exit0}/{f.correct_files}", "all"],
    ]))
    out.append("\n## Per style\n")
    out.append(md_table(["style", "mutants", "recall", "precision", "correct files exit 0"], [
        [s, v["mutants"], pct(v.get("recall")), pct(v["precision"]), f"{v['exit0']}/{v['correct']}"]
        for s, v in f.by_style.items()]))
    out.append("\n## Per bug id\n")
    out.append(md_table(["id", "mutants", "recall", "named", "precision"], [
        [i, v["mutants"], pct(v.get("recall")), v["named"], pct(v["precision"])] for i, v in f.by_id.items()]))
    out.append("\n## Correct files that did not exit 0\n")
    out.append("\n".join(f"- `{c['case']}`: exit {c['exit']}, named {c['named']} {c['error']}".rstrip()
                         for c in f.correct_failing) or "none")
    out.append("\n## Mutants whose id was not named\n")
    out.append("\n".join(f"- `{m['case']}`: expected {m['expected']}, named {m['named']}, exit {m['exit']} "
                         f"{m['error']}".rstrip()
                         for m in f.misses) or "none")
    out.append("\n## False findings (a bug id named that is not the planted one)\n")
    out.append("\n".join(f"- `{x['case']}`: named {x['named']}, expected {x['expected']}"
                         for x in f.false_findings) or "none")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="only the cases whose name contains this text")
    ap.add_argument("--quiet", action="store_true", help="no line per file")
    ap.add_argument("--out", type=Path, help="results folder (default benchmarks/results)")
    args = ap.parse_args(argv)

    import torch
    import scratchformer.check as checker

    torch.set_num_threads(1)
    cases = load_sibling("mutations").cases()
    if args.only:
        cases = [c for c in cases if args.only in c.name]

    def progress(i, n, r):
        if not args.quiet:
            mark = "ok" if (r.hit if r.expected else r.exit_code == 0) else "MISS" if r.expected else "FAIL"
            print(f"[{i + 1}/{n}] {mark:4} {r.name}: exit {r.exit_code} named {sorted(r.named)} {r.seconds:.1f}s"
                  + (f" {r.error}" if r.error else ""), flush=True)

    machine = machine_info()
    t0 = time.perf_counter()
    results = run_all(cases, progress)
    f = figures(results)
    where = str(Path(checker.__file__).resolve().parent)
    result = {"machine": machine, "checker": where, "only": args.only, "wall_seconds": time.perf_counter() - t0,
              "figures": asdict(f),
              "cases": [{"name": r.name, "style": r.style, "expected": sorted(r.expected), "named": sorted(r.named),
                         "exit": r.exit_code, "seconds": round(r.seconds, 3), "error": r.error} for r in results]}
    path = write_result("check_corpus", result, markdown(f, machine, args.only, where), args.out)
    print(f"recall {pct(f.recall)} ({f.hits}/{f.mutants}), precision {pct(f.precision)} ({f.named_right}/{f.named}), "
          f"correct files exit 0: {f.correct_exit0}/{f.correct_files}; {f.seconds_total:.0f} s "
          f"({f.seconds_per_file:.2f} s per file) -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
