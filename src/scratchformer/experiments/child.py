"""One training run of a sweep cell, through the ordinary front door (`scratchformer.cli.main`),
with its wall time and peak memory.

Peak memory is the process's resident-set high-water mark (`VmHWM` in /proc/self/status, else
`getrusage().ru_maxrss`). It counts everything the process holds: Python, torch's own
footprint (~300 MiB), the data, the model, activations. `tracemalloc` would miss torch's
allocator, so it is not used. In a process of its own (the sweep's default) the number belongs
to that run alone; in-process the high-water mark is reset before the run where Linux allows it
(`/proc/self/clear_refs`), and whatever earlier runs left allocated still counts.

As a program: `python -m scratchformer.experiments.child RESULT.json train TASK ...` runs
`scratchformer train TASK ...` and writes `{"rc", "wall_s", "peak_rss_mib"}` to RESULT.json.
"""
from __future__ import annotations

import json
import re
import resource
import sys
import time
from pathlib import Path


def reset_peak_rss() -> bool:
    """Reset this process's resident-set high-water mark (Linux >= 4.0); False where not allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss_mib() -> float:
    try:
        status = Path("/proc/self/status").read_text()
        return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024
    except (OSError, AttributeError):
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return rss / 1024 if sys.platform != "darwin" else rss / 2**20  # KiB on Linux, bytes on macOS


def run_train(argv: list[str], own_process: bool = False) -> dict:
    """Run `scratchformer <argv>` here; exit status, seconds and peak RSS (None if unknown).
    `own_process`: this process exists for this run alone, so its peak is the run's anyway."""
    from scratchformer.cli import main

    fresh = reset_peak_rss() or own_process
    t0 = time.monotonic()
    rc = main(argv)
    return {"rc": rc, "wall_s": round(time.monotonic() - t0, 3),
            "peak_rss_mib": round(peak_rss_mib(), 1) if fresh else None}


if __name__ == "__main__":
    result = run_train(sys.argv[2:], own_process=True)
    from scratchformer.fileio import atomic_write_text

    atomic_write_text(sys.argv[1], json.dumps(result) + "\n")
    sys.exit(result["rc"])
