"""Data at scale: peak memory and time to the first step as the data grows (prepared data).

Issue 35 measured the in-memory path at 0.9 GB RSS for 100k rows and 4.0 GB for 1M (about
35x the file). This benchmark trains the same tiny model (`d_model 32`, 1 layer, 20 steps,
no baseline) on synthetic files of growing size, each run in its own child process
(`python -m benchmarks.data_scale --cell ...`, so `resource.getrusage` gives that run's peak):

  * classification: `text<TAB>label` files of CJK headlines (about 33 characters, 10 labels),
    100k / 300k / 1M / 3M rows (`--rows`), with a fresh cache (the time to the first step
    includes preparing the data) and, for the smaller ones, the in-memory path for comparison
    (`SCRATCHFORMER_PREPARED=0`);
  * LM: 10 MB / 100 MB / 1 GB of text (`--lm-mb`), char tokenizer.

Reported per run: peak RSS of the training process (`ru_maxrss` of the child) and of the
prepare workers (`RUSAGE_CHILDREN`), seconds to the first optimizer step, wall and CPU seconds,
and the data-wait share of the 20 steps (time collating batches / (that + time in the steps)).
Prepare throughput: MB of file per second through index + vocabulary + ids, for the char
tokenizer on the CJK file and the word tokenizer (regex) on an alphabetic one, against the
`tokenizers` library's `encode_batch` of the same texts (a BPE of 8,000 trained on 20k of them;
texts already in a list, only the encoding timed).

    python -m benchmarks.data_scale                       # 100k,300k,1M,3M rows; 10,100 MB LM
    python -m benchmarks.data_scale --rows 100k,1M --lm-mb 10,100,1000
    python -m benchmarks.data_scale --quick               # toy sizes (the smoke test)
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from . import common

ROOT = Path(__file__).resolve().parent.parent
CJK = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长"
WORDS = [w for w in ("time year people way day man thing woman life child world school state family student group "
                     "country problem hand part place case week company system program question work government "
                     "number night point home water room mother area money story fact month lot right study book "
                     "eye job word business issue side kind head house service friend father power hour game line").split()]


def _count(text: str) -> int:
    text = text.strip().lower()
    mult = {"k": 1_000, "m": 1_000_000, "g": 1_000_000_000}
    return int(float(text[:-1]) * mult[text[-1]]) if text[-1] in mult else int(text)


# ----------------------------------------------------------------------------- synthetic files
def synth_tsv(path: Path, n: int, seed: int = 0, alphabetic: bool = False) -> int:
    """`n` rows of `text<TAB>label` (with that header): Zipf-distributed characters (or words),
    log-normal lengths around 33 characters (8 words), 10 labels. Returns the file's bytes."""
    rng = np.random.default_rng(seed)
    units = np.array(list(CJK) if not alphabetic else WORDS)
    zipf = 1.0 / np.arange(1, len(units) + 1)
    zipf /= zipf.sum()
    sep = "" if not alphabetic else " "
    with open(path, "w", encoding="utf-8") as f:
        f.write("text\tlabel\n")
        for start in range(0, n, 100_000):
            m = min(100_000, n - start)
            lengths = np.clip(np.round(rng.lognormal(np.log(33 if not alphabetic else 8), 0.35, m)), 2, 200).astype(int)
            picks = rng.choice(len(units), size=int(lengths.sum()), p=zipf)
            labels = rng.integers(0, 10, size=m)
            cut = np.cumsum(lengths)[:-1]
            f.write("".join(f"{sep.join(units[p])}\tlabel{lab}\n" for p, lab in zip(np.split(picks, cut), labels)))
    return path.stat().st_size


