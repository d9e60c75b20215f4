"""`scratchformer experiment yours-vs-ours --model FILE.py`: the learner's own Transformer and ours, trained on
the same real data with the same tokenizer, batches, schedule, wall-clock budget and seeds.

你自己写的模型和我们的模型：同样的数据、分词、批次、学习率计划、时间预算和种子，并排训练和比较。

Both are `train classify` runs (`train lm` for a language-model data set) of one recipe that differ only in the
network (`model.kind`: ours, or `yours` from `--model`, tasks/your_model.py). Each run trains in its own
process (so that its peak memory is its own, `os.wait4`), in the order ours, yours, ours, ... so that both see
the same machine load. Per run: test accuracy (validation loss for an LM), training tokens a second (median
over the Trainer's windows), peak resident memory, the validation curve, and the step at which it first reached
a level (90% of the lowest best validation accuracy among all runs: the same level for both).

Verdicts (verdict.py, Welch intervals over seeds): "yours is within 2 points of ours" on test accuracy, the
speed ratio, the memory ratio. The report explains what it can: each bug `scratchformer check` names in their
file (printed before training), and their share of the time per step against ours.
"""
from __future__ import annotations

import io
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pandas as pd

from ..errors import UserError
from ..fileio import atomic_write_bytes, atomic_write_text, make_dirs
from .report import cpu_name, verdict_table
from .verdict import evaluate_check
from ..tasks.slots import Unavailable

MODELS = ("ours", "yours")


def _side_of(data: str):
    """(the task's name, its `yours` slot): a registered data set's task, or for a file the one task whose face
    reads that kind of file (a text: the task whose data form is "text"; else a table)."""
    from ..tasks.faces import face, faces

    if Path(data).is_file():
        text = Path(data).suffix == ".txt"
        names = [n for n, f in faces().items() if not isinstance(f.yours, Unavailable) and f.yours.text == text]
        if not names:
            raise UserError(f"--data {data}: no task trains a learner's network on such a file")
        name = names[0]
    else:
        from ..data.registry import get_dataset
        name = get_dataset(data).task
    side = face(name).yours
    if isinstance(side, Unavailable):
        raise UserError(f"--data {data} is a {name} data set; {side}")
    return name, side


def one_run(task: str, side, data: str, model: str, seed: int, minutes: float | None, quick: bool, file: Path,
            run_dir: Path, log: Callable[[str], None], steps: int | None = None, sizes: list[str] = ()) -> dict:
    """Train one run in a child process; its cell (measures) is kept in `run_dir/cell.json` (resumable)."""
    from ..train.curves import read_metrics

    done = run_dir / "cell.json"
    if done.exists():
        cell = json.loads(done.read_text(encoding="utf-8"))
        if (cell.get("minutes"), cell.get("max_steps")) != (minutes, steps) and "max_steps" in cell:
            raise UserError(f"{run_dir} was trained with another budget ({cell.get('minutes')} minutes, "
                            f"{cell.get('max_steps')} steps): use another --out, or the same --set")
        if "params" not in cell:  # a cell measured before the report counted parameters
            cell["params"] = _parameters(run_dir / "model.safetensors")
        return cell
    make_dirs(run_dir.parent)
    cfg = run_dir.parent / f"{run_dir.name}.json"
    atomic_write_text(cfg, json.dumps(side.recipe(data, seed, minutes, steps, quick), indent=1))
    argv = [sys.executable, "-m", "scratchformer.cli", "train", task, "--config", str(cfg), "--out", str(run_dir),
            "--overwrite", *side.argv]
    if model == "yours":
        argv += ["--model", str(file)] + [a for item in sizes for a in ("--size", item)]
    logf = run_dir.parent / f"{run_dir.name}.log"
    t0 = time.monotonic()
    with open(logf, "wb") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"})
        _, status, usage = os.wait4(proc.pid, 0)
    rc = os.waitstatus_to_exitcode(status)
    if rc != 0:
        tail = logf.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-1:] or ["?"]
        raise UserError(f"the {model} run (seed {seed}) failed: {tail[0][:300]} (log: {logf})")
    rows = read_metrics(run_dir / "metrics.jsonl")
    curve = [(r["step"], r[side.metric]) for r in rows if r.get("split") == "valid" and side.metric in r]
    train_rows = [r["tokens_per_s"] for r in rows if r.get("split") == "train" and "tokens_per_s" in r]
    score = side.score(run_dir)
    check = [ln.split("check: ", 1)[1] for ln in logf.read_text(encoding="utf-8", errors="replace").splitlines()
             if ln.startswith("check: ")]
    cell = {"model": model, "seed": seed, "minutes": minutes, "max_steps": steps, "score": score,
            "params": _parameters(run_dir / "model.safetensors"),
            "tokens_per_s": statistics.median(train_rows) if train_rows else float("nan"),
            "peak_mib": usage.ru_maxrss / 1024, "steps": max((r["step"] for r in rows), default=0),
            "wall_s": time.monotonic() - t0, "curve": curve, "check": check}
    atomic_write_text(done, json.dumps(cell, indent=1) + "\n")
    log(f"{model} seed {seed}: {side.score_name} {score:.4f}, "
        f"{cell['tokens_per_s']:.0f} tokens/s, peak {cell['peak_mib']:.0f} MiB, {cell['steps']} steps")
    return cell


