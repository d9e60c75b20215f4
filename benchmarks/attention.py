"""Attention alone vs sequence length: our math path, our fused path, and a local window.

`scratchformer.nn.scaled_dot_product_attention` with `impl="math"` (scores written out,
O(T²) memory), `impl="fused"` (SDPA's flash kernel on CPU) and the fused path with a
`local_window_mask(T, T, window)` band. The number of tokens per batch is fixed
(B × T = 8192), so every length does the same projection work and FLOPs grow with T.

A second table times bfloat16 forward+backward (training under autocast) at translation-like
lengths for the math path, the fused path and `impl="auto"`: torch's CPU flash kernel is slow
in bfloat16 on short sequences, so auto takes the math path up to
`attention.CPU_BF16_MATH_MAX_KEYS` keys; the table is the evidence for that threshold.

Peak memory: measured in a child process started with `MALLOC_MMAP_THRESHOLD_=65536`,
so every tensor larger than 64 KiB is its own mmap that goes back to the OS when freed;
the kernel's resident high-water mark (`VmHWM`, reset before each call through
`/proc/self/clear_refs`) minus the resident size before the call is then the peak of
the memory the call allocated and touched (inputs excluded). The analytic size of the
score tensor (B·H·T²·4 bytes) is reported beside it.
"""
from __future__ import annotations

import re
from pathlib import Path

import torch

from scratchformer.nn import local_window_mask, scaled_dot_product_attention
from scratchformer.nn.attention import CPU_BF16_MATH_MAX_KEYS

from . import common

IMPLS = ("math", "fused", "local")
IMPL_LABEL = {"math": "math path (scores written out)", "fused": "fused path (SDPA flash kernel)",
              "local": "fused + local_window_mask"}


def plan(quick: bool) -> dict:
    if quick:
        return dict(d_model=32, n_heads=4, tokens=256, lengths=[16, 32, 64], window=8,
                    reps=2, budget_per_len=None, memory_subprocess=False)
    return dict(d_model=256, n_heads=8, tokens=8192, lengths=[128, 256, 512, 1024, 2048, 4096, 8192],
                window=128, reps=5, budget_per_len=8.0, memory_subprocess=True)


def inputs(T: int, p: dict, seed: int = 0):
    B = max(1, p["tokens"] // T)
    hd = p["d_model"] // p["n_heads"]
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, p["n_heads"], T, hd, generator=g) for _ in range(3))
    band = local_window_mask(T, T, p["window"])[None, None]  # (1, 1, T, T)
    return q, k, v, band


def calls(T: int, p: dict) -> dict:
    q, k, v, band = inputs(T, p)
    return {
        "math": lambda: scaled_dot_product_attention(q, k, v, impl="math")[0],
        "fused": lambda: scaled_dot_product_attention(q, k, v, impl="fused")[0],
        "local": lambda: scaled_dot_product_attention(q, k, v, attn_mask=band, impl="fused")[0],
    }


