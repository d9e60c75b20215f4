"""The corpus measurement, shared by tests/check/test_corpus.py and scripts/check_corpus.py:
every case (correct file or mutant) written to a temporary file, imported, and checked in process
through `scratchformer.check.run.check_loaded`; then recall of the planted ids over the mutants,
precision of the named bug ids over all files, and the exit code of every correct file.

`unknown-difference` names no bug: it is not counted as a hit (recall) nor as a named id
(precision); on a correct file it fails that file's exit 0 like any finding."""
from __future__ import annotations

import importlib.util
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load_sibling(name: str):
    """This folder's modules under names of their own (tests/ has other `probes`-like names)."""
    full = f"scratchformer_corpus_{name}"
    if full in sys.modules:
        return sys.modules[full]
    spec = importlib.util.spec_from_file_location(full, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[full] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


_counter = [0]


def import_source(source: str, folder: str, stem: str):
    """Write `source` to folder/stem.py and import it as a fresh module (a learner's file, as the CLI would)."""
    _counter[0] += 1
    path = Path(folder) / f"{stem}.py"
    path.write_text(source, encoding="utf-8")
    name = f"corpus_case_{_counter[0]}_{stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module, str(path)


@dataclass
class Result:
    name: str
    style: str
    expected: frozenset
    named: frozenset = frozenset()   # bug ids the checker named (unknown-difference left out)
    exit_code: int | None = None
    seconds: float = 0.0
    error: str = ""                  # the checker itself raised

    @property
    def correct_file(self) -> bool:
        return not self.expected

    @property
    def hit(self) -> bool:
        return bool(self.named & self.expected)


def run_case(case, folder: str) -> Result:
    from scratchformer.check.run import check_loaded

    r = Result(case.name, case.style, case.expected)
    t0 = time.perf_counter()
    module = None
    try:
        module, path = import_source(case.source, folder, case.name.replace("-", "_"))
        report = check_loaded(module, lang="en", source=case.source, path=path)
        r.exit_code = report.exit_code
        r.named = frozenset(i for i in report.bug_ids() if i != "unknown-difference")
    except Exception as e:  # the checker (or the import) raised: counted as a miss, or a failing correct file
        r.error = f"{type(e).__name__}: {e}"[:300]
    finally:
        if module is not None:
            sys.modules.pop(module.__name__, None)
    r.seconds = time.perf_counter() - t0
    return r


def run_all(cases=None, progress=None) -> list[Result]:
    import torch

    mutations = load_sibling("mutations")
    cases = mutations.cases() if cases is None else cases
    out = []
    with tempfile.TemporaryDirectory() as d:
        for i, c in enumerate(cases):
            torch.manual_seed(0)
            out.append(run_case(c, d))
            if progress:
                progress(i, len(cases), out[-1])
    return out


def _ratio(a: int, b: int) -> float | None:
    return a / b if b else None


@dataclass
class Figures:
    recall: float | None
    precision: float | None
    mutants: int
    hits: int
    named: int
    named_right: int
    correct_files: int
    correct_exit0: int
    by_style: dict = field(default_factory=dict)
    by_id: dict = field(default_factory=dict)
    misses: list = field(default_factory=list)
    false_findings: list = field(default_factory=list)
    correct_failing: list = field(default_factory=list)
    seconds_total: float = 0.0
    seconds_per_file: float = 0.0
    seconds_max: float = 0.0


def figures(results: list[Result]) -> Figures:
    mutants = [r for r in results if not r.correct_file]
    correct = [r for r in results if r.correct_file]
    named = sum(len(r.named) for r in results)
    right = sum(len(r.named & r.expected) for r in results)
    f = Figures(_ratio(sum(r.hit for r in mutants), len(mutants)), _ratio(right, named) if named else 1.0,
                len(mutants), sum(r.hit for r in mutants), named, right, len(correct),
                sum(r.exit_code == 0 for r in correct))
    styles = defaultdict(lambda: {"mutants": 0, "hits": 0, "named": 0, "right": 0, "correct": 0, "exit0": 0})
    ids = defaultdict(lambda: {"mutants": 0, "hits": 0, "named": 0, "right": 0})
    for r in results:
        s = styles[r.style]
        s["named"] += len(r.named)
        s["right"] += len(r.named & r.expected)
        if r.correct_file:
            s["correct"] += 1
            s["exit0"] += r.exit_code == 0
        else:
            s["mutants"] += 1
            s["hits"] += r.hit
            primary = sorted(r.expected)[0] if len(r.expected) == 1 else r.name.split("__")[1]
            ids[primary]["mutants"] += 1
            ids[primary]["hits"] += r.hit
        for i in r.named:
            ids[i]["named"] += 1
            ids[i]["right"] += i in r.expected
        if not r.correct_file and not r.hit:
            f.misses.append({"case": r.name, "expected": sorted(r.expected), "named": sorted(r.named),
                             "exit": r.exit_code, "error": r.error})
        wrong = sorted(r.named - r.expected)
        if wrong:
            f.false_findings.append({"case": r.name, "expected": sorted(r.expected), "named": wrong})
        if r.correct_file and r.exit_code != 0:
            f.correct_failing.append({"case": r.name, "exit": r.exit_code, "named": sorted(r.named), "error": r.error})
    for d in (styles, ids):
        for v in d.values():
            if "mutants" in v:
                v["recall"] = _ratio(v["hits"], v["mutants"])
            v["precision"] = _ratio(v["right"], v["named"])
    f.by_style = dict(sorted(styles.items()))
    f.by_id = dict(sorted(ids.items()))
    f.seconds_total = sum(r.seconds for r in results)
    f.seconds_per_file = f.seconds_total / max(1, len(results))
    f.seconds_max = max((r.seconds for r in results), default=0.0)
    return f
