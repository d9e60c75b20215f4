"""What every benchmark shares: interleaved timing, summaries, machine facts, JSON + Markdown.

Machines here are shared and drift by ±30% between processes, so every benchmark measures
all contenders in one process, interleaved (rep 1: a, b, c; rep 2: b, c, a; ...), and
reports medians with min–max. Ratios are taken *per repetition* (the contenders of one
repetition ran under the same load) and then summarised the same way.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import torch

RESULTS_DIR = Path(__file__).resolve().parent / "results"
SCHEMA_VERSION = 1


# ----------------------------------------------------------------------------- timing

def interleaved(fns: dict[str, Callable[[], object]], reps: int, warmup: int = 1,
                budget_s: float | None = None, min_reps: int = 3,
                clock: Callable[[], float] = time.perf_counter) -> dict[str, list[float]]:
    """Seconds per call of each function, `reps` times each, interleaved with a rotating
    start so that no contender always runs first (or right after the same neighbour).

    With `budget_s`, the last warm-up round's duration predicts a round's cost and `reps`
    is lowered (never below `min_reps`) so that the repetitions fit the budget: a loaded
    machine then gives fewer repetitions instead of a `make bench` that runs for an hour.

    `clock=time.process_time` times the CPU this process used (all its threads) instead of the
    wall clock: for one-thread contenders on a shared machine, where the scheduler's slices
    decide a wall-clock time more than the code does.
    """
    names = list(fns)
    round_s = 0.0
    for _ in range(warmup):
        t0 = time.perf_counter()
        for n in names:
            fns[n]()
        round_s = time.perf_counter() - t0
    if budget_s is not None and round_s > 0:
        reps = max(min(reps, min_reps), min(reps, int(budget_s / round_s)))
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(reps):
        order = names[r % len(names):] + names[: r % len(names)]
        for n in order:
            t0 = clock()
            fns[n]()
            times[n].append(clock() - t0)
    return times


@contextlib.contextmanager
def env_var(name: str, value: str):
    """`os.environ[name] = value` inside the block, the earlier value (or none) after it."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def summary(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def rate_summary(work: float, seconds: list[float]) -> dict[str, float]:
    """`work` units per second for each repetition, summarised."""
    return summary([work / s for s in seconds])


def paired_ratio(num: list[float], den: list[float]) -> dict[str, float]:
    """Ratio `num[i] / den[i]` per repetition (times: pass the peer's time as num and ours
    as den to get 'ours is x times faster'), summarised."""
    return summary([a / b for a, b in zip(num, den)])


# ----------------------------------------------------------------------------- machine

def cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown"
    m = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    return m.group(1).strip() if m else "unknown"


def cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    m = re.search(r"^flags\s*:\s*(.+)$", text, re.M)
    flags = m.group(1).split() if m else []
    return sorted(f for f in flags if f.startswith(("avx512", "amx")) or f in ("avx2", "fma", "avx_vnni"))


def machine_info() -> dict:
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_flags": cpu_flags(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "loadavg_at_start": load,
    }


# ----------------------------------------------------------------------------- output

def _sig(x: float, digits: int) -> str:
    """`digits` significant digits in fixed-point notation (no exponent)."""
    if x == 0:
        return "0"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(x)))))
    return f"{x:.{decimals}f}"


