"""Long inputs: time and peak memory per token vs sequence length, full attention vs a window.

One encoder layer (d256, 4 heads, d_ff 1024, bidirectional), B × T = `tokens` per call (one
sequence of T once T >= tokens), forward (inference_mode) and a training step (forward +
backward), four attentions with the same weights:
  - math:    full attention, scores written out (`impl="math"`): O(T²) time and memory;
  - fused:   full attention, torch's flash kernel (`impl="fused"`): O(T²) time, O(T) memory;
  - band:    window w as a T×T band mask over the flash kernel (`window_impl="band"`);
  - blocked: window w computed block by block (`nn/window.py`): O(T·w) time and memory.
Contenders whose cost would not fit the run (math beyond `math_max`, band beyond `band_max`,
fused beyond `fused_max`) are left out of the longer lengths; blocked runs at every length.

Then the point of it: a 4-layer d256 encoder takes a training step (forward, backward, AdamW)
on one 16k-token input with window + gradient checkpointing + bfloat16 autocast; its peak
memory beside the same step in float32 without checkpointing.

Peak memory: as in `benchmarks/attention.py`, in a child process with
`MALLOC_MMAP_THRESHOLD_=65536` (each tensor over 64 KiB is its own mmap, returned when freed),
the resident high-water mark (`VmHWM`, reset through `/proc/self/clear_refs`) minus the
resident size before the call. Times: interleaved repetitions, medians (min–max).
"""
from __future__ import annotations

import time

import torch

from scratchformer.nn import Encoder, TransformerConfig, padding_mask

from . import common

IMPLS = ("math", "fused", "band", "blocked")


def plan(quick: bool) -> dict:
    if quick:
        return dict(d_model=32, n_heads=4, d_ff=64, window=8, tokens=128, lengths=[32, 64],
                    math_max=64, band_max=64, fused_max=64, reps=2, budget=None,
                    demo=dict(T=128, layers=1), memory_subprocess=False)
    # Sized to run in ~6 minutes on 2 shared cores: the O(T²) contenders stop where one of
    # their training steps would take tens of seconds (fused at 16k: ~40 s on a loaded machine).
    return dict(d_model=256, n_heads=4, d_ff=1024, window=256, tokens=4096,
                lengths=[512, 2048, 4096, 8192, 16384, 32768],
                math_max=4096, band_max=4096, fused_max=8192, reps=2, budget=None,
                demo=dict(T=16384, layers=4), memory_subprocess=True)


def _config(p: dict, impl: str, layers: int = 1) -> TransformerConfig:
    windowed = impl in ("band", "blocked")
    return TransformerConfig(d_model=p["d_model"], n_heads=p["n_heads"], d_ff=p["d_ff"], n_layers=layers,
                             dropout=0.0, norm_first=True, window=p["window"] if windowed else None,
                             window_impl="band" if impl == "band" else "blocked")


def build(p: dict, impl: str, layers: int = 1) -> Encoder:
    torch.manual_seed(0)  # the same weights for every contender
    enc = Encoder(_config(p, impl, layers))
    for layer in enc.layers:
        layer.self_attn.impl = {"math": "math", "fused": "fused"}.get(impl, "auto")
    return enc


def contenders(T: int, p: dict) -> list[str]:
    caps = {"math": p["math_max"], "fused": p["fused_max"], "band": p["band_max"]}
    return [n for n in IMPLS if T <= caps.get(n, T)]


def batch(T: int, p: dict) -> tuple[torch.Tensor, torch.Tensor]:
    B = max(1, p["tokens"] // T)
    g = torch.Generator().manual_seed(T)
    x = torch.randn(B, T, p["d_model"], generator=g)
    return x, padding_mask(torch.full((B,), T), T)  # no padding: every token is real


def calls(T: int, p: dict, names) -> tuple[dict, dict]:
    """{impl: forward()} and {impl: training step()} on one batch of length T."""
    x, m = batch(T, p)
    fwd, train = {}, {}
    for n in names:
        enc = build(p, n)

        def forward(enc=enc):
            with torch.inference_mode():
                return enc(x, padding_mask=m)

        def step(enc=enc):
            enc.zero_grad(set_to_none=True)
            enc(x, padding_mask=m).square().mean().backward()

        fwd[n], train[n] = forward, step
    return fwd, train


# ----------------------------------------------------------------------------- memory

def demo_step(p: dict, variant: str):
    """One AdamW training step of the `demo` encoder on one sequence of `demo.T` tokens."""
    d = p["demo"]
    enc = build(p, "blocked", layers=d["layers"])
    opt = torch.optim.AdamW(enc.parameters(), lr=1e-4)
    light = variant == "window+checkpointing+bf16"
    enc.set_gradient_checkpointing(light)
    x = torch.randn(1, d["T"], p["d_model"], generator=torch.Generator().manual_seed(0))

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=light):
            loss = enc(x).float().square().mean()
        loss.backward()
        opt.step()
        return float(loss.detach())
    return step


