"""Batch-1 latency of `/v1/translate` before and after serving through the static compiled step:
`scratchformer serve --decode lean` (before: the lean step) against the default `--decode auto`
(after: the static step, its batch-1 buckets compiled before /ready), at 1 and 8 concurrent clients.

Two servers run side by side as subprocesses on 127.0.0.1 over the same run (the translator of
hsk-base's size that benchmarks/serve.py trains for a few steps: d_model 256, 4 heads, d_ff 1024,
3 + 3 layers, word tokens; the speed of a model does not depend on what it learned), greedy,
translations capped at `max_length` 24 tokens, one sentence (5-14 words) a request, both servers
in float32 (the path is what differs). The clients:
`wrk` (one connection per client, closed loop, for a fixed time) when installed, else asyncio +
httpx in this process (bounded in requests and seconds). Repetitions interleave the two servers
(rotating which goes first); the lean / static ratios of p50, p99 and requests/s are taken per
repetition, then the median (min-max). Before the loads both servers translate the same sentences
and the answers are compared; after them the static server's /v1/models says which buckets it
compiled (and in how many seconds) and how many batches ran each path: at 8 clients the batcher
joins requests into batches of several rows, whose buckets are not compiled at start (lean) unless
`--sentences 1,2,4,8` has the static server compile them too (`--compile-sentences`; a longer start).

    OMP_NUM_THREADS=1 python -m benchmarks.serve_static [--quick] [--out DIR] [--sentences 1,2,4,8]
"""
from __future__ import annotations

import os
import random
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from . import common
from .serve import _sentence, make_translator, run_load, start_server

CLIENTS = (1, 8)
MAX_LENGTH = 24
PATHS = ("lean", "static")
# sentences of up to 14 words: the buckets of sources up to 15 tokens, greedy
FLAGS = {"lean": "--decode lean", "static": "--decode auto --compile-tokens 15 --compile-beams 1"}
# both servers in float32: auto's probe, timed in each process, could pick bf16 for 8 rows in one
# and not in the other (seen under load: 1.47x in the static server's probe), which is not the path
COMPUTE = "--compute-type float32"


