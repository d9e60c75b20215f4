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

from .attention import check_attention, check_scaled_dot_product
from .checks import (_their_line, check_block, check_causal_mask, check_decoder_layer, check_encoder_layer,
                     mask_form)
from .model import check_model
from .position_wise import check_feed_forward, check_layer_norm, check_positional_encoding, check_rms_norm
from .stacks import check_decoder, check_encoder

# each component kind and its check (the order of a report is KINDS')
CHECKS = {"scaled_dot_product": check_scaled_dot_product, "attention": check_attention,
          "feed_forward": check_feed_forward, "layer_norm": check_layer_norm, "rms_norm": check_rms_norm,
          "positional_encoding": check_positional_encoding, "encoder_layer": check_encoder_layer,
          "decoder_layer": check_decoder_layer, "block": check_block, "causal_mask": check_causal_mask,
          "encoder": check_encoder, "decoder": check_decoder, "model": check_model}
from .compare import Ctx
from .discover import CannotCheck, discover, set_run
from .facts import RunFacts
from .watch import synthesize
from .in_use import (add_norm_classes, attention_classes, layer_classes, positional_classes, check_add_norm, check_functional, check_residual, ffn_classes,
                     functional_components, residual_classes)
from .properties import run_properties
from .sizes import learner_sizes
from .report import Component, Report
from .train import train_beside


_SHAPE = re.compile(r"dtype|boolean mask|shape|size|mat1 and mat2|dimension|cannot be multiplied|must match|expected .*dim|"
                    r"not enough values|too many values|out of range|invalid for input", re.I)


residual_names: set = set()  # the add & norm classes that wrap a sublayer of theirs (check_residual)


def _attempt(ctx, f, module):
    n = len(ctx.report.findings)
    try:
        if f.how == "your run":
            if f.kind == "add_norm":
                s = ctx.run.representative(f.obj)
                two = s is not None and s.calls and sum(isinstance(v, torch.Tensor) and v.dim() == 3 and v.is_floating_point()
                                                        for v in s.calls[0].args.values()) == 2 \
                    and f.name not in residual_names
                return (check_add_norm if two else check_residual)(ctx, f), None
            return check_functional(ctx, f), None
        return CHECKS[f.kind](ctx, f), None
    except CannotCheck as e:
        return Component(f.kind, f.name, "skipped", [], str(e)), None
    except NotImplementedError as e:  # a skeleton's TODO: not finished yet, which is not "cannot check"
        return Component(f.kind, f.name, "todo", [], (f"{e}" or "NotImplementedError")[:300] + _their_line(e, module)), None
    except Exception as e:  # the learner's code raised
        del ctx.report.findings[n:]
        return None, e


def _one(ctx, f, module) -> Component:
    """One component. An exception in the learner's code under inputs of our making means the component
    "could not be checked" (the probe, not known to be their bug); "error" is kept for what their own
    program raised inside this component under their own inputs (the watched run). A shape error under
    the tiny fallback sizes is first retried with other sizes."""
    comp, err = _attempt(ctx, f, module)
    if err is None:
        return comp
    msg = f"{type(err).__name__}: {err}"[:300] + _their_line(err, module)
    own = RUN_FACTS[0].raised_in(f.name)
    if own:
        return Component(f.kind, f.name, "error", [], f"your own program raised it: {own}")
    shape = isinstance(err, (RuntimeError, ValueError, IndexError, TypeError, AttributeError, KeyError))
    theirs = {"d_model", "heads"} <= set(ctx.sizes.came_from)
    if shape and not theirs:
        saved = ctx.sizes
        ctx.sizes = replace(saved, d_model=32, heads=2, d_ff=56, came_from=dict(saved.came_from))
        try:
            comp2, err2 = _attempt(ctx, f, module)
        finally:
            ctx.sizes = saved
        if err2 is None and comp2.status != "skipped":
            return comp2
    return Component(f.kind, f.name, "skipped", [], f"the probe failed: {msg}; if your own model runs, "
                     f"call it in a __main__ block (the check watches it), or say how with --map / --size")


RUN_FACTS = [None]
_COMPOSITE = ("encoder_layer", "decoder_layer", "block", "encoder", "decoder", "model")
_PARTS = ("scaled_dot_product", "attention", "feed_forward", "layer_norm", "rms_norm", "positional_encoding")


def _positive_only(report: Report, found) -> None:
    """A bug verdict needs a positive identification (issue 59): `unknown-difference` stands only where the
    weight mapping is confirmed (the learner named the class with --map or `# check:`, or the component is a
    layer or a stack whose every part checked equal to ours). Otherwise the component could not be checked,
    and the closest explanation is kept in its line."""
    how = {f.name: f.how for f in found}
    parts_ok = all(c.status == "ok" for c in report.components if c.kind in _PARTS) \
        and any(c.kind in _PARTS for c in report.components)
    for c in report.components:
        if "unknown-difference" not in c.ids:
            continue
        mine = [x for x in report.findings if x.id == "unknown-difference" and x.where.split(".")[0].rstrip("()") == c.name]
        grads = any("gradients" in x.detail or "on your own input" in x.detail for x in mine)  # a property seen
        confirmed = how.get(c.name) in ("--map", "comment") or grads \
            or c.kind in _COMPOSITE and parts_ok
        if confirmed:
            continue
        closest = next((x.detail for x in mine if x.detail), "")
        report.findings = [x for x in report.findings if x not in mine]
        c.ids = [i for i in c.ids if i != "unknown-difference"]
        if not c.ids:
            c.status = "skipped"
            c.detail = ("its output differs from the reference in no way the catalogue knows, and the weight mapping is not "
                        "confirmed, so this is not called a bug" + (f"; closest: {closest}" if closest else "")
                        + (f"; mapping tried: {c.detail}" if c.detail else "")
                        + "; name the class with --map KIND=Name to have it compared as mapped")


