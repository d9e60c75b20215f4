"""File writes that never follow a link: what the no-follow walk costs a checkpoint and a small JSON.

`scratchformer.fileio` reaches every file from its run folder one folder at a time (``openat``
with ``O_NOFOLLOW``), makes temp files with ``O_EXCL | O_NOFOLLOW`` and deletes with a folder
descriptor. The plain way it replaced (kept here, in `plain_*`, only to compare) opened paths
directly: ``mkstemp`` + ``os.replace`` + ``shutil.rmtree``. Both run here side by side, in one
process, interleaved, same payloads, same folder kind:
  - a checkpoint save (`CheckpointStore.save`: two files in a fresh step folder, its rename,
    the pointer, the pruning of the previous step) of a d256/4-layer encoder's size
    (weights ~20 MB, optimizer state ~40 MB; `--quick`: 1/100 of that);
  - a small JSON (1 KiB) written atomically two folders below the run folder.
Both include every fsync, as a real save does: the disk's fsync time dominates and drifts, so
read the per-repetition ratios.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from scratchformer import fileio
from scratchformer.train.checkpoint_store import CheckpointStore

from . import common


# ----------------------------------------------------------------------------- the plain way (before)
def plain_atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    fileio.fsync_dir(path.parent)


def plain_save(run: Path, step: int, weights: bytes, state: bytes) -> None:
    root = run / "checkpoints"
    name = f"step-{step:08d}"
    tmp, final = root / f".tmp-{name}-{os.getpid()}", root / name
    root.mkdir(parents=True, exist_ok=True)
    tmp.mkdir()
    for fname, data in (("weights.safetensors", weights), ("state.pt", state)):
        with open(tmp / fname, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    fileio.fsync_dir(tmp)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    fileio.fsync_dir(root)
    ptr = {"format": 2, "dir": f"checkpoints/{name}", "step": step, "files": {"weights.safetensors": len(weights)}}
    plain_atomic_write(run / "checkpoint.json", (json.dumps(ptr) + "\n").encode())
    for p in root.iterdir():
        if p.name != name:
            shutil.rmtree(p)


def os_calls_per_save(save, run: Path) -> int:
    """How many `os` calls (open, stat, fsync, rename, ...) one save after the first makes: the
    walk's extra work, counted instead of timed (a count does not drift with the load)."""
    names = ("open", "close", "stat", "lstat", "fstat", "fsync", "replace", "rename", "mkdir", "rmdir",
             "unlink", "listdir", "scandir", "fchmod", "chmod")
    real = {n: getattr(os, n) for n in names}
    count = [0]

    def counting(fn):
        def call(*a, **k):
            count[0] += 1
            return fn(*a, **k)
        return call

    save(run, 1)
    for n in names:
        setattr(os, n, counting(real[n]))
    try:
        save(run, 2)
    finally:
        for n in names:
            setattr(os, n, real[n])
    return count[0]


# ----------------------------------------------------------------------------- the benchmark
def plan(quick: bool) -> dict:
    if quick:
        return dict(weights=200_000, state=400_000, reps=3, json_reps=20)
    return dict(weights=20_000_000, state=40_000_000, reps=21, json_reps=200)