def _loadavg() -> float:
    try:
        return float(open("/proc/loadavg").read().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


def run(quick: bool = False, out_dir=None, log=print, sentences: str | None = None) -> dict:
    """`sentences`: the static server's --compile-sentences (default 1: batch-1 buckets only)."""
    import httpx

    machine = common.machine_info()
    reps = 1 if quick else 3
    max_seconds = 2.0 if quick else 8.0
    per_client = 3 if quick else 40  # the httpx clients' bound (wrk runs for max_seconds)
    rng = random.Random(1)
    words = [f"w{i}" for i in range(300)]
    sents = [_sentence(rng, words) for _ in range(256)]
    body = lambda i: {"model": "mt", "input": sents[i % len(sents)], "beam": 1, "max_length": MAX_LENGTH}  # noqa: E731
    rows: dict[tuple, list[dict]] = {}
    loads: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        log("[serve_static] training the hsk-size translator for a few steps (toy data)")
        mt = make_translator(Path(tmp), quick)
        spec = [f"mt={mt}"]
        servers: dict[str, tuple] = {}
        try:
            t0 = time.perf_counter()
            flags = {**FLAGS, "static": f"{FLAGS['static']} --compile-sentences {sentences or '1'}"}
            servers["static"] = start_server(spec, True, [*flags["static"].split(), *COMPUTE.split()], timeout=600)
            startup = time.perf_counter() - t0
            servers["lean"] = start_server(spec, True, [*flags["lean"].split(), *COMPUTE.split()])
            log(f"[serve_static] the static server was ready after {startup:.0f} s (its compile)")
            checked = sents[:16]
            answers = {p: [httpx.post(servers[p][1] + "/v1/translate", json={**body(0), "input": s},
                                      timeout=120).json()["data"][0]["translation"] for s in checked] for p in PATHS}
            same = sum(a == b for a, b in zip(answers["lean"], answers["static"]))
            for rep in range(reps):
                for clients in CLIENTS:
                    order = PATHS if (rep + clients) % 2 == 0 else PATHS[::-1]
                    for path in order:
                        proc, url = servers[path]
                        loads.append(_loadavg())
                        res = run_load(url, "/v1/translate", body, clients, per_client, max_seconds, pid=proc.pid)
                        loads.append(_loadavg())
                        rows.setdefault((clients, path), []).append(res)
                        log(f"[serve_static] rep {rep + 1} {clients} clients {path:<6}: p50 {res['p50_ms']:.1f} ms, "
                            f"p99 {res['p99_ms']:.1f} ms, {res['requests_per_s']:.1f} req/s, errors {res['errors']}")
            models = {p: httpx.get(servers[p][1] + "/v1/models", timeout=30).json()["data"][0] for p in PATHS}
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    table, ratios = [], {}
    for (clients, path), results in sorted(rows.items()):
        table.append({"clients": clients, "path": path, "reps": len(results),
                      **{k: statistics.median(r[k] for r in results) for k in ("p50_ms", "p99_ms", "requests_per_s")},
                      "errors": sum(r["errors"] for r in results), "requests": sum(r["requests"] for r in results),
                      "client": results[0].get("client")})
    for clients in CLIENTS:
        pairs = list(zip(rows[(clients, "lean")], rows[(clients, "static")]))
        ratios[clients] = {
            "p50": common.summary([a["p50_ms"] / b["p50_ms"] for a, b in pairs]),
            "p99": common.summary([a["p99_ms"] / b["p99_ms"] for a, b in pairs]),
            "requests_per_s": common.summary([b["requests_per_s"] / a["requests_per_s"] for a, b in pairs])}
    decode = models["static"].get("decode", {})
    resolved = models["static"].get("compute", {}).get("resolved", [])
    errors = sum(r["errors"] for r in table)
    targets = [common.target("errors (all loads)", float(errors), 0, higher_is_better=False, unit=""),
               common.target("same translations, lean and static (of the checked sentences)", same / len(checked), 1.0,
                             unit="", note=f"{same} / {len(checked)}"),
               common.target("batch-1 p50, 1 client: lean / static", ratios[1]["p50"]["median"], 1.0,
                             note="> 1: the static step answers faster")]
    result = {"title": "Batch-1 latency of /v1/translate: the lean step against the static compiled step",
              "machine": machine, "quick": quick, "rows": table, "ratio_lean_over_static": ratios,
              "targets": targets, "same_translations": [same, len(checked)],
              "static_startup_seconds": startup, "compiled": decode.get("compiled"),
              "compile_seconds": decode.get("compile_seconds"), "decode": decode, "resolved": resolved,
              "resolved_lean": models["lean"].get("compute", {}).get("resolved", []),
              "loadavg": {"min": min(loads, default=None), "max": max(loads, default=None)},
              "settings": {"reps": reps, "max_seconds": max_seconds, "max_length": MAX_LENGTH, "beam": 1,
                           "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "nice": os.nice(0),
                           "server_flags": {p: f"{flags[p]} {COMPUTE}" for p in PATHS}}}
    fmt = lambda s: f"{s['median']:.2f}x ({s['min']:.2f}–{s['max']:.2f})"  # noqa: E731
    md = [common.header_md(result["title"], machine, __doc__.split("\n\n")[1].replace("\n", " ")), "",
          common.targets_md(targets), "",
          f"load average (1 min) during the loads: {common.fmt_num(result['loadavg']['min'])}–"
          f"{common.fmt_num(result['loadavg']['max'])} on 2 cores; clients: {table[0]['client'] if table else '–'}; "
          f"OMP_NUM_THREADS={result['settings']['omp_num_threads']}", "",
          common.md_table(["clients", "path", "p50 ms", "p99 ms", "req/s", "errors / requests"],
                          [[r["clients"], r["path"], common.fmt_num(r["p50_ms"]), common.fmt_num(r["p99_ms"]),
                            common.fmt_num(r["requests_per_s"]), f"{r['errors']} / {r['requests']}"] for r in table]), "",
          common.md_table(["clients", "p50 lean / static", "p99 lean / static", "req/s static / lean"],
                          [[c, fmt(v["p50"]), fmt(v["p99"]), fmt(v["requests_per_s"])] for c, v in ratios.items()]), "",
          f"The static server ({flags['static']}) compiled {len(decode.get('compiled') or [])} buckets before /ready "
          f"({decode.get('compile_seconds')} s; ready {startup:.0f} s after start): "
          + "; ".join(f"{c['rows']} rows x {c['target_positions']} target x {c['source_positions']} source positions {c['seconds']} s"
                      for c in decode.get("compiled") or []) + ".", "",
          "Batches per path on the static server, by rows (/v1/models after the loads): "
          + "; ".join(f"{r['rows']} rows: " + ", ".join(f"{k} {v}" for k, v in sorted(r["batches"].items()))
                      for r in resolved) + "."]
    common.write_result("serve_static" if sentences in (None, "1") else "serve_static_sentences", result,
                        "\n".join(md), out_dir)
    return result


if __name__ == "__main__":
    common.cli(run, __doc__, options={"sentences": ("--sentences", "the static server's --compile-sentences, e.g. "
                                                                  "1,2,4,8 (default 1; results then in "
                                                                  "serve_static_sentences.*)")})