def flops(T: int, p: dict) -> float:
    B = max(1, p["tokens"] // T)
    return 4 * B * p["n_heads"] * T * T * (p["d_model"] // p["n_heads"])


def score_bytes(T: int, p: dict) -> int:
    return max(1, p["tokens"] // T) * p["n_heads"] * T * T * 4


# ----------------------------------------------------------------------------- bf16 training

BF16_IMPLS = ("math", "fused", "auto")


def bf16_plan(quick: bool) -> dict:
    if quick:
        return dict(n_heads=4, head_dim=16, tokens=256, lengths=[16, 64], reps=2)
    return dict(n_heads=4, head_dim=64, tokens=4096, lengths=[16, 32, 64, 128, 256, 512, 1024], reps=7)


def bf16_training_calls(T: int, p: dict) -> dict:
    """forward+backward of causal self-attention with a padding mask, q/k/v in bfloat16."""
    B = max(1, p["tokens"] // T)
    g = torch.Generator().manual_seed(T)
    q, k, v = (torch.randn(B, p["n_heads"], T, p["head_dim"], generator=g).bfloat16().requires_grad_()
               for _ in range(3))
    mask = torch.ones(B, 1, 1, T, dtype=torch.bool)
    mask[: B // 2, ..., T - T // 4:] = False  # half the rows padded by a quarter

    def call(impl):
        def f():
            out, _ = scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True, impl=impl)
            out.float().sum().backward()
        return f
    return {impl: call(impl) for impl in BF16_IMPLS}


def bf16_training(quick: bool, log=print) -> dict:
    p = bf16_plan(quick)
    out = {"settings": p, "threshold": CPU_BF16_MATH_MAX_KEYS, "time": {}}
    for T in p["lengths"]:
        log(f"[attention] bf16 training T={T}")
        times = common.interleaved(bf16_training_calls(T, p), p["reps"], warmup=1)
        out["time"][T] = {"ms": {n: common.summary([1e3 * t for t in ts]) for n, ts in times.items()},
                          "auto_vs_fused": common.paired_ratio(times["fused"], times["auto"]),
                          "auto_vs_math": common.paired_ratio(times["math"], times["auto"])}
    return out


def bf16_markdown(r: dict) -> str:
    p = r["settings"]
    rows = [[T, *(common.fmt_stat(x["ms"][n]) for n in BF16_IMPLS), common.fmt_stat(x["auto_vs_fused"], 3, "×"),
             common.fmt_stat(x["auto_vs_math"], 3, "×")] for T, x in r["time"].items()]
    return (f"## bfloat16 forward+backward (training), {p['n_heads']} heads of {p['head_dim']}, "
            f"{p['tokens']} tokens, causal + padding mask\n\n"
            f"`impl=\"auto\"` takes the math path in bfloat16 on CPU up to {r['threshold']} keys, the fused "
            "kernel above. Speed-ups are per interleaved repetition (higher = auto faster).\n\n"
            + common.md_table(["T", "math ms", "fused ms", "auto ms", "auto vs fused", "auto vs math"], rows))


# ----------------------------------------------------------------------------- memory

def memory_worker(quick: bool) -> dict:
    """{T: {impl: bytes}} — run in a child process with MALLOC_MMAP_THRESHOLD_ set."""
    p = plan(quick)
    avail = _mem_available()
    res = {}
    for T in p["lengths"]:
        res[T] = {}
        fns = calls(T, p)
        for name in IMPLS:
            if name == "math" and avail is not None and 3 * score_bytes(T, p) > 0.6 * avail:
                res[T][name] = None  # would not fit next to the other engineers' jobs
                continue
            fns[name]()  # warm: one-time allocations (thread pools, kernels) do not count
            res[T][name] = common.peak_bytes(fns[name], inference=True)
    return res


def _mem_available() -> int | None:
    try:
        return int(re.search(r"MemAvailable:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1)) * 1024
    except (OSError, AttributeError):
        return None


def measure_memory(quick: bool, own_process: bool) -> tuple[dict, str]:
    raw, how = common.memory_in_child("attention", memory_worker, quick, own_process)
    return {int(T): v for T, v in raw.items()}, how  # JSON keys are strings


# ----------------------------------------------------------------------------- run

def run(quick: bool = False, out_dir=None, log=print) -> dict:
    p = plan(quick)
    res = {"title": "Attention vs sequence length: time and peak memory", "machine": common.machine_info(),
           "settings": {k: p[k] for k in ("d_model", "n_heads", "tokens", "lengths", "window")},
           "time": {}, "memory": {}}
    avail = _mem_available()
    for T in p["lengths"]:
        log(f"[attention] T={T}")
        fns = calls(T, p)
        if avail is not None and 3 * score_bytes(T, p) > 0.6 * avail:
            fns.pop("math")
        fns = {n: (lambda f=f: _infer(f)) for n, f in fns.items()}
        times = common.interleaved(fns, p["reps"], warmup=1, budget_s=p["budget_per_len"])
        res["time"][T] = {
            "batch": max(1, p["tokens"] // T),
            "ms": {n: common.summary([1e3 * t for t in ts]) for n, ts in times.items()},
            "gflops": {n: common.rate_summary(flops(T, p) / 1e9, ts) for n, ts in times.items()},
            "fused_speedup_over_math": common.paired_ratio(times["math"], times["fused"]) if "math" in times else None,
            "local_speedup_over_fused": common.paired_ratio(times["fused"], times["local"]),
        }
        del fns
    log("[attention] peak memory")
    mem, how = measure_memory(quick, p["memory_subprocess"])
    res["settings"]["memory_method"] = how
    for T in p["lengths"]:
        res["memory"][T] = {"peak_bytes": mem.get(T, {}), "score_tensor_bytes": score_bytes(T, p),
                            "band_mask_bytes": T * T}
    res["scaling"] = scaling(res, p)
    res["targets"] = [
        common.target("fused peak memory growth, T=%d -> %d (B·T fixed: linear = flat)" % tuple(res["scaling"]["span"]),
                      res["scaling"]["fused_memory_growth"], 1.5, higher_is_better=False,
                      note="flat means O(T) per sequence: memory does not follow T² "),
        common.target("math peak memory growth over the same span (quadratic = grows with T)",
                      res["scaling"]["math_memory_growth"], 2.0, note="shown for contrast"),
    ]
    res["bf16_training"] = bf16_training(quick, log)
    # what the switch buys where it takes the math path: auto vs the flash kernel, worst such length
    short = [x for T, x in res["bf16_training"]["time"].items() if T <= CPU_BF16_MATH_MAX_KEYS]
    worst = min(x["auto_vs_fused"]["median"] for x in short) if short else None
    res["targets"].append(common.target(
        f"bf16 training attention, T <= {CPU_BF16_MATH_MAX_KEYS}: auto (math path) / fused kernel, worst length",
        worst, 1.2, note="above the threshold auto is the fused kernel; the crossover moves with masks and load"))
    common.write_result("attention", res, to_markdown(res), out_dir)
    return res


def _infer(f):
    with torch.inference_mode():
        return f()


def scaling(res: dict, p: dict) -> dict:
    """How peak memory grows from the shortest to the longest length where math ran. With
    B·T fixed, memory linear in T per sequence is flat here; quadratic grows ∝ T."""
    Ts = [T for T in p["lengths"] if res["memory"][T]["peak_bytes"].get("math")]
    lo, hi = (Ts[0], Ts[-1]) if len(Ts) >= 2 else (p["lengths"][0], p["lengths"][-1])

    def growth(name, a=lo, b=hi):
        x, y = res["memory"][a]["peak_bytes"].get(name), res["memory"][b]["peak_bytes"].get(name)
        return None if not x or y is None else y / x

    T0, T1 = p["lengths"][0], p["lengths"][-1]
    return {"span": [T0, T1], "fused_memory_growth": growth("fused", T0, T1),
            "local_memory_growth": growth("local", T0, T1), "math_span": [lo, hi],
            "math_memory_growth": growth("math"), "length_growth": hi / lo}


def _mib(b):
    return "–" if b is None else f"{b / 2**20:.1f}"


def to_markdown(res: dict) -> str:
    s = res["settings"]
    parts = [common.header_md(res["title"], res["machine"],
                              f"d_model {s['d_model']}, {s['n_heads']} heads, B × T = {s['tokens']} tokens per call, "
                              f"local window ±{s['window']}. Forward only, inference_mode. Times: median (min–max) "
                              f"over interleaved repetitions. Memory: {s['memory_method']}.")]
    parts.append("## Targets\n\n" + common.targets_md(res["targets"]))
    rows = []
    for T, r in res["time"].items():
        row = [T, r["batch"]]
        for n in IMPLS:
            row.append(common.fmt_stat(r["ms"].get(n)))
        for n in IMPLS:
            g = r["gflops"].get(n)
            row.append("–" if g is None else common.fmt_num(g["median"]))
        fs = r["fused_speedup_over_math"]
        row += ["–" if fs is None else common.fmt_stat(fs, 3, "×"), common.fmt_stat(r["local_speedup_over_fused"], 3, "×")]
        rows.append(row)
    parts.append("## Time (ms per call) and achieved GFLOP/s\n\n" + common.md_table(
        ["T", "B", "math ms", "fused ms", "local ms", "math GFLOP/s", "fused GFLOP/s", "local GFLOP/s",
         "fused vs math", "local vs fused"], rows))
    rows = []
    for T, r in res["memory"].items():
        pb = r["peak_bytes"]
        rows.append([T, _mib(pb.get("math")), _mib(pb.get("fused")), _mib(pb.get("local")),
                     _mib(r["score_tensor_bytes"]), _mib(r["band_mask_bytes"])])
    parts.append("## Peak memory (MiB) allocated by one call\n\n" + common.md_table(
        ["T", "math", "fused", "local", "score tensor B·H·T²·4 (analytic)", "band mask T² bool"], rows)
        + "\n\nThe local window runs the same flash kernel over the full T×T grid with a boolean band mask "
          "(which SDPA turns into a float mask): its time and mask memory stay O(T²). The blocked window "
          "(`window_impl='blocked'`, the default; benchmarks/long_sequence.py) is O(T·window).")
    if "bf16_training" in res:
        parts.append(bf16_markdown(res["bf16_training"]))
    return "\n\n".join(parts)


def main(argv=None):
    common.memory_bench_main(__doc__, run, memory_worker, argv)


if __name__ == "__main__":
    main()
