"""Run every benchmark and write benchmarks/results/ (`make bench`).

    python -m benchmarks.run_all            # full run, about 20 minutes on 2 quiet cores
    python -m benchmarks.run_all --quick    # toy sizes, seconds (what the smoke test runs)
    python -m benchmarks.run_all --only encoder,attention
    python -m benchmarks.run_all --index    # rewrite every <name>.md and README.md from the saved JSON

Each benchmark writes `<name>.json` and `<name>.md`; this script adds `README.md` with the
date, the machine and every benchmark's targets and key ratios.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from . import (attention, bf16, common, data_pipeline, encoder, generation, long_sequence, mfu, optimizer, serve,
               sparse_embeddings, translation)

ORDER = ("encoder", "mfu", "attention", "long_sequence", "bf16", "optimizer", "sparse_embeddings", "generation",
         "translation", "data_pipeline", "serve")
MODULES = {"encoder": encoder, "attention": attention, "long_sequence": long_sequence, "bf16": bf16,
           "generation": generation, "translation": translation, "data_pipeline": data_pipeline, "mfu": mfu,
           "serve": serve, "optimizer": optimizer, "sparse_embeddings": sparse_embeddings}


def run_all(quick: bool = False, out_dir=None, only=None, log=print) -> dict:
    out = common.RESULTS_DIR if out_dir is None else Path(out_dir)
    names = [n for n in ORDER if only is None or n in only]
    results, seconds = {}, {}
    start = common.machine_info()
    for name in names:
        t0 = time.perf_counter()
        if name == "mfu" and "encoder" in results:
            results[name] = mfu.from_encoder(results["encoder"], out)  # the same loop's matmul
        else:
            results[name] = MODULES[name].run(quick=quick, out_dir=out, log=log)
        seconds[name] = time.perf_counter() - t0
        log(f"[run_all] {name} done in {seconds[name]:.0f}s")
    earlier = earlier_results(out, exclude=set(results)) if only is not None and not quick else {}
    write_readme({**earlier, **results}, seconds, start, out, quick,
                 " ".join(["python -m benchmarks.run_all", *sys.argv[1:]])
                 if __name__ == "__main__" else "python -m benchmarks.run_all")
    return results


def earlier_results(out: Path, exclude: set) -> dict:
    """The results an `--only` run did not redo, read back from their JSON files, so that the
    index keeps listing them (each table's own page says when it was measured)."""
    found = {}
    for name in ORDER:
        path = out / f"{name}.json"
        if name not in exclude and path.exists():
            try:
                found[name] = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # an unreadable earlier result is left out of the index, not fatal
    return found


def render_pages(out: Path) -> list[str]:
    """Rewrite each `<name>.md` from its saved `<name>.json` with the benchmark's current
    `to_markdown`, so a corrected text reaches the pages without measuring again. Returns the
    names rewritten."""
    done = []
    for name, res in earlier_results(out, exclude=set()).items():
        (out / f"{name}.md").write_text(MODULES[name].to_markdown(res).rstrip() + "\n", encoding="utf-8")
        done.append(name)
    return done


def write_readme(results: dict, seconds: dict, machine: dict, out: Path, quick: bool,
                 command: str = "python -m benchmarks.run_all") -> None:
    try:
        load_end = os.getloadavg()
    except OSError:
        load_end = None
    m = machine
    lines = [
        "# Benchmark results" + (" (--quick: toy sizes, numbers meaningless)" if quick else ""), "",
        f"- date: {m['date']}",
        f"- CPU: {m['cpu_model']} ({m['cpu_count']} logical CPUs; flags: {', '.join(m['cpu_flags']) or '–'})",
        f"- torch {m['torch']}, `torch.backends.cpu.get_cpu_capability()` = {m['cpu_capability']}, "
        f"{m['threads']} threads, Python {m['python']}",
        f"- load average at start {_load(m['loadavg_at_start'])}, at end {_load(load_end)} "
        "(other jobs share these cores: compare ratios measured in one process, not absolute numbers)",
        (f"- wall time: {sum(seconds.values()):.0f}s (" + ", ".join(f"{k} {v:.0f}s" for k, v in seconds.items()) + ")"
         if seconds else "- this index was rebuilt from the saved results, nothing was run")
        + ("" if set(seconds) >= set(results) else
           f"; the {'other ' * bool(seconds)}tables ({', '.join(n for n in results if n not in seconds)}) are from "
           "earlier runs: each page gives its own date and load"),
        f"- command: `{command}` (`make bench` runs it without options); every contender of a table runs in the "
        "same process, interleaved; medians with min–max over repetitions, ratios per repetition.",
        "",
    ]
    if not seconds:  # an index rebuild: the load now says nothing about the tables
        lines = [x for x in lines if not x.startswith("- load average")]
    busy = [la for la in (m["loadavg_at_start"], load_end) if la and la[0] > (m["cpu_count"] or 1)] if seconds else []
    if busy and m["threads"] > 1:
        lines += ["", f"**Warning:** the load average exceeded the {m['cpu_count']} CPUs during this run: other "
                  "jobs were competing for the cores. Multi-threaded kernels then stall at every parallel "
                  "region, which hurts implementations made of many small operations most; ratios are "
                  "distorted and min–max ranges wide. Re-run on a quiet machine (or with `--threads 1`)."]
    elif busy:
        lines += ["", f"**Note:** the load average exceeded the {m['cpu_count']} CPUs during this run (other jobs "
                  "shared the cores), so it ran with `--threads 1`: no thread stalls at parallel regions, ratios "
                  "stable (see the min–max ranges), absolute numbers below a quiet machine's."]
    lines += ["", "## Targets", ""]
    all_targets = [(name, t) for name, r in results.items() for t in r.get("targets", [])]
    rows = []
    for name, t in all_targets:
        val = "–" if t["value"] is None else f"{t['value']:.3g}{t['unit']}"
        rows.append([f"[{name}]({name}.md)", t["name"], val, f"{t['goal']:g}{t['unit']}",
                     {True: "yes", False: "**no**", None: "n/a"}[t["met"]], t.get("note", "")])
    lines.append(common.md_table(["benchmark", "target", "measured (median)", "goal", "met", "note"], rows))
    lines += ["", "## Tables", ""]
    lines += [f"- [{n}]({n}.md): {results[n].get('title', n)}" for n in results]
    (out / "README.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _load(la) -> str:
    return "–" if not la else "/".join(f"{x:.1f}" for x in la)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="toy sizes, seconds")
    ap.add_argument("--out", default=None, help="results folder (default benchmarks/results)")
    ap.add_argument("--only", default=None, help=f"comma-separated subset of {','.join(ORDER)}")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    ap.add_argument("--index", action="store_true",
                    help="rewrite every <name>.md and README.md from the JSON results already there (runs nothing)")
    a = ap.parse_args(argv)
    if a.index:
        out = common.RESULTS_DIR if a.out is None else Path(a.out)
        render_pages(out)
        write_readme(earlier_results(out, exclude=set()), {}, common.machine_info(), out, False,
                     "python -m benchmarks.run_all --index")
        return
    if a.threads:
        torch.set_num_threads(a.threads)
    only = None if a.only is None else set(a.only.split(","))
    if only and not only <= set(ORDER):
        ap.error(f"unknown benchmark(s): {', '.join(sorted(only - set(ORDER)))}")
    run_all(a.quick, a.out, only)


if __name__ == "__main__":
    main()