DEMO_VARIANTS = ("window+checkpointing+bf16", "window, float32")


def memory_worker(quick: bool) -> dict:
    """{"by_length": {T: {impl: {forward, train}}}, "demo": {variant: bytes}} (child process)."""
    p = plan(quick)
    res: dict = {"by_length": {}, "demo": {}}
    warmed = set()
    for T in p["lengths"]:
        names = contenders(T, p)
        fwd, train = calls(T, p, names)
        res["by_length"][T] = {}
        for n in names:
            if n not in warmed:  # one-time allocations (thread pools, kernels) do not count
                fwd[n](), train[n]()
                warmed.add(n)
            res["by_length"][T][n] = {"forward": common.peak_bytes(fwd[n]), "train": common.peak_bytes(train[n])}
        del fwd, train
    for variant in DEMO_VARIANTS:
        step = demo_step(p, variant)
        peak = common.peak_bytes(step)  # the first step: AdamW's state is allocated in it
        t0 = time.perf_counter()
        step()
        res["demo"][variant] = {"peak_bytes": peak, "step_s": time.perf_counter() - t0}
    return res


def measure_memory(quick: bool, own_process: bool) -> tuple[dict, str]:
    raw, how = common.memory_in_child("long_sequence", memory_worker, quick, own_process, timeout=900)
    raw["by_length"] = {int(T): v for T, v in raw["by_length"].items()}  # JSON keys are strings
    return raw, how


# ----------------------------------------------------------------------------- run

