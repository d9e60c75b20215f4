"""Mean ± std of the translation-engines target ratios over repeated runs (separate processes).

One run's medians move by ±25% between runs on a shared 2-core machine, so the targets are
read over several runs of `benchmarks.translation_engines` (each one process, interleaved).

    python -m benchmarks.engine_repeats benchmarks/results/translation_engines.json \
        benchmarks/results/translation_engines_hsk_repeat.json benchmarks/results/translation_engines_cpu_time.json
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from . import common
from .translation_engines import TARGET_PAIRS, goal_for

# the target pairs, and ours under bf16 autocast (no goal of its own: what precision="auto" may pick)
PAIRS = {**TARGET_PAIRS, "ours_bf16/ct2_fp32": "ours bf16 / CTranslate2 fp32"}


def summarize(paths: list[Path]) -> tuple[dict, str]:
    by_cell: dict[tuple, dict[str, list[float]]] = {}
    for p in paths:
        for c in json.loads(p.read_text(encoding="utf-8"))["cells"]:
            if c["threads"] != 1:
                continue
            key = (c["size"], c["batch"], c["beam"])
            for pair in PAIRS:
                if pair in c["ours_vs"]:  # runs before 2026-12-01 (session 11) have no bf16 contender
                    by_cell.setdefault(key, {}).setdefault(pair, []).append(c["ours_vs"][pair]["median"])
    rows, out = [], {}
    for (size, batch, beam), pairs in sorted(by_cell.items()):
        for pair, values in pairs.items():
            goal = goal_for(pair, batch) if pair in TARGET_PAIRS else None
            mean = statistics.mean(values)
            std = statistics.stdev(values) if len(values) > 1 else 0.0
            if goal is None:
                verdict = "–"
            elif len(values) == 1:
                verdict = ("met" if mean >= goal else "**not met**") + " (one run: no spread)"
            elif mean - std >= goal:
                verdict = "met"
            elif mean + std < goal:
                verdict = "**not met**"
            else:
                verdict = "inconclusive (goal within one std)"
            out[f"{size} b{batch} beam{beam} {pair}"] = {"values": values, "mean": mean, "std": std, "goal": goal}
            rows.append([size, batch, beam, PAIRS[pair], ", ".join(f"{v:.2f}" for v in values),
                         f"{mean:.2f} ± {std:.2f}", "–" if goal is None else f"{goal:g}", verdict])
    md = ("# Translation decoding vs CTranslate2: target ratios over repeated runs (1 thread)\n\n"
          f"Runs: {', '.join('/'.join(p.parts[-2:]) for p in paths)} (each a separate process; medians of its interleaved "
          "repetitions). Above 1: ours faster. A target counts as met only when mean − std ≥ goal.\n\n"
          + common.md_table(["size", "batch", "beam", "ratio", "per run", "mean ± std", "goal", "verdict"], rows))
    return out, md


def main(argv=None) -> None:
    paths = [Path(a) for a in (argv if argv is not None else sys.argv[1:])]
    if not paths:
        raise SystemExit(__doc__)
    res, md = summarize(paths)
    common.write_result("translation_engines_repeats", {"title": "target ratios over runs", "runs": [str(p) for p in paths],
                                                        "machine": common.machine_info(), "cells": res, "targets": []}, md)
    print(md)


if __name__ == "__main__":
    main()
