"""What checking a cache against its completion record costs (issue 54 rule 1).

Every cache folder (prepared data, the decoded e5 model, the BERT cache, exports) is verified
against its record before use (`folders.check_whole`): a file is hashed whole (sha256) only when its
identity (size, mtime_ns, ctime_ns, inode) differs from the one it had at its last check that
passed, which a sidecar (`.complete.verified`) keeps between processes. Measured here, on two
synthetic caches under a temporary folder:

  * a prepared 3M-row classification cache, built by the real code (`labeled_rows` +
    `vocab_tokenizer` + `token_shards`, char tokenizer) from the CJK headline file of
    `benchmarks/data_scale.py` (about 340 MB of text; `--quick`: 30k rows);
  * a ~1 GB cache: one folder of 1 GiB of ids (uint16) and their offsets, written through
    `folders.whole_folder` (`--quick`: 16 MiB).

For each: the build, then `check_whole` **cold** (no sidecar, nothing remembered: every file
hashed; once with the files in the page cache, once after `posix_fadvise(DONTNEED)` dropped
their pages, the first use after a reboot), **warm in a new process** (identity unchanged: the
sidecar read and a `stat` per file) and **warm in this process** (remembered). Repetitions
interleaved; medians with min-max.

    nice -n 10 python -m benchmarks.cache_verify            # 3M rows and 1 GiB
    python -m benchmarks.cache_verify --quick                # toy sizes (seconds)
"""
from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from scratchformer import fileio
from scratchformer import folders

from . import common
from .data_scale import synth_tsv

RECORD = ".complete"


def plan(quick: bool) -> dict:
    return {"rows": 30_000 if quick else 3_000_000, "big_bytes": (16 << 20) if quick else (1 << 30),
            "reps": 2 if quick else 3}


