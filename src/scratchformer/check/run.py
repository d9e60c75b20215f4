"""One checked file: every component found in the learner's module compared with the reference
(checks.py, attention.py, position_wise.py), then, with `--train`, their encoder trained beside ours (train.py).
Kept apart from checks.py so that train.py (which uses the comparisons' helpers) and the
comparisons import in one direction only."""
from __future__ import annotations

import inspect
import re
import time
from dataclasses import replace

import torch

from .checks import CHECKS, _their_line, mask_form
from .model import check_model

CHECKS = {**CHECKS, "model": check_model}
from .compare import Ctx
from .discover import CannotCheck, discover
from .sizes import learner_sizes
from .report import Component, Report
from .train import train_beside


_SHAPE = re.compile(r"dtype|boolean mask|shape|size|mat1 and mat2|dimension|cannot be multiplied|must match|expected .*dim|"
                    r"not enough values|too many values|out of range|invalid for input", re.I)


def _attempt(ctx, f, module):
    n = len(ctx.report.findings)
    try:
        return CHECKS[f.kind](ctx, f), None
    except CannotCheck as e:
        return Component(f.kind, f.name, "skipped", [], str(e)), None
    except NotImplementedError as e:  # a skeleton's TODO: not finished yet, which is not "cannot check"
        return Component(f.kind, f.name, "todo", [], (f"{e}" or "NotImplementedError")[:300] + _their_line(e, module)), None
    except Exception as e:  # the learner's code raised
        del ctx.report.findings[n:]
        return None, e


def _one(ctx, f, module) -> Component:
    """One component. Where the learner's code raises a shape error under sizes that are not theirs
    (the tiny fallback), the same check runs again with other sizes: an error under both is theirs
    ("error", exit 1); under one only, it was our probe (the other's result stands, or "skipped")."""
    comp, err = _attempt(ctx, f, module)
    if err is None or comp is None and err is None:
        return comp
    msg = f"{type(err).__name__}: {err}"[:300] + _their_line(err, module)
    shape = isinstance(err, (RuntimeError, ValueError, IndexError, TypeError, AttributeError, KeyError)) \
        and (_SHAPE.search(str(err)) is not None or isinstance(err, (TypeError, AttributeError, KeyError)))
    theirs = {"d_model", "heads"} <= set(ctx.sizes.came_from) and not re.search(r"dtype|boolean|Bool", str(err))
    if not shape:
        return Component(f.kind, f.name, "error", [], msg)
    if theirs:  # their sizes, our call (a mask's form, an argument): not known to be their bug
        return Component(f.kind, f.name, "skipped", [], f"the probe failed: {msg}; if your own model runs, "
                         f"say how it is called with --map or a default")
    saved = ctx.sizes
    ctx.sizes = replace(saved, d_model=32, heads=2, d_ff=56, came_from=dict(saved.came_from))
    try:
        comp2, err2 = _attempt(ctx, f, module)
    finally:
        ctx.sizes = saved
    if err2 is None and comp2.status != "skipped":
        return comp2
    if err2 is not None and type(err2) is type(err):
        return Component(f.kind, f.name, "error", [], msg)
    return Component(f.kind, f.name, "skipped", [], f"the probe failed: {msg}; give the sizes "
                     f"(--size d_model=.. heads=..), defaults, or --map")


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
        comp = _one(ctx, f, module)
        if comp is None:
            continue  # probed, and not a component after all (a classifier named like a model)
        if f.how != "name":  # say what was matched to what, and by whom
            comp.detail = f"{f.kind} = {f.name} by {f.how}; {comp.detail}" if comp.detail else f"{f.kind} = {f.name} by {f.how}"
        report.components.append(comp)
    if train_steps:
        try:
            res = train_beside(ctx, train_steps, train_png)
            report.train = {"line": res.line(lang), "verdict": res.verdict, "step": res.step, "why": res.why,
                            "learner": res.learner, "reference": res.reference, "png": res.png}
            if res.verdict == "trains like the reference" and report.bug_ids():
                # a curve that follows ours does not clear a named bug: never say "trains like" beside one
                report.train["verdict"] = "loss follows the reference, bugs remain"
                report.train["line"] = ("train: 损失曲线接近参考实现，但上面指出的错误仍然是错误 / the loss follows ours "
                                        "on this task, but the bugs named above are still bugs"
                                        + res.line(lang).split("trains like the reference", 1)[-1])
        except CannotCheck as e:
            report.train = {"line": f"train: {e}", "verdict": None}
        except Exception as e:  # the learner's code raised while training
            report.train = {"line": f"train: {type(e).__name__}: {e}"[:300] + _their_line(e, module), "verdict": None}
    report.seconds = time.perf_counter() - t0
    return report