def _parameters(weights: Path) -> int:
    """Parameters in a run's weights (a tied matrix once: its aliases are not stored twice)."""
    from safetensors import safe_open

    with safe_open(str(weights), framework="pt") as f:
        return int(sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys()))


def token_table_std(run_dir: Path, task: str) -> float | None:
    """The std of the token-embedding table (the embedding with one row per vocabulary entry) as the run's model
    started: built again from its config under its seed, as the pipeline builds it (None: no such table)."""
    import torch

    from ..tasks.runs import RunDir

    from ..tasks.faces import face

    f = face(task)
    r = RunDir(run_dir).load_recipe(f.recipe, task, (), f.noun)
    build = lambda: _fresh(f, r, run_dir)  # noqa: E731
    torch.manual_seed(r.train.seed)
    model = build()
    tables = [m for m in model.modules() if isinstance(m, torch.nn.Embedding) and m.num_embeddings == r.model.vocab_size]
    return float(tables[0].weight.detach().std()) if tables else None


def _fresh(face, recipe, run_dir: Path):
    """The run's model as it started: its network built from the config (weights not loaded)."""
    from ..models.classifier import ClassifierConfig, build_classifier
    from ..models.language_model import build_lm

    cfg = recipe.model
    return build_classifier(cfg, run_dir) if isinstance(cfg, ClassifierConfig) else build_lm(cfg, run_dir)


def step_to_reach(curve: list, level: float, lower_is_better: bool) -> float:
    for step, v in curve:
        if (v <= level) if lower_is_better else (v >= level):
            return float(step)
    return float("nan")


