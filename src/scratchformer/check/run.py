"""One checked file: every component found in the learner's module compared with the reference
(checks.py, components.py), then, with `--train`, their encoder trained beside ours (train.py).
Kept apart from checks.py so that train.py (which uses the comparisons' helpers) and the
comparisons import in one direction only."""
from __future__ import annotations

import inspect
import re
import time

import torch

from .checks import CHECKS, _their_line, mask_form
from .compare import Ctx
from .discover import CannotCheck, discover, learner_sizes
from .report import Component, Report
from .train import train_beside


_SHAPE = re.compile(r"shape|size|mat1 and mat2|dimension|cannot be multiplied|must match|expected .*dim|"
                    r"not enough values|too many values|out of range|invalid for input", re.I)


def check_loaded(module, lang: str = "zh", mask_convention: str | None = None, mapping: dict | None = None,
                 source: str | None = None, path: str | None = None, train_steps: int = 0,
                 train_png: str | None = None, sizes: dict | None = None) -> Report:
    t0 = time.perf_counter()
    report = Report(path or getattr(module, "__file__", "?") or "?", lang=lang)
    if source is None:
        try:
            source = inspect.getsource(module)
        except (OSError, TypeError):
            source = ""
    try:
        found, helpers = discover(module, mapping, source)
        form = mask_form(module, source, found, helpers, mask_convention)
        learner = learner_sizes(module, source, sizes)
    except ValueError as e:
        report.error = str(e)
        return report
    report.mask_convention = form.describe(lang)
    report.sizes = learner.describe()
    ctx = Ctx(module, form, learner, found, report)
    torch.set_grad_enabled(True)
    for f in found:
        try:
            comp = CHECKS[f.kind](ctx, f)
        except CannotCheck as e:
            comp = Component(f.kind, f.name, "skipped", [], str(e))
        except NotImplementedError as e:  # a skeleton's TODO: not finished yet, which is not "cannot check"
            comp = Component(f.kind, f.name, "todo", [], (f"{e}" or "NotImplementedError")[:300] + _their_line(e, module))
        except Exception as e:  # the learner's code raised: say where, in one line
            msg = f"{type(e).__name__}: {e}"[:300] + _their_line(e, module)
            if isinstance(e, (RuntimeError, ValueError, IndexError, TypeError, AttributeError, KeyError)) \
                    and (_SHAPE.search(str(e)) or isinstance(e, (TypeError, AttributeError, KeyError))):
                # most likely our probe (a size, a call) that is not theirs: cannot check, never "their bug"
                comp = Component(f.kind, f.name, "skipped", [], f"the probe failed: {msg}; give the sizes "
                                 f"(--size d_model=.. heads=..) or defaults, or --map")
            else:
                comp = Component(f.kind, f.name, "error", [], msg)
        if f.how != "name":  # say what was matched to what, and by whom
            comp.detail = f"{f.kind} = {f.name} by {f.how}; {comp.detail}" if comp.detail else f"{f.kind} = {f.name} by {f.how}"
        report.components.append(comp)
    if train_steps:
        try:
            res = train_beside(ctx, train_steps, train_png)
            report.train = {"line": res.line(lang), "verdict": res.verdict, "step": res.step, "why": res.why,
                            "learner": res.learner, "reference": res.reference, "png": res.png}
        except CannotCheck as e:
            report.train = {"line": f"train: {e}", "verdict": None}
        except Exception as e:  # the learner's code raised while training
            report.train = {"line": f"train: {type(e).__name__}: {e}"[:300] + _their_line(e, module), "verdict": None}
    report.seconds = time.perf_counter() - t0
    return report
