"""`report.md` of an experiment: the claim, the verdicts, the setup, the table, the figures."""
from __future__ import annotations

import datetime
import os
from pathlib import Path

from ..fileio import atomic_write_text
from .extrapolation import FIGURES
from .results import markdown_table
from .spec import ExperimentSpec, Plan
from .sweep import SweepResult
from .verdict import Outcome, __doc__ as VERDICT_DOC


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def _run_minutes(result: SweepResult) -> float:
    walls = result.runs["wall_s"] if "wall_s" in result.runs else []
    return float(sum(w for w in walls if w == w and w is not None)) / 60


def verdict_table(outcomes: list[Outcome]) -> str:
    lines = ["| claim | a | b | measured | verdict |", "|---|---|---|---|---|"]
    for o in outcomes:
        lines.append(f"| {o.says} | {o.a} | {o.b} | {o.measured} | **{o.verdict}** |")
    return "\n".join(lines) + "\n"


def _method() -> str:
    body = VERDICT_DOC.split("\n", 2)[2].strip()  # the module docstring without its title line
    return body


def write_report(spec: ExperimentSpec, plan: Plan, result: SweepResult, outcomes: list[Outcome],
                 command: str, seconds: float) -> Path:
    out = result.spec.out
    axes = [a.name for a in result.spec.axes]
    mode = "quick (tiny model, few steps, data subset: a smoke test, not evidence)" if plan.quick else "full"
    grid = "; ".join(f"{a.name} ∈ {{{', '.join(a.labels)}}}" for a in result.spec.axes)
    data = spec.data + (f" (subset: {plan.subset})" if plan.subset else "")
    parts = [
        f"# Experiment `{spec.name}`\n",
        f"> **中文**：{spec.claim.get('zh', '')}\n>\n> **English**: {spec.claim.get('en', '')}\n",
        (f"Where it comes from: {spec.source}\n" if spec.source else ""),
        "## Verdict\n",
        verdict_table(outcomes),
        "\n<details><summary>How the verdict is decided</summary>\n\n" + _method() + "\n\n</details>\n",
        "## Setup\n",
        f"- mode: {mode}\n- task: {spec.task}, data: {data}\n- grid: {grid}\n"
        f"- seeds: {plan.seeds} per cell (`train.seed` = 0..{plan.seeds - 1})\n"
        f"- base recipe: `base.json`; overrides for every run: {', '.join(f'`{s}`' for s in plan.sets) or 'none'}\n"
        f"- runs: {len(result.slots)}, {_run_minutes(result):.1f} min of runs (sum of their wall times; "
        # a rerun that finds every run finished only redraws (seconds, against minutes of runs)
        + (f"this invocation {seconds / 60:.1f} min" if seconds >= 0.1 * 60 * _run_minutes(result) else
           "this invocation only redrew the report from the finished runs")
        + f") on {cpu_name()} "
        f"({os.cpu_count()} cores, shared), {datetime.date.today().isoformat()}\n"
        f"- reproduce: `{command}`\n",
        "## Results\n",
        "Mean ± standard deviation over seeds (diverged runs excluded from the means, counted in "
        "`diverged`). Time per step: median between training logs, evaluation excluded; absolute times "
        "on a shared machine drift by ±30%. Peak RSS: the run's resident-set high-water mark, "
        "torch's own ~300 MiB included.\n",
        markdown_table(result.summary, axes, result.columns),
    ]
    captions = {"metric_vs_value": "Measures against the swept value (error bars: std over seeds)",
                "curves": f"Validation {result.metric} of every run",
                **{name: caption for name, (_, caption) in FIGURES.items()}}
    for name, caption in captions.items():
        if name in result.figures:
            parts.append(f"\n{caption}:\n\n![{name}]({result.figures[name].name})\n")
    if spec.notes:
        parts.append("\n## Notes\n\n" + "".join(f"- {n}\n" for n in spec.notes))
    parts.append("\nFiles: `results.csv` (per cell), `runs.csv` (per run), `cells/` (the run folders).\n")
    path = out / "report.md"
    atomic_write_text(path, "\n".join(p for p in parts if p))
    return path