def synth_text(path: Path, mb: float, seed: int = 0) -> int:
    """About `mb` MB of lines of CJK characters and some ASCII words (a char LM's input)."""
    rng = np.random.default_rng(seed)
    units = np.array(list(CJK) + ["，", "。"] * 20 + [" the ", " data "] * 5)
    zipf = 1.0 / np.arange(1, len(units) + 1)
    zipf /= zipf.sum()
    target = int(mb * 1e6)
    with open(path, "w", encoding="utf-8") as f:
        while f.tell() < target:
            picks = rng.choice(len(units), size=400_000, p=zipf)
            lines = np.split(picks, np.arange(60, len(picks), 60))
            f.write("".join("".join(units[p]) + "\n" for p in lines))
    return path.stat().st_size


# ----------------------------------------------------------------------------- one run, in a child
def _cell_main(spec: dict) -> dict:
    """Train once in this process (the child) with timing hooks; print what was measured."""
    t_start = time.monotonic()
    from scratchformer.cli import main
    from scratchformer.tasks.classify import data as cdata
    from scratchformer.tasks.lm import data as ldata
    from scratchformer.train import trainer as tmod

    step_s, data_s, first = [], [0.0], []
    evaluating, looping = [False], [False]
    real_step, real_eval, real_loop = tmod.Trainer._train_step, tmod.Trainer._evaluate, tmod.Trainer._loop

    def loop(self, *a, **k):  # only the training loop's batches are data wait (not evaluation, not the report)
        looping[0] = True
        try:
            return real_loop(self, *a, **k)
        finally:
            looping[0] = False

    def step(self, micro):
        t = time.monotonic()
        out = real_step(self, micro)
        step_s.append(time.monotonic() - t)
        if not first:
            first.append(time.monotonic() - t_start)
        return out

    def evaluate(self, *a, **k):
        evaluating[0] = True
        try:
            return real_eval(self, *a, **k)
        finally:
            evaluating[0] = False

    def timed(fn):
        def wrapper(*a, **k):
            t = time.monotonic()
            out = fn(*a, **k)
            if looping[0] and not evaluating[0]:
                data_s[0] += time.monotonic() - t
            return out
        return wrapper

    tmod.Trainer._train_step, tmod.Trainer._evaluate, tmod.Trainer._loop = step, evaluate, loop
    if not spec.get("onednn", True):  # the data path alone (see the note on the oneDNN path's memory)
        from scratchformer.nn import use_onednn

        use_onednn(False)
    cdata.PreparedSplit.batch = timed(cdata.PreparedSplit.batch)
    ldata._windows = timed(ldata._windows)
    rc = main(spec["argv"])
    self_ru, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"rc": rc, "first_step_s": first[0] if first else None, "wall_s": time.monotonic() - t_start,
            "cpu_s": self_ru.ru_utime + self_ru.ru_stime + kids.ru_utime + kids.ru_stime,
            "peak_rss_mb": self_ru.ru_maxrss / 1024, "workers_peak_rss_mb": kids.ru_maxrss / 1024,
            "steps": len(step_s), "step_s": sum(step_s), "data_wait_s": data_s[0],
            "data_wait_share": data_s[0] / max(data_s[0] + sum(step_s), 1e-9)}


def _prepare_main(spec: dict) -> dict:
    """Prepare throughput of one file and tokenizer (fresh cache), and `tokenizers`' batch encoding."""
    from scratchformer.data import prepared
    from scratchformer.data.prepared import LazyPairs, labeled_rows
    from scratchformer.data.prepared_tokens import token_shards, vocab_tokenizer

    path, kind = Path(spec["file"]), spec["kind"]
    mb = path.stat().st_size / 1e6

    def cpu() -> float:
        a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime

    c0 = cpu()
    t0 = time.monotonic()
    rows = labeled_rows(path)
    t1 = time.monotonic()
    pairs = LazyPairs(rows, np.arange(len(rows)))
    tok = vocab_tokenizer(kind, pairs)
    t2 = time.monotonic()
    token_shards(rows, tok)
    t3 = time.monotonic()
    prepared.close_workers()  # the shared pool's workers exit, so their CPU time counts below
    out = {"file_mb": mb, "rows": len(rows), "tokenizer": kind, "index_s": t1 - t0, "vocab_s": t2 - t1,
           "ids_s": t3 - t2, "prepare_mb_per_s": mb / (t3 - t0), "workers": prepared.default_workers(int(mb * 1e6)),
           "prepare_cpu_s": cpu() - c0}
    out["prepare_mb_per_cpu_s"] = mb / max(out["prepare_cpu_s"], 1e-9)
    from scratchformer.data.tokenizers import build_tokenizer

    texts = list(pairs.texts())
    bpe = build_tokenizer("bpe", texts[:20_000], vocab_size=8000)
    t4 = time.monotonic()
    for i in range(0, len(texts), 100_000):
        bpe.hf.encode_batch(texts[i:i + 100_000], add_special_tokens=False)
    out["hf_encode_batch_s"] = time.monotonic() - t4
    out["hf_encode_batch_mb_per_s"] = mb / out["hf_encode_batch_s"]
    return out