def fmt_num(x: float | None, digits: int = 3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    ax = abs(x)
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if ax >= scale:
            return _sig(x / scale, digits) + suffix
    return _sig(x, digits)


def fmt_stat(s: dict | None, digits: int = 3, suffix: str = "") -> str:
    """`median (min–max)`."""
    if not s:
        return "–"
    return f"{fmt_num(s['median'], digits)}{suffix} ({fmt_num(s['min'], digits)}–{fmt_num(s['max'], digits)})"


def load_note(loads: list[float], busy_tail: str = ".", quiet_tail: str = ".") -> str:
    """One sentence on the machine's load average over a benchmark (the 1-minute values its
    cells recorded): "shared" above 2 on these 2 cores, else the range."""
    if loads and max(loads) > 2.0:
        return f"**The machine was shared with other jobs** (load average up to {max(loads):.1f} on 2 cores){busy_tail}"
    return f"Load average {min(loads, default=0):.1f}–{max(loads, default=0):.1f} on 2 cores{quiet_tail}"


def md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def target(name: str, value: float | None, goal: float, higher_is_better: bool = True,
           unit: str = "x", note: str = "") -> dict:
    met = None if value is None else (value >= goal if higher_is_better else value <= goal)
    return {"name": name, "value": value, "goal": goal, "unit": unit, "met": met, "note": note}


def targets_md(targets: list[dict]) -> str:
    rows = []
    for t in targets:
        val = "–" if t["value"] is None else f"{t['value']:.3g}{t['unit']}"
        met = {True: "yes", False: "**no**", None: "n/a"}[t["met"]]
        rows.append([t["name"], val, f"{t['goal']:g}{t['unit']}", met, t.get("note", "")])
    return md_table(["target", "measured (median)", "goal", "met", "note"], rows)


def write_result(name: str, result: dict, markdown: str, out_dir: Path | None = None) -> Path:
    """`<out_dir>/<name>.json` and `<name>.md`; returns the JSON path."""
    from scratchformer import fileio  # the one atomic writer: no half-written table, no link followed

    out_dir = fileio.make_dirs(RESULTS_DIR if out_dir is None else Path(out_dir))
    result = {"schema": SCHEMA_VERSION, "benchmark": name, **result}
    path = out_dir / f"{name}.json"
    fileio.atomic_write_text(path, json.dumps(result, indent=2, default=_json_default) + "\n")
    fileio.atomic_write_text(out_dir / f"{name}.md", markdown.rstrip() + "\n")
    return path


def _json_default(o):
    if isinstance(o, torch.Tensor):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def classifier_line(s: dict) -> str:
    """The words for the scratch classifier `s` describes (parameters, vocabulary, buckets, sizes)."""
    return (f"{s['parameters'] / 1e6:.1f}M parameters: vocabulary {s['vocab']:,}, {s['buckets']:,} bigram buckets, "
            f"d{s['d_model']}, d_ff {s['d_ff']}, {s['layers']} layers")


def header_md(title: str, machine: dict, extra: str = "") -> str:
    m = machine
    return (f"# {title}\n\n"
            f"{m['date']} · {m['cpu_model']} · {m['threads']} threads · capability {m['cpu_capability']}"
            f" · torch {m['torch']}\n\n{extra}").rstrip() + "\n"


def cli(run, doc: str, argv=None, options: dict[str, tuple[str, str]] | None = None) -> None:
    """The command line every benchmark module shares: `--quick` (toy sizes, the smoke test)
    and `--out` (results folder), then `run(quick, out)`. `options` adds string flags,
    keyword of `run` -> (flag, help), e.g. `{"run_dir": ("--run", "...")}`."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="toy sizes, seconds (the smoke test)")
    ap.add_argument("--out", default=None, help="results folder (default benchmarks/results)")
    for name, (flag, help_text) in (options or {}).items():
        ap.add_argument(flag, dest=name, default=None, help=help_text)
    a = ap.parse_args(argv)
    run(a.quick, a.out, **{name: getattr(a, name) for name in options or {}})


# ----------------------------------------------------------------------------- peak memory (Linux)

def _status() -> dict[str, int]:
    text = Path("/proc/self/status").read_text()
    return {k: int(re.search(k + r":\s+(\d+)", text).group(1)) * 1024 for k in ("VmRSS", "VmHWM")}


def peak_bytes(fn, inference: bool = False) -> int | None:
    """Resident high-water mark of one call of `fn` above the resident size before it (Linux;
    None elsewhere). `inference`: call it under `torch.inference_mode()`."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset VmHWM to the current resident size
        before = _status()["VmRSS"]
        if inference:
            with torch.inference_mode():
                out = fn()
        else:
            out = fn()
        after = _status()["VmHWM"]
        del out
        return max(0, after - before)
    except OSError:
        return None


def memory_in_child(module: str, worker: Callable[[bool], dict], quick: bool, own_process: bool,
                    timeout: int = 600) -> tuple[dict, str]:
    """`worker(quick)` in a child `python -m benchmarks.<module> --memory-worker` started with
    `MALLOC_MMAP_THRESHOLD_=65536` (each tensor over 64 KiB is its own mmap, returned when freed, so
    VmHWM deltas are per call), its JSON result and how it was measured. Not `own_process`, or if
    the child fails: in this process, a lower bound (the allocator may reuse memory)."""
    if not own_process:
        return worker(quick), "in-process VmHWM (allocator may reuse memory: a lower bound)"
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0")
    cmd = [sys.executable, "-m", f"benchmarks.{module}", "--memory-worker"] + (["--quick"] if quick else [])
    try:
        out = subprocess.run(cmd, env=env, cwd=Path(__file__).resolve().parent.parent, capture_output=True,
                             text=True, timeout=timeout, check=True)
        return json.loads(out.stdout.strip().splitlines()[-1]), "child process, MALLOC_MMAP_THRESHOLD_=65536, VmHWM delta"
    except (subprocess.SubprocessError, ValueError, IndexError) as e:
        return worker(quick), f"child process failed ({type(e).__name__}); in-process VmHWM, a lower bound"


def memory_bench_main(doc: str, run: Callable, worker: Callable[[bool], dict], argv=None) -> None:
    """The command line of a benchmark with a memory child: `--quick`, `--out`, and the hidden
    `--memory-worker` that `memory_in_child` starts."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    ap.add_argument("--memory-worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.memory_worker:
        print(json.dumps(worker(a.quick)))
        return
    run(a.quick, a.out)