def check_loaded(module, lang: str = "zh", mask_convention: str | None = None, mapping: dict | None = None,
                 source: str | None = None, path: str | None = None, train_steps: int = 0,
                 train_png: str | None = None, sizes: dict | None = None, watch=None) -> Report:
    t0 = time.perf_counter()
    report = Report(path or getattr(module, "__file__", "?") or "?", lang=lang)
    if source is None:
        try:
            source = inspect.getsource(module)
        except (OSError, TypeError):
            source = ""
    facts = RunFacts(None)
    old_run = set_run(facts)
    residual_names.clear()
    try:
        try:
            found, helpers = discover(module, mapping, source)
            drops = {n: v for n, v in vars(module).items() if "drop" in n.lower() and isinstance(v, float)}
            learner = learner_sizes(module, source, sizes)  # (sets their module-level dropout to 0)
            if watch is not None and watch.top() is None:  # their file never calls its model: we do, once
                synthesize(watch, module, source, {f.kind: f for f in found}, learner)
            facts = RunFacts(watch)
            facts.module, facts.dropout_constants = module, drops
            set_run(facts)
            RUN_FACTS[0] = facts
            if facts:  # components found by what their run does with them (in_use.py)
                names = {f.name for f in found}
                for f in list(found):
                    if inspect.isfunction(f.obj) and f.name in facts.watch.functions and \
                            any(f2.name == f.name for f2 in functional_components(facts, module, set())):
                        found.remove(f)
                        names.discard(f.name)
                found += add_norm_classes(facts, module, names) + functional_components(facts, module, names)
                if "feed_forward" not in {f.kind for f in found}:
                    found += ffn_classes(facts, module, {f.name for f in found})
                if not {"attention", "scaled_dot_product"} & {f.kind for f in found}:
                    found += attention_classes(facts, module, {f.name for f in found})
                if not {"block", "encoder_layer", "decoder_layer"} & {f.kind for f in found}:
                    found += layer_classes(facts, module, found)
                if "positional_encoding" not in {f.kind for f in found}:
                    found += positional_classes(facts, module, {f.name for f in found})
                ffns = {f.name for f in found if f.kind in ("feed_forward", "attention") and inspect.isclass(f.obj)}
                wrappers = residual_classes(facts, module, {f.name for f in found}, ffns)
                found += wrappers
                residual_names.update(f.name for f in wrappers)
            form = mask_form(module, source, found, helpers, mask_convention, facts)
            facts.sizes_into(learner, module)
        except ValueError as e:
            report.error = str(e)
            return report
        report.mask_convention = form.describe(lang)
        report.sizes = learner.describe()
        if watch is not None:
            report.watched = watch.summary()
        ctx = Ctx(module, form, learner, found, report)
        ctx.run = facts
        torch.set_grad_enabled(True)
        for f in found:
            comp = _one(ctx, f, module)
            if comp is not None and f.kind == "causal_mask" and comp.status == "skipped" and facts \
                    and f.name in facts.watch.functions:
                seen = facts.decoder_reads_future(source)
                if seen and seen[0] is False:  # checked in use: no earlier output moved with a later token
                    comp = Component(f.kind, f.name, "ok", [], "checked as your model uses it: on your own input, no "
                                     "position's output moved when a later token changed")
            own = facts.raised_in(f.name)
            if own and (comp is None or comp.status != "differs"):  # their own program raised inside it
                comp = Component(f.kind, f.name, "error", [], f"your own program raised it: {own}")
            if comp is None:
                continue  # probed, and not a component after all (a classifier named like a model)
            if f.how != "name":  # say what was matched to what, and by whom
                comp.detail = f"{f.kind} = {f.name} by {f.how}; {comp.detail}" if comp.detail else f"{f.kind} = {f.name} by {f.how}"
            report.components.append(comp)
        run_properties(report, facts, source)
        _positive_only(report, found)
        _lines(report, found)
    finally:
        set_run(old_run)
        RUN_FACTS[0] = None
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


def _lines(report: Report, found) -> None:
    """The line of each finding's place in the learner's file (`Finding.line`): a notebook's report turns it into
    "cell 7, line 3"."""
    by_name = {f.name: f.obj for f in found}
    for x in report.findings:
        name, _, method = x.where.partition(".")
        obj = by_name.get(name.rstrip("()"))
        if obj is None:
            continue
        target = getattr(obj, method.rstrip("()") or "forward", None) if inspect.isclass(obj) else obj
        try:
            x.line = inspect.getsourcelines(target if target is not None else obj)[1]
        except (OSError, TypeError):
            continue