def run(quick: bool = False, out_dir=None, log=print) -> dict:
    p = plan(quick)
    weights, state = os.urandom(p["weights"]), os.urandom(p["state"])
    small = json.dumps({"k": "v" * 1000}).encode()
    with tempfile.TemporaryDirectory(prefix="sf-bench-fileio-") as d:
        runs = {"no_follow": Path(d) / "a", "plain": Path(d) / "b"}
        step = {"n": 0}

        def save_no_follow():
            step["n"] += 1
            CheckpointStore(runs["no_follow"]).save(step["n"], weights, state)

        def save_plain():
            step["n"] += 1
            plain_save(runs["plain"], step["n"], weights, state)

        log("[fileio] checkpoint saves")
        ck = common.interleaved({"no_follow": save_no_follow, "plain": save_plain}, p["reps"])

        def json_no_follow():
            for _ in range(p["json_reps"]):
                fileio.atomic_write_bytes(runs["no_follow"] / "cells" / "a=1" / "seed0.json", small, root=runs["no_follow"])

        def json_plain():
            for _ in range(p["json_reps"]):
                plain_atomic_write(runs["plain"] / "cells" / "a=1" / "seed0.json", small)

        log("[fileio] small JSON writes")
        js = common.interleaved({"no_follow": json_no_follow, "plain": json_plain}, max(3, p["reps"] // 3))
        # the walk's own cost, without the disk's: fsync stubbed out (both sides), more repetitions
        real_fsync = os.fsync
        os.fsync = lambda fd: None
        try:
            log("[fileio] the same without fsync")
            ck_nf = common.interleaved({"no_follow": save_no_follow, "plain": save_plain}, 3 * p["reps"])
            js_nf = common.interleaved({"no_follow": json_no_follow, "plain": json_plain}, p["reps"])
        finally:
            os.fsync = real_fsync
        calls = {"no_follow": os_calls_per_save(lambda r, i: CheckpointStore(r).save(i, b"w" * 100, b"s" * 100), Path(d) / "c"),
                 "plain": os_calls_per_save(lambda r, i: plain_save(r, i, b"w" * 100, b"s" * 100), Path(d) / "e")}
        fs_note = "?"
        with contextlib.suppress(OSError):
            fs = os.statvfs(d)
            fs_note = f"block size {fs.f_bsize}"
    res = {
        "title": "No-follow file writes: checkpoint saves and small JSON",
        "machine": common.machine_info(),
        "settings": {"weights_bytes": p["weights"], "state_bytes": p["state"], "json_bytes": len(small),
                     "json_writes_per_rep": p["json_reps"], "folder": "a temporary folder (" + fs_note + ")"},
        "reps": len(ck["plain"]),
        "checkpoint_s": {n: common.summary(v) for n, v in ck.items()},
        "checkpoint_ratio_no_follow_over_plain": common.paired_ratio(ck["no_follow"], ck["plain"]),
        "json_ms_per_write": {n: common.summary([t * 1000 / p["json_reps"] for t in v]) for n, v in js.items()},
        "json_ratio_no_follow_over_plain": common.paired_ratio(js["no_follow"], js["plain"]),
        "no_fsync": {
            "checkpoint_s": {n: common.summary(v) for n, v in ck_nf.items()},
            "checkpoint_ratio_no_follow_over_plain": common.paired_ratio(ck_nf["no_follow"], ck_nf["plain"]),
            "json_us_per_write": {n: common.summary([t * 1e6 / p["json_reps"] for t in v]) for n, v in js_nf.items()},
            "json_ratio_no_follow_over_plain": common.paired_ratio(js_nf["no_follow"], js_nf["plain"]),
        },
        "os_calls_per_checkpoint_save": calls,
        "targets": [],
    }
    for key, label in (("checkpoint_ratio_no_follow_over_plain", "with fsync"), (None, "without fsync")):
        r = (res[key] if key else res["no_fsync"]["checkpoint_ratio_no_follow_over_plain"])["median"]
        res["targets"].append(common.target(f"checkpoint save time, {label}: no-follow / plain", r, 1.05,
                                            higher_is_better=False, note="not measurably slower: within 5%"))
    common.write_result("fileio", res, to_markdown(res), out_dir)
    return res


def to_markdown(res: dict) -> str:
    s = res["settings"]
    parts = [common.header_md(res["title"], res["machine"],
                              f"Checkpoint: weights {s['weights_bytes'] / 1e6:.1f} MB + state {s['state_bytes'] / 1e6:.1f} MB "
                              f"per save (with pruning of the previous step); JSON: {s['json_bytes']} bytes, "
                              f"{s['json_writes_per_rep']} writes per repetition, two folders below the run folder. "
                              f"Every fsync included. Median (min–max) of {res['reps']} interleaved repetitions; "
                              "ratios per repetition. Command: `python -m benchmarks.fileio`.")]
    rows = [["checkpoint save (s)", common.fmt_stat(res["checkpoint_s"]["no_follow"]), common.fmt_stat(res["checkpoint_s"]["plain"]),
             common.fmt_stat(res["checkpoint_ratio_no_follow_over_plain"], suffix="×")],
            ["small JSON, ms per write", common.fmt_stat(res["json_ms_per_write"]["no_follow"]),
             common.fmt_stat(res["json_ms_per_write"]["plain"]), common.fmt_stat(res["json_ratio_no_follow_over_plain"], suffix="×")]]
    nf = res["no_fsync"]
    rows += [["checkpoint save without fsync (s)", common.fmt_stat(nf["checkpoint_s"]["no_follow"]),
              common.fmt_stat(nf["checkpoint_s"]["plain"]), common.fmt_stat(nf["checkpoint_ratio_no_follow_over_plain"], suffix="×")],
             ["small JSON without fsync, µs per write", common.fmt_stat(nf["json_us_per_write"]["no_follow"]),
              common.fmt_stat(nf["json_us_per_write"]["plain"]), common.fmt_stat(nf["json_ratio_no_follow_over_plain"], suffix="×")]]
    parts.append(common.md_table(["write", "no-follow (fileio)", "plain paths (before)", "no-follow / plain"], rows))
    c = res["os_calls_per_checkpoint_save"]
    parts.append(f"One checkpoint save makes {c['no_follow']} `os` calls with the no-follow walk and {c['plain']} "
                 "the plain way (counted, not timed): the difference is metadata-only calls (open a folder, stat a "
                 "name), microseconds each, against a save of tens of MB.")
    parts.append("With fsync the disk decides (its time varies several-fold between repetitions on a shared "
                 "machine); without fsync what remains is the work of the two ways themselves.")
    parts.append("## Targets\n\n" + common.targets_md(res["targets"]))
    return "\n\n".join(parts)


def main(argv=None):
    common.cli(run, __doc__, argv)


if __name__ == "__main__":
    main()
