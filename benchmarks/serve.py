"""Load on `scratchformer serve`: requests/s, p50/p99 latency and errors at 1, 8 and 32
concurrent clients, dynamic batching on and off, for a classifier of the demo's size, a bigger
classifier and a translator of hsk-base's size.

Two servers run side by side as subprocesses (`scratchformer serve`, one with batching, one
with `--no-batching`), on 127.0.0.1 only, serving the same three runs. The clients: `wrk` (one
connection per client, each sending its next request when the answer is in, for a fixed time)
when it is installed, else asyncio + httpx clients in this process (bounded in requests and
seconds); httpx costs about as much CPU per request as the server, so on a 2-core machine it
takes the server's second core and caps every mode alike. Repetitions interleave the two
servers (rotating which goes first) and the on/off ratio is taken per repetition, then the
median. Beside requests/s: the server process's CPU milliseconds per request (/proc), which a
shared machine disturbs less than the wall clock.

The runs: trained for a few steps on toy data (the speed of a model does not depend on what it
learned): the classifier with the model section of recipes/thucnews-demo.json (d_model 128,
4 heads, d_ff 256, 2 layers, char tokens + 50,000 hashed bigram buckets), the bigger one with
d_model 256, 4 heads, d_ff 1024, 4 layers (same tokens), the translator with hsk-base's
transformer (d_model 256, 4 heads, d_ff 1024, 3 + 3 layers); translations capped at
`max_length` 24 tokens, greedy (beam 1). The `/health` rows are the HTTP floor: the same clients
against a route that does nothing, i.e. what the HTTP stack (server and clients) alone allows.

    python -m benchmarks.serve [--quick] [--out DIR] [--models clf,big,mt]
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import re
import shutil
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


def run_load_httpx(url: str, path: str, body: Callable[[int], dict], clients: int, requests_per_client: int,
                   max_seconds: float = 60.0, method: str = "POST") -> dict:
    """`clients` concurrent clients, each sending up to `requests_per_client` requests one after
    another (stopping after `max_seconds`); requests/s, p50/p99 latency (ms), errors (non-200)."""
    return asyncio.run(_load(url, path, body, clients, requests_per_client, max_seconds, method))


def _wrk_script(path: str, bodies: list[str], method: str) -> str:
    """wrk's Lua: one request per call, cycling through `bodies` (JSON, in long brackets)."""
    if method == "GET":
        return f'request = function() return wrk.format("GET", "{path}") end\n'
    items = ",\n".join(f"[==[{b}]==]" for b in bodies)
    return (f"local bodies = {{\n{items}\n}}\nlocal i = 0\nrequest = function()\n  i = i + 1\n"
            f'  return wrk.format("POST", "{path}", {{["Content-Type"] = "application/json"}}, '
            "bodies[(i % #bodies) + 1])\nend\n")


def _wrk_ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}[m.group(2)]