def _evict(folder: Path) -> None:
    """Drop the page cache of every file of `folder` (the kernel reads them from the disk again)."""
    for p in folder.rglob("*"):
        if p.is_file():
            fd = os.open(p, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def build_prepared(where: Path, rows: int) -> tuple[list[Path], float, int]:
    """The 3M-row cache, by the real prepare: (its folders, seconds to build, the text's bytes)."""
    from scratchformer.data.prepared import LazyPairs, labeled_rows
    from scratchformer.data.prepared_tokens import token_shards, vocab_tokenizer

    before = os.environ.get("SCRATCHFORMER_CACHE")
    os.environ["SCRATCHFORMER_CACHE"] = str(where / "cache")  # a cache of its own, under `where`
    try:
        text_bytes = synth_tsv(where / "rows.tsv", rows)
        t = time.perf_counter()
        index = labeled_rows(where / "rows.tsv")
        tok = vocab_tokenizer("char", LazyPairs(index, np.arange(len(index))))
        shards = token_shards(index, tok)
        seconds = time.perf_counter() - t
    finally:
        if before is None:
            os.environ.pop("SCRATCHFORMER_CACHE", None)
        else:
            os.environ["SCRATCHFORMER_CACHE"] = before
    (where / "rows.tsv").unlink()  # only the cache is measured
    return [index.folder, shards.folder], seconds, text_bytes


def build_big(where: Path, nbytes: int) -> tuple[list[Path], float]:
    """A ~1 GB cache through `folders.whole_folder`, hashed as written (as prepared data does)."""
    rng = np.random.default_rng(0)
    target = where / "big"
    t = time.perf_counter()
    with folders.whole_folder(target, RECORD, {"kind": "bench"}) as stage:
        h, n, block = hashlib.sha256(), 0, 64 << 20
        with open(stage.path / "ids.u16", "wb") as f:
            while n < nbytes:
                data = rng.integers(0, 50_000, size=min(block, nbytes - n) // 2, dtype=np.uint16).tobytes()
                f.write(data)
                h.update(data)
                n += len(data)
        stage.files["ids.u16"] = {"bytes": n, "sha256": h.hexdigest()}
        offsets = np.arange(0, n // 2 + 1, 33, dtype=np.int64)
        offsets.tofile(stage.path / "offsets.i64")  # hashed by whole_folder at the end
    return [target], time.perf_counter() - t


def measure(cache_dirs: list[Path], reps: int) -> dict[str, list[float]]:
    """Seconds to check every folder, per way, interleaved over `reps` repetitions."""
    def cold(evict: bool):
        def go():
            for f in cache_dirs:
                folders._memo_path(f, RECORD).unlink(missing_ok=True)
                folders._checked.clear()
                if evict:
                    _evict(f)
            t = time.perf_counter()
            for f in cache_dirs:
                assert folders.check_whole(f, RECORD) is None
            return time.perf_counter() - t
        return go

    def warm(new_process: bool):
        def go():
            if new_process:
                folders._checked.clear()
            t = time.perf_counter()
            for f in cache_dirs:
                assert folders.check_whole(f, RECORD) is None
            return time.perf_counter() - t
        return go

    def sha256_in_memory():  # the reference: hashlib alone on 64 MiB already in memory, this moment's CPU
        data = memoryview(bytes(64 << 20))
        t = time.perf_counter()
        hashlib.sha256(data).hexdigest()
        return time.perf_counter() - t

    ways = {"sha256 of 64 MiB in memory (reference)": sha256_in_memory, "cold, files in the page cache": cold(False), "cold, files read from the disk": cold(True),
            "warm, a new process (sidecar)": warm(True), "warm, this process": warm(False)}
    out: dict[str, list[float]] = {k: [] for k in ways}
    for _ in range(reps):
        for name, fn in ways.items():
            out[name].append(fn())
    return out


def run(quick: bool = False, out_dir=None, log=print) -> dict:
    p = plan(quick)
    load_start = os.getloadavg()
    base = Path(tempfile.mkdtemp(prefix="cache_verify-", dir=os.environ.get("TMPDIR", "/tmp")))
    caches = {}
    try:
        log(f"building the prepared cache of {p['rows']:,} rows ...")
        dirs, build_s, text_bytes = build_prepared(base, p["rows"])
        caches["prepared"] = {"label": f"prepared data, {p['rows']:,} rows (row index + char ids)",
                              "folders": dirs, "build_s": build_s, "text_bytes": text_bytes}
        log(f"building the {p['big_bytes'] / (1 << 20):,.0f} MiB cache ...")
        dirs, build_s = build_big(base, p["big_bytes"])
        caches["big"] = {"label": f"{p['big_bytes'] / (1 << 30):.2f} GiB of ids (one folder)", "folders": dirs,
                         "build_s": build_s}
        for c in caches.values():
            c["bytes"] = sum(_size(f) for f in c["folders"])
            c["files"] = sum(len(folders.read_record(f, RECORD).files) for f in c["folders"])  # the recorded ones
            log(f"measuring {c['label']} ({c['bytes'] / 1e6:,.0f} MB) ...")
            c["seconds"] = measure(c["folders"], p["reps"])
            c["folders"] = [f.name for f in c["folders"]]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    res = {"title": "Checking a cache against its completion record", "machine": common.machine_info(),
           "settings": p, "caches": caches, "load": {"start": load_start, "end": os.getloadavg()}}
    for c in caches.values():
        c["summary"] = {k: common.summary(v) for k, v in c["seconds"].items()}
    common.write_result("cache_verify" + ("_quick" if quick else ""), res, to_markdown(res), out_dir)
    return res


def to_markdown(res: dict) -> str:
    rows = []
    for c in res["caches"].values():
        ref = (64 << 20) / 1e6 / c["summary"].pop("sha256 of 64 MiB in memory (reference)")["median"]
        rows.append([c["label"], "64 MiB in memory", "sha256 alone (reference, this moment's CPU)", "",
                     f"{ref:,.0f} MB/s", ""])
        for way, s in c["summary"].items():
            mbps = c["bytes"] / 1e6 / s["median"] if way.startswith("cold") else None
            rows.append([c["label"], f"{c['bytes'] / 1e6:,.0f} MB, {c['files']} files", way, common.fmt_stat(s, 3, " s"),
                         f"{mbps:,.0f} MB/s ({mbps / ref:.0%} of sha256 alone)" if mbps else "",
                         f"{s['median'] / c['build_s']:.1%}"])
    table = common.md_table(["cache", "size", "check", "seconds (median, min-max)", "hashed", "of the build's time"], rows)
    load = res["load"]
    builds = f"Load average {load['start'][0]:.1f} at the start, {load['end'][0]:.1f} at the end (2 CPUs shared with other jobs: read the ratios). " + "; ".join(f"{c['label']}: built in {c['build_s']:.1f} s" for c in res["caches"].values())
    return (common.header_md(res["title"], res["machine"], f"{builds}. Repetitions: {res['settings']['reps']}, "
                             "interleaved. The build of the prepared cache is the real prepare (index, vocabulary, "
                             "ids) of the synthetic CJK file; the big cache's build writes random ids, hashed as "
                             "written.") + "\n" + table + "\n\n"
            "A cold check hashes every file (sha256, one pass); a warm one reads the sidecar and stats each file. "
            "Training on the prepared cache reads the same bytes at least once per epoch, so a cold check costs at "
            "most one more pass over them, once per change of the files; every later use is warm.\n")


def main(argv=None):
    common.cli(run, __doc__, argv)


if __name__ == "__main__":
    main()