def plot(cells: list[dict], level: float, ylabel: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..fonts import cjk_fonts

    with cjk_fonts():
        _draw(plt, cells, level, ylabel, path)


def _draw(plt, cells: list[dict], level: float, ylabel: str, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    colours = {"ours": "tab:blue", "yours": "tab:orange"}
    for c in cells:
        if c["curve"]:
            s, v = zip(*c["curve"])
            ax.plot(s, v, color=colours[c["model"]], marker="o", ms=3, alpha=0.8,
                    label={"ours": "ours 我们的", "yours": "yours 你的"}[c["model"]] if c["seed"] == 0 else None)
    ax.axhline(level, color="grey", ls=":", lw=1, label=f"level {level:.3f}")
    ax.set(xlabel="optimizer step", ylabel=ylabel,
           title="你的模型 vs 我们的 · yours vs ours (every seed a line)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def run(out: Path, seeds: int = 3, quick: bool = False, log: Callable[[str], None] = print,
        model: str | None = None, data: str = "thucnews", minutes: float | None = None,
        steps: int | None = None, sizes: list[str] = ()) -> str:
    """`minutes` a run (the default, 5; the exercise's "in the same minutes"), or `steps` a run: the same
    optimizer steps for both (a comparison of what each learns per step, whatever else runs on the machine)."""
    if not model:
        raise UserError("experiment yours-vs-ours needs your model: --model FILE.py[:Name]")
    from ..tasks.your_model import parse_model_arg

    file, name = parse_model_arg(model)
    spec = f"{file.resolve()}:{name}" if name else str(file.resolve())
    task, side = _side_of(data)
    if seeds < 2 and not quick:
        raise UserError("--seeds must be at least 2 for an interval (3 or more is the default)")
    if steps is not None and minutes is not None:
        raise UserError("give one budget: --set minutes=M (wall clock) or --set steps=N (optimizer steps)")
    if steps is None:
        minutes = minutes if minutes is not None else (0.2 if quick else 5.0)
    out = Path(out)
    make_dirs(out / "runs")
    cells = []
    for seed in range(seeds):
        for m in MODELS:  # alternating: both see the same machine load
            cells.append(one_run(task, side, data, m, seed, minutes, quick, Path(spec), out / "runs" / f"{m}-s{seed}",
                                 log, steps, sizes))
    lower = side.lower_is_better
    best = [min(v for _, v in c["curve"]) if lower else max(v for _, v in c["curve"]) for c in cells if c["curve"]]
    level = (1.1 * max(best) if lower else 0.9 * min(best)) if best else float("nan")
    for c in cells:
        c["step_to_level"] = step_to_reach(c["curve"], level, lower)
    runs = pd.DataFrame([{k: v for k, v in c.items() if k not in ("curve", "check")} for c in cells])
    runs["cell"], runs["diverged"] = runs["model"], False
    # paired by seed: yours and ours of one seed ran back to back, so the machine's load falls on both alike;
    # the interval is over the per-seed differences (log ratios for speed and memory)
    by = {(c["model"], c["seed"]): c for c in cells}
    pairs = pd.DataFrame([{"seed": s_, "cell": "pair", "diverged": False,
                           "score_diff": (by["yours", s_]["score"] - by["ours", s_]["score"]) * side.scale,
                           "speed_log": math.log(by["yours", s_]["tokens_per_s"] / by["ours", s_]["tokens_per_s"]),
                           "memory_log": math.log(by["yours", s_]["peak_mib"] / by["ours", s_]["peak_mib"])}
                          for s_ in range(seeds)])
    checks = [{"says": f"yours is within {side.bar:g} {side.unit} of ours ({side.score_name})", "kind": "value",
               "column": "score_diff", "a": {"cell": "pair"},
               "region": {"<": side.bar} if lower else {">": -side.bar}}]
    checks += [{"says": "yours trains as fast as ours (tokens a second, ratio > 0.8)", "kind": "value",
                "column": "speed_log", "a": {"cell": "pair"}, "region": {">": math.log(0.8)}},
               {"says": "yours needs no more memory than ours (peak RSS, ratio < 1.25)", "kind": "value",
                "column": "memory_log", "a": {"cell": "pair"}, "region": {"<": math.log(1.25)}}]
    outcomes = []
    for c in checks:
        o = evaluate_check(c, pairs, ["cell"], quick)
        o.a, o.b = "yours", "ours"
        if c["column"].endswith("_log") and o.estimate is not None:
            o.measured = (f"ratio yours/ours = x{math.exp(o.estimate):.3g} [x{math.exp(o.low):.3g}, "
                          f"x{math.exp(o.high):.3g}] (95% CI, t over seeds of the paired log ratio, n = {seeds})")
        elif o.estimate is not None:
            o.measured = (f"yours − ours = {o.estimate:+.3g} [{o.low:+.3g}, {o.high:+.3g}] "
                          f"{side.unit} (95% CI, t over seeds of the paired difference, n = {seeds})")
        outcomes.append(o)
    atomic_write_text(out / "pairs.csv", pairs.to_csv(index=False))
    plot(cells, level, f"validation {side.metric}", out / "curves.png")
    atomic_write_text(out / "runs.csv", runs.to_csv(index=False))
    cols = ["params", "score", "tokens_per_s", "peak_mib", "steps", "step_to_level"]
    summary = runs.groupby("model", sort=False)[cols].agg(["mean", "std"])
    what = side.score_name
    table = [f"| model | parameters | {what} | tokens/s | peak MiB | steps | step to level |",
             "|---|---|---|---|---|---|---|"]
    for m, r in summary.iterrows():
        f = lambda c, p=1: f"{r[(c, 'mean')]:.{p}f} ± {r[(c, 'std')]:.{p}f}"  # noqa: E731
        table.append(f"| {m} | {r[('params', 'mean')] / 1e6:.2f}M | {f('score', 4)} | {f('tokens_per_s', 0)} | {f('peak_mib', 0)} | {f('steps', 0)} | "
                     f"{f('step_to_level', 0)} |")
    findings = sorted({x for c in cells if c["model"] == "yours" for x in c["check"]})
    named = [x for x in findings if not x.startswith("no bug found")]
    explain = [f"- `scratchformer check` names in your file: {x}" for x in named] or \
        [f"- `scratchformer check`: {findings[0] if findings else 'nothing to report'}"]
    size = summary[("params", "mean")]
    if size.get("ours") and size.get("yours") and not 0.67 < size["yours"] / size["ours"] < 1.5:
        explain.append(f"- your model has {size['yours'] / 1e6:.2f}M parameters, ours {size['ours'] / 1e6:.2f}M: "
                       f"{'a smaller model learns less in the same budget' if size['yours'] < size['ours'] else 'a larger model takes more time a step'}"
                       f" (build it at our size with --size, e.g. --size d_model=128)")
    stds = {m: token_table_std(out / "runs" / f"{m}-s0", task) for m in MODELS}
    if stds["ours"] and stds["yours"] and stds["yours"] > 4 * stds["ours"]:
        explain.append(f"- your token embeddings start at std {stds['yours']:.2f}, ours at {stds['ours']:.2f} (we multiply "
                       f"by √d_model after, as the paper does). Rows that large (times √d_model, if yours does so too) "
                       f"dwarf the positional encoding (values in [−1, 1]) and each sublayer's output: the first "
                       f"residual sums are nearly the embeddings alone and the layers learn slowly. Start the table at "
                       f"std d_model^-0.5, or Glorot for every matrix as The Annotated Transformer's make_model does "
                       f"(exercise 12's solution: 71% without, 83% with, in 800 steps)")
    speed = summary[("tokens_per_s", "mean")]
    if speed.get("ours") and speed.get("yours") and speed["yours"] < 0.8 * speed["ours"]:
        explain.append(f"- your model processes {speed['yours'] / speed['ours']:.2f}x our tokens a second: in the "
                       f"same minutes it takes fewer steps (a per-head loop, or attention computed with more, "
                       f"smaller products, is the usual cause; `scratchformer check` and docs/speed.md)")
    budget = f"steps={steps}" if steps else f"minutes={minutes:g}"
    command = (f"scratchformer experiment yours-vs-ours --model {model} --data {data} --seeds {seeds}"
               f"{''.join(f' --size {x}' for x in sizes)}{' --quick' if quick else ''} --set {budget} --out {out}")
    report = "\n".join([
        "# Experiment `yours-vs-ours`", "",
        f"> **中文**：你的模型（`{file.name}`）和我们的模型，同样的数据（{data}）、分词、批次、学习率计划、"
        f"每次 {f'{steps} 步' if steps else f'{minutes:g} 分钟'}、{seeds} 个种子。", ">",
        f"> **English**: your model (`{file.name}`) and ours on {data}: the same tokenizer, batches, schedule, "
        f"{f'{steps} steps' if steps else f'{minutes:g} minutes'} a run and {seeds} seeds.", "",
        "## Verdict", "", verdict_table(outcomes),
        "## Numbers (mean ± std over seeds)", "", *table, "",
        f"Level: {'110% of the highest best validation loss' if lower else '90% of the lowest best validation accuracy'}"
        f" of all runs ({level:.4f}), the same for both; NaN = not reached.", "",
        "## What explains the difference", "", *explain, "",
        "![curves](curves.png)", "",
        f"Reproduce: `{command}` ({cpu_name()}, {os.cpu_count()} CPUs; each run in its own process, one thread).", ""])
    atomic_write_text(out / "report.md", report)
    return report