def run_load_wrk(url: str, path: str, body: Callable[[int], dict], clients: int, max_seconds: float,
                 method: str = "POST") -> dict:
    """The same closed loop (each connection sends its next request when the answer is in) with
    wrk, which costs the machine a small fraction of the server's CPU (httpx in Python costs
    about as much as the server: on a 2-core machine the clients then take the server's core)."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False, encoding="utf-8") as f:
        f.write(_wrk_script(path, [json.dumps(body(i), ensure_ascii=False) for i in range(256)], method))
    try:
        out = subprocess.run(["wrk", "-t1", f"-c{clients}", f"-d{max(1, int(max_seconds))}s", "--timeout", "30s",
                              "--latency", "-s", f.name, url + path], capture_output=True, text=True,
                             check=True).stdout
    finally:
        os.unlink(f.name)
    n = int(re.search(r"(\d+) requests in ([\d.]+)(m?s)", out).group(1))
    secs = re.search(r"requests in ([\d.]+)(ms|s|m)", out)
    wall = _wrk_ms(secs.group(1) + secs.group(2)) / 1e3
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    errors = (int(non2xx.group(1)) if non2xx else 0) + (sum(map(int, sock.groups())) if sock else 0)
    pct = {p: _wrk_ms(v) for p, v in re.findall(r"^\s+(50|99)%\s+(\S+)", out, re.M)}
    return {"clients": clients, "requests": n, "errors": errors, "requests_per_s": n / wall if wall else 0.0,
            "p50_ms": pct.get("50"), "p99_ms": pct.get("99"), "seconds": wall, "client": "wrk"}


def server_cpu_seconds(pid: int) -> float:
    """user + system CPU seconds of process `pid` so far (Linux /proc; 0.0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def run_load(url: str, path: str, body: Callable[[int], dict], clients: int, requests_per_client: int,
             max_seconds: float = 60.0, method: str = "POST", pid: int | None = None) -> dict:
    """One load: wrk when it is installed (for `max_seconds`), else the httpx clients; with `pid`
    (the server's), also the server's CPU milliseconds per request."""
    cpu0 = server_cpu_seconds(pid) if pid else 0.0
    if shutil.which("wrk"):
        res = run_load_wrk(url, path, body, clients, max_seconds, method)
    else:
        res = {**run_load_httpx(url, path, body, clients, requests_per_client, max_seconds, method), "client": "httpx"}
    if pid and res["requests"]:
        res["server_cpu_ms_per_request"] = (server_cpu_seconds(pid) - cpu0) * 1e3 / res["requests"]
    return res


# ----------------------------------------------------------------------------- the runs

def _headline(rng: random.Random) -> str:
    return "".join(rng.choice(CJK) for _ in range(rng.randint(8, 30)))


def _sentence(rng: random.Random, words: list[str]) -> str:
    return " ".join(rng.choice(words) for _ in range(rng.randint(5, 14)))


BIG = {"d_model": 256, "n_heads": 4, "d_ff": 1024, "n_layers": 4}  # the bigger classifier ("big")


def make_runs(root: Path, log=print, quick: bool = False) -> tuple[Path, Path, Path]:
    from scratchformer.cli import main

    rng = random.Random(0)
    (root / "clf.tsv").write_text("text\tlabel\n" + "".join(f"{_headline(rng)}\t{rng.choice('ab')}\n"
                                                           for _ in range(400)), encoding="utf-8")
    demo = json.loads((Path(__file__).resolve().parents[1] / "recipes" / "thucnews-demo.json").read_text())
    sets = [f"model.encoder.{k}={v}" for k, v in demo["model"]["encoder"].items()]
    sets += ["model.bigram_buckets=50000", "data.max_len=48", "train.max_steps=5", "train.progress=false",
             "ensemble=1", "model.encoder.dropout=0.0"]
    if quick:  # toy sizes: the smoke test checks the harness, not the speed
        sets += ["model.encoder.d_model=32", "model.encoder.d_ff=64", "model.encoder.n_layers=1"]
    log("[serve] training the three runs for a few steps (toy data)")
    assert main(["train", "classify", "--data", str(root / "clf.tsv"), "--out", str(root / "clf"), "--no-baseline",
                 *[x for s in sets for x in ("--set", s)]]) == 0
    big = sets + [f"model.encoder.{k}={v}" for k, v in BIG.items()] if not quick else sets
    assert main(["train", "classify", "--data", str(root / "clf.tsv"), "--out", str(root / "big"), "--no-baseline",
                 *[x for s in big for x in ("--set", s)]]) == 0
    return root / "clf", root / "big", make_translator(root, quick, rng)


def make_translator(root: Path, quick: bool = False, rng: random.Random | None = None) -> Path:
    """The translator of hsk-base's size (d_model 256, 4 heads, d_ff 1024, 3 + 3 layers, word
    tokens), trained for 5 steps on toy pairs into `root/mt` (`quick`: toy sizes)."""
    from scratchformer.cli import main

    rng = rng or random.Random(0)
    words = [f"w{i}" for i in range(300)]
    (root / "mt.tsv").write_text("".join(f"{s}\t{s.upper()}\n" for s in (_sentence(rng, words) for _ in range(400))))
    mt_sets = ["model.transformer.d_model=256", "model.transformer.n_heads=4", "model.transformer.d_ff=1024",
               "model.transformer.n_layers=3", "data.src_tokenizer=word", "data.tgt_tokenizer=word",
               "train.max_steps=5", "train.progress=false", "decode.beam=1", "average_last=1"]
    if quick:
        mt_sets += ["model.transformer.d_model=32", "model.transformer.d_ff=64", "model.transformer.n_layers=1"]
    assert main(["train", "translate", "--data", str(root / "mt.tsv"), "--out", str(root / "mt"),
                 *[x for s in mt_sets for x in ("--set", s)]]) == 0
    return root / "mt"


# ----------------------------------------------------------------------------- servers

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def warm_up(url: str, bodies: list[tuple[str, object]], n: int = 3) -> None:
    """A few requests of each kind before the timed loads, untimed: what a process does once (the
    first call of each compiled graph, the compute-type probe of a new rows bucket) is not what a
    request costs once the server runs."""
    import httpx

    for path, body in bodies:
        for i in range(n):
            httpx.post(url + path, json=body(i), timeout=120)


def start_server(runs: list[str], batching: bool, extra: list[str] = (), timeout: float = 180.0
                 ) -> tuple[subprocess.Popen, str]:
    import httpx

    port = _free_port()
    cmd = [sys.executable, "-m", "scratchformer.cli", "serve", *runs, "--port", str(port), "--max-queue", "4096",
           *extra, *([] if batching else ["--no-batching"])]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + timeout
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
    raise RuntimeError(f"the server did not become ready in {timeout:g} s")


# ----------------------------------------------------------------------------- the benchmark

def run(quick: bool = False, out_dir=None, log=print, models: str | None = None) -> dict:
    machine = common.machine_info()
    reps = 1 if quick else 3
    clients_grid = (1, 8) if quick else CLIENTS
    per_client = {"clf": 4 if quick else 16, "big": 4 if quick else 16, "mt": 2 if quick else 4}
    max_seconds = 3.0 if quick else 10.0
    chosen = tuple((models or "clf,big,mt").split(","))
    rng = random.Random(1)
    heads = [_headline(rng) for _ in range(256)]
    words = [f"w{i}" for i in range(300)]
    sents = [_sentence(rng, words) for _ in range(256)]
    bodies = {"clf": ("/v1/classify", lambda i: {"model": "clf", "input": heads[i % len(heads)]}),
              "big": ("/v1/classify", lambda i: {"model": "big", "input": heads[i % len(heads)]}),
              "mt": ("/v1/translate", lambda i: {"model": "mt", "input": sents[i % len(sents)], "beam": 1,
                                                 "max_length": 24})}
    rows: dict[tuple, list[dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        clf, big, mt = make_runs(Path(tmp), log, quick)
        specs = [f"clf={clf}", f"big={big}", f"mt={mt}"]
        servers = {}
        try:
            for mode in ("on", "off"):
                # quick (the smoke test): no static-step build before ready (serve_static measures that)
                servers[mode] = start_server(specs, mode == "on", ["--decode", "lean"] if quick else [])
                warm_up(servers[mode][1], [bodies[m] for m in chosen])
            for rep in range(reps):
                for model in chosen:
                    path, body = bodies[model]
                    for clients in clients_grid:
                        modes = ("on", "off") if (rep + clients) % 2 == 0 else ("off", "on")
                        for mode in modes:
                            proc, url = servers[mode]
                            res = run_load(url, path, body, clients, per_client[model], max_seconds, pid=proc.pid)
                            rows.setdefault((model, clients, mode), []).append(res)
                            log(f"[serve] rep {rep + 1} {model} {clients:>2} clients batching {mode:<3}: "
                                f"{res['requests_per_s']:.1f} req/s, p50 {res['p50_ms']:.1f} ms, "
                                f"p99 {res['p99_ms']:.1f} ms, errors {res['errors']}, server "
                                f"{res.get('server_cpu_ms_per_request', float('nan')):.2f} ms CPU/request")
                for mode in ("on", "off"):  # the HTTP floor: a route that does nothing, same clients
                    proc, url = servers[mode]
                    res = run_load(url, "/health", lambda i: {}, max(clients_grid), per_client["clf"], max_seconds,
                                   method="GET", pid=proc.pid)
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
                      "server_cpu_ms_per_request": _median(r.get("server_cpu_ms_per_request") for r in results),
                      "client": results[0].get("client"), "reps": len(results)})
    cpu_ratios = {}
    for model in chosen:
        for clients in clients_grid:
            pairs = list(zip(rows[(model, clients, "on")], rows[(model, clients, "off")]))
            per_rep = [a["requests_per_s"] / b["requests_per_s"] for a, b in pairs]
            ratios[f"{model}@{clients}"] = {"median": statistics.median(per_rep), "min": min(per_rep),
                                            "max": max(per_rep)}
            cpu = [b["server_cpu_ms_per_request"] / a["server_cpu_ms_per_request"] for a, b in pairs
                   if a.get("server_cpu_ms_per_request") and b.get("server_cpu_ms_per_request")]
            if cpu:
                cpu_ratios[f"{model}@{clients}"] = statistics.median(cpu)
    errors = sum(r["errors"] for r in table)
    targets = [common.target("errors (all loads)", float(errors), 0, higher_is_better=False, unit=""),
               common.target("batching on / off, classifier, 32 clients (req/s)",
                             ratios.get("clf@32", {}).get("median"), 3.0),
               common.target("batching on / off, bigger classifier (d256/L4), 32 clients (req/s)",
                             ratios.get("big@32", {}).get("median"), 3.0),
               common.target("batching on / off, translator, 32 clients (req/s)",
                             ratios.get("mt@32", {}).get("median"), 3.0)]
    result = {"title": "HTTP load on scratchformer serve (batching on vs off)", "machine": machine, "quick": quick,
              "rows": table, "ratio_on_off": ratios, "server_cpu_ratio_off_on": cpu_ratios, "targets": targets,
              "loadavg": open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else None,
              "settings": {"reps": reps, "requests_per_client": per_client, "max_seconds": max_seconds,
                           "server_defaults": "--max-wait-ms 5 --max-batch-tokens 8192, --max-queue 4096",
                           "load_generator": table[0]["client"] if table else None,
                           "nice": os.nice(0)}}
    md = [common.header_md(result["title"], machine, __doc__.split("\n\n")[1].replace("\n", " ")), "",
          common.targets_md(targets), "",
          f"load average at the end: {' '.join(result['loadavg'] or [])}; clients: {result['settings']['load_generator']}",
          "",
          common.md_table(["model", "clients", "batching", "req/s", "p50 ms", "p99 ms", "errors / requests",
                           "server ms CPU / request"],
                          [[r["model"], r["clients"], r["batching"], common.fmt_num(r["requests_per_s"]),
                            common.fmt_num(r["p50_ms"]), common.fmt_num(r["p99_ms"]),
                            f"{r['errors']} / {r['requests']}", common.fmt_num(r["server_cpu_ms_per_request"])]
                           for r in sorted(table, key=lambda r: (r["model"], r["clients"], r["batching"]))]), "",
          "batching on / off (requests/s, median of per-repetition ratios, min–max): "
          + "; ".join(f"{k} {v['median']:.2f}x ({v['min']:.2f}–{v['max']:.2f})" for k, v in ratios.items()), "",
          "server CPU per request, off / on (median over repetitions): "
          + "; ".join(f"{k} {v:.2f}x" for k, v in cpu_ratios.items())]
    common.write_result("serve", result, "\n".join(md), out_dir)
    return result


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


if __name__ == "__main__":
    common.cli(run, __doc__, options={"models": ("--models", "comma-separated subset of clf,big,mt (default all)")})
