"""Load on `scratchformer serve`: requests/s, p50/p99 latency and errors at 1, 8 and 32
concurrent clients, dynamic batching on and off, for a classifier of the demo's size and a
translator of hsk-base's size.

Two servers run side by side as subprocesses (`scratchformer serve`, one with batching, one
with `--no-batching`), on 127.0.0.1 only, serving the same two runs; the clients (asyncio +
httpx, one connection each, one request at a time each) run in this process. Every load is
bounded in requests and in seconds. Repetitions interleave the two servers (rotating which
goes first) and the on/off ratio is taken per repetition, then the median.

The runs: trained for a few steps on toy data (the speed of a model does not depend on what it
learned): the classifier with the model section of recipes/thucnews-demo.json (d_model 128,
4 heads, d_ff 256, 2 layers, char tokens + 50,000 hashed bigram buckets), the translator with
hsk-base's transformer (d_model 256, 4 heads, d_ff 1024, 3 + 3 layers); translations capped at
`max_length` 24 tokens, greedy (beam 1). The `/health` rows are the HTTP floor: the same clients
against a route that does nothing, i.e. what the HTTP stack (server and clients) alone allows.

    python -m benchmarks.serve [--quick] [--out DIR]
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from . import common

CLIENTS = (1, 8, 32)
CJK = "球赛队胜负冠军进攻股市涨跌银行利率基金今日消息新的一天地人和春夏秋冬北京上海教育部高考报名"


async def _load(url: str, path: str, body: Callable[[int], dict], clients: int, requests_per_client: int,
                max_seconds: float, method: str = "POST") -> dict:
    import httpx

    latencies, errors, codes = [], 0, {}
    stop_at = time.perf_counter() + max_seconds

    async def client(c: int, http) -> None:
        nonlocal errors
        for j in range(requests_per_client):
            if time.perf_counter() > stop_at:
                return
            t0 = time.perf_counter()
            try:
                if method == "GET":
                    r = await http.get(url + path)
                else:
                    r = await http.post(url + path, json=body(c * requests_per_client + j))
                status = r.status_code
            except httpx.HTTPError:
                status = -1
            latencies.append(time.perf_counter() - t0)
            codes[status] = codes.get(status, 0) + 1
            if status != 200:
                errors += 1

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(c, http) for c in range(clients)))
        wall = time.perf_counter() - t0
    lat = sorted(latencies)
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1000 if lat else None  # noqa: E731
    return {"clients": clients, "requests": len(lat), "errors": errors, "status": codes,
            "requests_per_s": len(lat) / wall if wall else 0.0, "p50_ms": q(0.50), "p99_ms": q(0.99),
            "seconds": wall}


def run_load(url: str, path: str, body: Callable[[int], dict], clients: int, requests_per_client: int,
             max_seconds: float = 60.0, method: str = "POST") -> dict:
    """`clients` concurrent clients, each sending up to `requests_per_client` requests one after
    another (stopping after `max_seconds`); requests/s, p50/p99 latency (ms), errors (non-200)."""
    return asyncio.run(_load(url, path, body, clients, requests_per_client, max_seconds, method))


# ----------------------------------------------------------------------------- the runs

def _headline(rng: random.Random) -> str:
    return "".join(rng.choice(CJK) for _ in range(rng.randint(8, 30)))


def _sentence(rng: random.Random, words: list[str]) -> str:
    return " ".join(rng.choice(words) for _ in range(rng.randint(5, 14)))


def make_runs(root: Path, log=print, quick: bool = False) -> tuple[Path, Path]:
    from scratchformer.cli import main

    rng = random.Random(0)
    (root / "clf.tsv").write_text("text\tlabel\n" + "".join(f"{_headline(rng)}\t{rng.choice('ab')}\n"
                                                           for _ in range(400)), encoding="utf-8")
    words = [f"w{i}" for i in range(300)]
    (root / "mt.tsv").write_text("".join(f"{s}\t{s.upper()}\n" for s in (_sentence(rng, words) for _ in range(400))))
    demo = json.loads((Path(__file__).resolve().parents[1] / "recipes" / "thucnews-demo.json").read_text())
    sets = [f"model.encoder.{k}={v}" for k, v in demo["model"]["encoder"].items()]
    sets += ["model.bigram_buckets=50000", "data.max_len=48", "train.max_steps=5", "train.progress=false",
             "ensemble=1", "model.encoder.dropout=0.0"]
    if quick:  # toy sizes: the smoke test checks the harness, not the speed
        sets += ["model.encoder.d_model=32", "model.encoder.d_ff=64", "model.encoder.n_layers=1"]
    log("[serve] training the two runs for a few steps (toy data)")
    assert main(["train", "classify", "--data", str(root / "clf.tsv"), "--out", str(root / "clf"), "--no-baseline",
                 *[x for s in sets for x in ("--set", s)]]) == 0
    mt_sets = ["model.transformer.d_model=256", "model.transformer.n_heads=4", "model.transformer.d_ff=1024",
               "model.transformer.n_layers=3", "data.src_tokenizer=word", "data.tgt_tokenizer=word",
               "train.max_steps=5", "train.progress=false", "decode.beam=1", "average_last=1"]
    if quick:
        mt_sets += ["model.transformer.d_model=32", "model.transformer.d_ff=64", "model.transformer.n_layers=1"]
    assert main(["train", "translate", "--data", str(root / "mt.tsv"), "--out", str(root / "mt"),
                 *[x for s in mt_sets for x in ("--set", s)]]) == 0
    return root / "clf", root / "mt"


# ----------------------------------------------------------------------------- servers

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(runs: list[str], batching: bool, extra: list[str] = ()) -> tuple[subprocess.Popen, str]:
    import httpx

    port = _free_port()
    cmd = [sys.executable, "-m", "scratchformer.cli", "serve", *runs, "--port", str(port), "--max-queue", "4096",
           *extra, *([] if batching else ["--no-batching"])]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}: {' '.join(cmd)}")
        try:
            if httpx.get(url + "/ready", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("the server did not become ready in 180 s")


# ----------------------------------------------------------------------------- the benchmark

def run(quick: bool = False, out_dir=None, log=print) -> dict:
    machine = common.machine_info()
    reps = 1 if quick else 3
    clients_grid = (1, 8) if quick else CLIENTS
    per_client = {"clf": 4 if quick else 16, "mt": 2 if quick else 4}
    max_seconds = 10.0 if quick else 60.0
    rng = random.Random(1)
    heads = [_headline(rng) for _ in range(256)]
    words = [f"w{i}" for i in range(300)]
    sents = [_sentence(rng, words) for _ in range(256)]
    bodies = {"clf": ("/v1/classify", lambda i: {"model": "clf", "input": heads[i % len(heads)]}),
              "mt": ("/v1/translate", lambda i: {"model": "mt", "input": sents[i % len(sents)], "beam": 1,
                                                 "max_length": 24})}
    rows: dict[tuple, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        clf, mt = make_runs(Path(tmp), log, quick)
        specs = [f"clf={clf}", f"mt={mt}"]
        servers = {}
        try:
            for mode in ("on", "off"):
                servers[mode] = start_server(specs, mode == "on")
            for rep in range(reps):
                for model in ("clf", "mt"):
                    path, body = bodies[model]
                    for clients in clients_grid:
                        modes = ("on", "off") if (rep + clients) % 2 == 0 else ("off", "on")
                        for mode in modes:
                            res = run_load(servers[mode][1], path, body, clients, per_client[model], max_seconds)
                            rows.setdefault((model, clients, mode), []).append(res)
                            log(f"[serve] rep {rep + 1} {model} {clients:>2} clients batching {mode:<3}: "
                                f"{res['requests_per_s']:.1f} req/s, p50 {res['p50_ms']:.1f} ms, "
                                f"p99 {res['p99_ms']:.1f} ms, errors {res['errors']}")
                for mode in ("on", "off"):  # the HTTP floor: a route that does nothing, same clients
                    res = run_load(servers[mode][1] + "", "/health", lambda i: {}, max(clients_grid),
                                   per_client["clf"], max_seconds, method="GET")
                    rows.setdefault(("/health", max(clients_grid), mode), []).append(res)
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    table, ratios = [], {}
    for (model, clients, mode), results in rows.items():
        table.append({"model": model, "clients": clients, "batching": mode,
                      "requests_per_s": statistics.median(r["requests_per_s"] for r in results),
                      "p50_ms": statistics.median(r["p50_ms"] for r in results),
                      "p99_ms": statistics.median(r["p99_ms"] for r in results),
                      "errors": sum(r["errors"] for r in results), "requests": sum(r["requests"] for r in results),
                      "reps": len(results)})
    for model in ("clf", "mt"):
        for clients in clients_grid:
            per_rep = [a["requests_per_s"] / b["requests_per_s"]
                       for a, b in zip(rows[(model, clients, "on")], rows[(model, clients, "off")])]
            ratios[f"{model}@{clients}"] = {"median": statistics.median(per_rep), "min": min(per_rep),
                                            "max": max(per_rep)}
    errors = sum(r["errors"] for r in table)
    targets = [common.target("errors (all loads)", float(errors), 0, higher_is_better=False, unit=""),
               common.target("batching on / off, classifier, 32 clients (req/s)",
                             ratios.get("clf@32", {}).get("median"), 3.0),
               common.target("batching on / off, translator, 32 clients (req/s)",
                             ratios.get("mt@32", {}).get("median"), 3.0)]
    result = {"title": "HTTP load on scratchformer serve (batching on vs off)", "machine": machine, "quick": quick,
              "rows": table, "ratio_on_off": ratios, "targets": targets,
              "settings": {"reps": reps, "requests_per_client": per_client, "max_seconds": max_seconds,
                           "server_defaults": "--max-wait-ms 5 --max-batch-tokens 8192, --max-queue 4096",
                           "nice": os.nice(0)}}
    md = [common.header_md(result["title"], machine, __doc__.split("\n\n")[1].replace("\n", " ")), "",
          common.targets_md(targets), "",
          common.md_table(["model", "clients", "batching", "req/s", "p50 ms", "p99 ms", "errors / requests"],
                          [[r["model"], r["clients"], r["batching"], common.fmt_num(r["requests_per_s"]),
                            common.fmt_num(r["p50_ms"]), common.fmt_num(r["p99_ms"]),
                            f"{r['errors']} / {r['requests']}"]
                           for r in sorted(table, key=lambda r: (r["model"], r["clients"], r["batching"]))]), "",
          "batching on / off (requests/s, median of per-repetition ratios, min–max): "
          + "; ".join(f"{k} {v['median']:.2f}x ({v['min']:.2f}–{v['max']:.2f})" for k, v in ratios.items())]
    common.write_result("serve", result, "\n".join(md), out_dir)
    return result


if __name__ == "__main__":
    common.cli(run, __doc__)
