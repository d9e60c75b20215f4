"""`scratchformer doctor RUN`: look inside a trained model on real samples of its data and
write what was found (`doctor.md`, PNGs) into the run folder.

    subject (the task's inspect slot) -> measurements (measures.py, probes.py) -> findings (findings.py)
                                      -> doctor.md + doctor_*.png (+ a summary for the terminal)
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from . import findings as F
from ..fileio import atomic_write_text, make_dirs
from .measures import ViewStats
from .probes import head_importance, layer_norms, loss_without, non_finite_parameters, unchanged_rows, unk_share
from ..tasks.inspection import Subject


@dataclass
class Report:
    run_dir: Path
    task: str
    data_name: str
    n_samples: int
    notes: list[str]
    findings: list[F.Finding]
    numbers: dict = field(default_factory=dict)  # what the PNGs draw
    files: list[Path] = field(default_factory=list)

    def by_key(self, key: str) -> list[F.Finding]:
        return [f for f in self.findings if f.key == key]

    def problems(self) -> list[F.Finding]:
        return [f for f in self.findings if f.level in ("error", "warning")]


def attention_stats(subject: Subject) -> dict[str, ViewStats]:
    stats: dict[str, ViewStats] = {}
    with torch.no_grad():
        for b in subject.batches:
            for ab in subject.attention(b):
                if ab.name not in stats:
                    stats[ab.name] = ViewStats(ab.name, len(ab.layers), ab.layers[0].shape[1], ab.self_attention, ab.causal)
                stats[ab.name].add(ab)
    return stats


def examine(subject: Subject, out_dir: str | Path | None = None, plots: bool = True) -> Report:
    """Every measurement and finding; with `out_dir`, doctor.md, doctor.json and PNGs there."""
    model = subject.model.eval()
    found: list[F.Finding] = []
    bad_params = non_finite_parameters(model)
    norms = layer_norms(subject)
    found += F.layer_health(norms, bad_params)
    numbers: dict = {"layers": norms["layers"], "layer_loss": norms["loss"], "views": {}}

    stats = attention_stats(subject)
    for name, vs in stats.items():
        r = vs.result()
        r["padded_keys"] = vs.padded_keys
        numbers["views"][name] = {k: v.tolist() if isinstance(v, torch.Tensor) else v for k, v in r.items()}
        if not vs.finite:
            found.append(F.Finding("attention_non_finite", "error", f"{name}: attention maps are not finite",
                                   "NaN/inf attention probabilities", "probabilities in [0, 1]",
                                   "the attention statistics below are not meaningful", "fix the non-finite values first"))
        found.append(F.padding(name, r))
        if "future_mass" in r:
            found.append(F.future(name, r))
        found += F.specials(name, r)
        found.append(F.shapes(name, r))
        found.append(F.duplicates(name, r))
        found += F.identity_and_fixed(name, r, vs.top_column_name)

    if not bad_params:
        base, delta = head_importance(subject)
        tol = max(1e-3, 0.005 * abs(base))
        prunable = {v: [(li, h) for li, h in (d <= tol).nonzero().tolist()] for v, d in delta.items()}
        names = [F.head_name(v, li, h) for v, pairs in prunable.items() for li, h in pairs]
        together = loss_without(subject, prunable) if names else None
        found.append(F.importance(base, delta, together, names, tol))
        numbers["importance"] = {v: d.tolist() for v, d in delta.items()}
        numbers["base_loss"] = base

    sample_ids: set[int] = set()
    for b in subject.batches:
        for ids in subject.input_ids(b):
            sample_ids.update(ids.unique().tolist())
    train_unk = None
    for table in subject.embeddings:
        if table.initial is None:
            continue
        found.append(F.embeddings(table, unchanged_rows(table), sample_ids))
        if table.train_counts is not None and not table.hashed and train_unk is None:
            c = table.train_counts.double()
            train_unk = float(c[subject.unk_id] / c.sum().clamp(min=1))
    found.append(F.unk(*unk_share(subject), train_unk))

    found.sort(key=lambda f: F.LEVELS.index(f.level))
    report = Report(Path(subject.run_dir), subject.task, subject.data_name, subject.n_samples, subject.notes,
                    found, numbers)
    if out_dir is not None:
        write(report, Path(out_dir), plots)
    return report


def write(report: Report, out_dir: Path, plots: bool = True) -> None:
    make_dirs(out_dir)
    if plots:
        from .doctor_plots import plot_report

        report.files = plot_report(report, out_dir)
    atomic_write_text(out_dir / "doctor.json", json.dumps(
        {"task": report.task, "data": report.data_name, "samples": report.n_samples,
         "findings": [asdict(f) for f in report.findings], "numbers": report.numbers},
        ensure_ascii=False, indent=1) + "\n")
    atomic_write_text(out_dir / "doctor.md", markdown(report))
    report.files = [out_dir / "doctor.md", out_dir / "doctor.json"] + report.files


MARK = {"error": "ERROR", "warning": "WARNING", "note": "note", "ok": "ok"}


def summary(report: Report) -> str:
    """A few lines for the terminal: the counts, then one line per finding."""
    counts = {lvl: sum(f.level == lvl for f in report.findings) for lvl in F.LEVELS}
    head = (f"doctor: {report.task} run {report.run_dir}, {report.n_samples} samples of {report.data_name}: "
            f"{counts['error']} error(s), {counts['warning']} warning(s), {counts['note']} note(s), {counts['ok']} ok")
    first = [f"  {n}" for n in report.notes if n.startswith("check (before training)")]  # their file's named bugs
    lines = [head] + first + [f"  {MARK[f.level]:<7} {f.title}" for f in report.findings]
    return "\n".join(lines)


def markdown(report: Report) -> str:
    out = [f"# doctor: {report.run_dir}", "",
           f"Task `{report.task}`; {report.n_samples} samples of {report.data_name}. "
           "Each finding says what was measured, what is normal, what it means and what to try.", ""]
    out += [f"- {n}" for n in report.notes] + ([""] if report.notes else [])
    out += ["| level | finding |", "|---|---|"] + [f"| {MARK[f.level]} | {f.title} |" for f in report.findings] + [""]
    for f in report.findings:
        out += [f"## {MARK[f.level]}: {f.title}", "",
                f"- **measured**: {f.measured}", f"- **normal**: {f.normal}",
                f"- **what it means**: {f.meaning}", f"- **what to try**: {f.action}"]
        if f.where:
            out.append(f"- **where**: {', '.join(f.where[:40])}" + (" ..." if len(f.where) > 40 else ""))
        out.append("")
    pngs = [p for p in report.files if p.suffix == ".png"]
    if pngs:
        out += ["## Pictures", ""] + [f"![{p.stem}]({p.name})" for p in pngs] + [""]
    return "\n".join(out)