def _child(mode: str, spec: dict, env: dict, timeout: int = 3600) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.data_scale", f"--{mode}", json.dumps(spec)]
    t = time.monotonic()
    proc = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode} child failed ({proc.returncode}): {proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["child_wall_s"] = time.monotonic() - t
    return out


def _classify_cfg(path: Path, d: Path) -> Path:
    cfg = d / f"{path.stem}.json"
    cfg.write_text(json.dumps({
        "data": {"dataset": str(path), "tokenizer": "char", "batch_size": 64},
        "model": {"encoder": {"d_model": 32, "n_heads": 2, "n_layers": 1, "d_ff": 64}},
        "train": {"max_steps": 20, "eval_every": 20, "log_every": 10, "epochs": 1}}))
    return cfg


def _lm_cfg(path: Path, d: Path) -> Path:
    cfg = d / f"{path.stem}.json"
    cfg.write_text(json.dumps({
        "data": {"dataset": str(path), "tokenizer": "char", "context": 64, "batch_size": 12, "eval_windows": 100},
        "model": {"transformer": {"d_model": 32, "n_heads": 2, "n_layers": 1, "d_ff": 64}},
        "train": {"max_steps": 20, "eval_every": 20, "log_every": 10}}))
    return cfg


# ----------------------------------------------------------------------------- the benchmark
def run(quick: bool = False, out_dir=None, rows: str | None = None, lm_mb: str | None = None,
        in_memory: str | None = None, onednn: bool = True, command: str | None = None, log=print) -> dict:
    pick = lambda given, default: default if given is None else given  # noqa: E731  ('' runs none)
    row_sizes = [_count(x) for x in pick(rows, "2k,6k" if quick else "100k,300k,1M,3M").split(",") if x]
    mem_sizes = [_count(x) for x in pick(in_memory, "2k" if quick else "100k").split(",") if x]
    lm_sizes = [float(x) for x in pick(lm_mb, "0.2" if quick else "10,100").split(",") if x]
    machine = common.machine_info()
    loads: list[float] = []
    result: dict = {"machine": machine, "classify": {}, "classify_in_memory": {}, "lm": {}, "prepare": {},
                    "onednn": onednn, "command": command}
    with tempfile.TemporaryDirectory(prefix="data_scale_") as tmp:
        d = Path(tmp)
        base_env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2"))
        for n in sorted(set(row_sizes) | set(mem_sizes)):
            f = d / f"rows{n}.tsv"
            nbytes = synth_tsv(f, n)
            cfg = _classify_cfg(f, d)
            for prepared, sizes, key in ((True, row_sizes, "classify"), (False, mem_sizes, "classify_in_memory")):
                if n not in sizes:
                    continue
                env = dict(base_env, SCRATCHFORMER_CACHE=str(d / f"cache{n}{prepared}"),
                           SCRATCHFORMER_PREPARED="1" if prepared else "0")
                log(f"[data_scale] classify {n:,} rows ({nbytes / 1e6:.0f} MB), {'prepared' if prepared else 'in memory'}")
                r = _child("cell", {"argv": ["train", "classify", "--config", str(cfg), "--out",
                                             str(d / f"run{n}{prepared}"), "--no-baseline"], "onednn": onednn}, env)
                r["file_mb"] = nbytes / 1e6
                result[key][str(n)] = r
                loads.append(os.getloadavg()[0])
                log(f"  peak RSS {r['peak_rss_mb']:.0f} MB, first step {r['first_step_s']:.1f} s, "
                    f"data wait {r['data_wait_share']:.1%}")
            f.unlink()
        for mb in lm_sizes:
            f = d / f"text{mb:g}.txt"
            nbytes = synth_text(f, mb)
            cfg = _lm_cfg(f, d)
            env = dict(base_env, SCRATCHFORMER_CACHE=str(d / f"lmcache{mb:g}"))
            log(f"[data_scale] lm {nbytes / 1e6:.0f} MB of text")
            r = _child("cell", {"argv": ["train", "lm", "--config", str(cfg), "--out", str(d / f"lm{mb:g}")],
                                "onednn": onednn}, env)
            r["file_mb"] = nbytes / 1e6
            result["lm"][f"{mb:g}"] = r
            loads.append(os.getloadavg()[0])
            log(f"  peak RSS {r['peak_rss_mb']:.0f} MB, first step {r['first_step_s']:.1f} s")
            f.unlink()
        n_prep = 6_000 if quick else 300_000
        for kind, alphabetic in (("char", False), ("word", True)):
            f = d / f"prep_{kind}.tsv"
            synth_tsv(f, n_prep, seed=1, alphabetic=alphabetic)
            env = dict(base_env, SCRATCHFORMER_CACHE=str(d / f"prepcache_{kind}"))
            if quick:
                env["SCRATCHFORMER_PREPARE_WORKERS"] = "2"
            log(f"[data_scale] prepare throughput, {kind} tokenizer, {n_prep:,} rows")
            r = _child("prepare", {"file": str(f), "kind": kind}, env)
            result["prepare"][kind] = r
            loads.append(os.getloadavg()[0])
            log(f"  {r['prepare_mb_per_s']:.1f} MB/s (tokenizers encode_batch {r['hf_encode_batch_mb_per_s']:.1f} MB/s)")
            f.unlink()
    result["loads"] = loads
    result["targets"] = _targets(result)
    md = _markdown(result, quick)
    common.write_result("data_scale" + ("_quick" if quick else "") + ("" if onednn else "_no_onednn"), result, md, out_dir)
    return result


def _targets(r: dict) -> list[dict]:
    c = r["classify"]
    out = []
    if "300000" in c and "3000000" in c:
        big, small = c["3000000"]["peak_rss_mb"], c["300000"]["peak_rss_mb"]
        out.append(common.target("peak RSS at 3M rows ≤ 1.25 × 300k + 150 MB", big, 1.25 * small + 150,
                                 higher_is_better=False, unit=" MB"))
        out.append(common.target("peak RSS at 3M rows < 2 GB", big, 2048, higher_is_better=False, unit=" MB"))
    for kind in ("char", "word"):
        if kind in r["prepare"]:
            out.append(common.target(f"prepare MB/s, {kind} tokenizer", r["prepare"][kind]["prepare_mb_per_s"], 10.0,
                                     unit=" MB/s"))
    waits = [x["data_wait_share"] for x in list(c.values()) + list(r["lm"].values())]
    if waits:
        out.append(common.target("data wait share of step time (worst run)", 100 * max(waits), 5.0,
                                 higher_is_better=False, unit="%"))
    return out


def _markdown(r: dict, quick: bool) -> str:
    m = r["machine"]
    head = common.header_md("Data at scale: memory and time to the first step (prepared data)", m,
                            "Tiny model (d_model 32, 1 layer, 20 steps, no baseline), each run in its own child "
                            "process (`resource.getrusage`), a fresh cache: the time to the first step includes "
                            "preparing the data. " + ("The linear layers ran on oneDNN (as shipped). " if r["onednn"] else
                            "The linear layers ran on `F.linear` (`--onednn off`: the data path alone, without the oneDNN "
                            "path's kernel caches, capped at 32 compiled products each). ") + common.load_note(r["loads"], busy_tail=": the times are noisy; "
                            "memory is not affected.", quiet_tail="."))
    rows = []
    for key, how in (("classify_in_memory", "in memory (before)"), ("classify", "prepared")):
        for n, x in r[key].items():
            rows.append([f"{int(n):,} rows", f"{x['file_mb']:.0f} MB", how, f"{x['peak_rss_mb']:.0f} MB",
                         f"{x['workers_peak_rss_mb']:.0f} MB", f"{x['first_step_s']:.1f} s", f"{x['wall_s']:.0f} s",
                         f"{x['cpu_s']:.0f} s", f"{100 * x['data_wait_share']:.1f}%"])
    for mb, x in r["lm"].items():
        rows.append([f"LM text", f"{x['file_mb']:.0f} MB", "prepared", f"{x['peak_rss_mb']:.0f} MB",
                     f"{x['workers_peak_rss_mb']:.0f} MB", f"{x['first_step_s']:.1f} s", f"{x['wall_s']:.0f} s",
                     f"{x['cpu_s']:.0f} s", f"{100 * x['data_wait_share']:.1f}%"])
    table = common.md_table(["data", "file", "path", "peak RSS (training process)", "peak RSS (a prepare worker)",
                             "first step", "wall", "CPU", "data wait"], rows)
    prep = common.md_table(
        ["tokenizer", "file", "rows", "index", "vocabulary", "ids", "prepare (wall)", "prepare (per CPU-second)",
         "`tokenizers` encode_batch (BPE 8k, wall)"],
        [[k, f"{x['file_mb']:.0f} MB", f"{x['rows']:,}", f"{x['index_s']:.1f} s", f"{x['vocab_s']:.1f} s",
          f"{x['ids_s']:.1f} s", f"{x['prepare_mb_per_s']:.1f} MB/s ({x['workers']} workers)",
          f"{x['prepare_mb_per_cpu_s']:.1f} MB", f"{x['hf_encode_batch_mb_per_s']:.1f} MB/s"]
         for k, x in r["prepare"].items()])
    notes = ("Wall includes the end: one evaluation on valid and the test report (10% of the rows each), which "
             "the 20 steps do not need. The word tokenizer is timed on alphabetic text (the regex segmenter); CJK "
             "text through jieba is slower. `tokenizers` encodes texts already held in a list; prepare reads the "
             "file, checks every row, counts the vocabulary and writes the ids.")
    cmd = r.get("command") or ("python -m benchmarks.data_scale" + (" --quick" if quick else "")
                               + ("" if r["onednn"] else " --onednn off"))
    return (f"{head}\n\n## Runs\n\n{table}\n\n## Prepare throughput\n\n{prep}\n\n{notes}\n\n## Targets\n\n"
            f"{common.targets_md(r['targets'])}\n\n`{cmd}`\n")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="toy sizes, seconds (the smoke test)")
    ap.add_argument("--out", default=None, help="results folder (default benchmarks/results)")
    ap.add_argument("--rows", help="classification sizes, e.g. 100k,300k,1M,3M")
    ap.add_argument("--in-memory", help="sizes also run on the in-memory path (default 100k; '' for none)")
    ap.add_argument("--lm-mb", help="LM text sizes in MB, e.g. 10,100,1000 ('' for none)")
    ap.add_argument("--onednn", choices=["on", "off"], default="on",
                    help="off: the float32 linear layers on F.linear (use_onednn(False)), to measure the data path alone")
    ap.add_argument("--cell", help=argparse.SUPPRESS)
    ap.add_argument("--prepare", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.cell:
        print(json.dumps(_cell_main(json.loads(a.cell))))
    elif a.prepare:
        print(json.dumps(_prepare_main(json.loads(a.prepare))))
    else:
        run(a.quick, a.out, a.rows, a.lm_mb, a.in_memory, a.onednn == "on",
            command="python -m benchmarks.data_scale " + " ".join(argv if argv is not None else sys.argv[1:]))


if __name__ == "__main__":
    main()