def run(quick: bool = False, out_dir=None, log=print) -> dict:
    p = plan(quick)
    res = {"title": "Long inputs: full attention vs a sliding window, time and memory per token",
           "machine": common.machine_info(), "settings": {k: v for k, v in p.items() if k != "memory_subprocess"},
           "time": {}, "memory": {}}
    for T in p["lengths"]:
        names = contenders(T, p)
        log(f"[long_sequence] T={T}: {', '.join(names)}")
        fwd, train = calls(T, p, names)
        n_tok = max(1, p["tokens"] // T) * T
        entry = {"batch": n_tok // T, "tokens": n_tok}
        for phase, fns in (("forward", fwd), ("train", train)):
            times = common.interleaved(fns, p["reps"], warmup=1, budget_s=p["budget"], min_reps=2)
            entry[phase] = {"us_per_token": {n: common.summary([1e6 * t / n_tok for t in ts]) for n, ts in times.items()}}
            if "fused" in times:
                entry[phase]["blocked_speedup_over_fused"] = common.paired_ratio(times["fused"], times["blocked"])
        res["time"][T] = entry
        del fwd, train
    res["equality"] = equality(p)
    log("[long_sequence] peak memory (and the long training step)")
    t0 = time.perf_counter()
    mem, how = measure_memory(quick, p["memory_subprocess"])
    res["settings"]["memory_method"] = how
    res["memory"] = {T: {n: {k: (None if b is None else b / res["time"][T]["tokens"]) for k, b in v.items()}
                         for n, v in by.items()} for T, by in mem["by_length"].items()}  # bytes per token
    res["demo"] = {"T": p["demo"]["T"], "layers": p["demo"]["layers"],
                   "peak_bytes": {v: d["peak_bytes"] for v, d in mem["demo"].items()},
                   "step_s": {v: d["step_s"] for v, d in mem["demo"].items()}}
    log(f"[long_sequence] memory and demo took {time.perf_counter() - t0:.0f}s")
    res["crossover"] = crossover(res)
    res["targets"] = targets(res, p)
    common.write_result("long_sequence", res, to_markdown(res), out_dir)
    return res


def equality(p: dict) -> dict:
    """Blocked vs band on the same weights and input (the tests check this in depth)."""
    T = p["lengths"][1]
    x, m = batch(T, p)
    with torch.inference_mode():
        a, b = build(p, "blocked")(x[:1], padding_mask=m[:1]), build(p, "band")(x[:1], padding_mask=m[:1])
    return {"T": T, "max_abs_diff_blocked_vs_band": float((a - b).abs().max())}


def crossover(res: dict) -> dict:
    """The first length from which the blocked window is faster than the fused full kernel
    (median per-repetition ratio > 1) at every longer length where both ran."""
    out = {}
    for phase in ("forward", "train"):
        Ts = [T for T, e in res["time"].items() if "blocked_speedup_over_fused" in e[phase]]
        wins = [e for e in Ts if res["time"][e][phase]["blocked_speedup_over_fused"]["median"] > 1]
        first = next((T for T in Ts if all(t in wins for t in Ts if t >= T)), None)
        out[phase] = first
    return out


def _growth(res: dict, phase: str, key: str) -> float | None:
    Ts = list(res[key])
    if key == "time":
        lo, hi = res["time"][Ts[0]][phase]["us_per_token"]["blocked"], res["time"][Ts[-1]][phase]["us_per_token"]["blocked"]
        return hi["median"] / lo["median"]
    lo, hi = res["memory"][Ts[0]]["blocked"][phase], res["memory"][Ts[-1]]["blocked"][phase]
    return None if not lo or hi is None else hi / lo


def targets(res: dict, p: dict) -> list[dict]:
    T0, T1 = p["lengths"][0], p["lengths"][-1]
    fused_T = max(T for T in p["lengths"] if T <= p["fused_max"])
    speed = res["time"][fused_T]["train"].get("blocked_speedup_over_fused")
    light = res["demo"]["peak_bytes"].get(DEMO_VARIANTS[0])
    return [
        common.target(f"blocked window: training time per token, T={T0} -> {T1}", _growth(res, "train", "time"),
                      1.3, higher_is_better=False, note="flat (within 30%) = O(T·w)"),
        common.target(f"blocked window: training peak memory per token, T={T0} -> {T1}",
                      _growth(res, "train", "memory"), 1.3, higher_is_better=False, note="flat = O(T·w)"),
        common.target(f"blocked window vs fused full attention, training step at T={fused_T}",
                      None if speed is None else speed["median"], 1.0, note="per-repetition ratio"),
        common.target(f"{p['demo']['layers']}-layer d{p['d_model']} training step on {p['demo']['T']} tokens "
                      "(window + checkpointing + bf16): peak MiB", None if light is None else light / 2**20,
                      2048, higher_is_better=False, unit=" MiB", note="a step that fits a laptop"),
    ]


def _mem(v):
    return "–" if v is None else common.fmt_num(v / 1024, 3)


def to_markdown(res: dict) -> str:
    s = res["settings"]
    parts = [common.header_md(res["title"], res["machine"],
                              f"One Pre-LN encoder layer, d_model {s['d_model']}, {s['n_heads']} heads, d_ff {s['d_ff']}, "
                              f"window ±{s['window']} (band, blocked), {s['tokens']} tokens per call "
                              f"(B = tokens / T, one sequence from T = {s['tokens']} on). Memory: {s['memory_method']}.")]
    parts.append("## Targets\n\n" + common.targets_md(res["targets"]))
    c = res["crossover"]
    parts.append(f"**Crossover:** the blocked window beats the fused full-attention kernel from T = {c['forward'] or '–'} "
                 f"(forward) and T = {c['train'] or '–'} (training step) on, at every longer length measured "
                 "(– = not within the lengths measured). "
                 f"Blocked vs band, T={res['equality']['T']}: max |diff| = {res['equality']['max_abs_diff_blocked_vs_band']:.2g}.")
    for phase, label in (("forward", "Forward (inference_mode)"), ("train", "Training step (forward + backward)")):
        rows = []
        for T, e in res["time"].items():
            us = e[phase]["us_per_token"]
            mem = res["memory"].get(T, {})
            sp = e[phase].get("blocked_speedup_over_fused")
            rows.append([T, e["batch"], *(common.fmt_stat(us.get(n)) if n in us else "–" for n in IMPLS),
                         *(_mem(mem.get(n, {}).get(phase)) for n in IMPLS),
                         "–" if sp is None else common.fmt_stat(sp, 3, "×")])
        parts.append(f"## {label}: µs per token, and peak KiB per token\n\n" + common.md_table(
            ["T", "B", *(f"{n} µs" for n in IMPLS), *(f"{n} KiB" for n in IMPLS), "blocked vs fused"], rows))
    d = res["demo"]
    rows = [[v, "–" if d["peak_bytes"].get(v) is None else f"{d['peak_bytes'][v] / 2**20:.0f}",
             f"{d['step_s'][v]:.1f}"] for v in DEMO_VARIANTS]
    parts.append(f"## A {d['layers']}-layer encoder, one training step (AdamW) on {d['T']} tokens\n\n"
                 + common.md_table(["variant", "peak MiB", "step s"], rows)
                 + "\n\nPeak memory of the first step (it allocates AdamW's state); time of the second "
                   "(measured in the memory process, so slower than in the tables above).")
    return "\n\n".join(parts)


def main(argv=None):
    common.memory_bench_main(__doc__, run, memory_worker, argv)


if __name__ == "__main__":
    main()
