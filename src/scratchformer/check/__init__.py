"""`scratchformer check FILE.py`: check a learner's hand-written Transformer against ours and name the bug.

检查你自己手写的 Transformer：找出组件，装入同一份权重，和参考实现逐个比较，并指出是哪一个经典错误。

The Python API (what `commands/check.py` and the exercises call)::

    from scratchformer.check import check_file
    report = check_file("my_transformer.py", lang="zh", mask_convention=None, mapping=None, timeout_s=60)
    report.exit_code        # 0 every component matches, 1 any finding is a bug, 2 could not be checked
    report.components       # [Component(kind, name, status, ids, detail)], status "ok" | "differs" | "skipped"
                            #   | "todo" (the code raises NotImplementedError: a skeleton; exit 1)
                            #   | "error" (the learner's code raised; the detail names their line; exit 1)
    report.findings         # [Finding(id, severity, component, where, zh, en, link, detail)]
                            #   severity "bug" | "note" (a choice, not a failure) | "warning"
    report.mask_convention  # the convention used and where it came from (one line)
    report.error            # the one line saying why the file could not be checked (exit 2), else None
    report.text(lang=None)  # the human report: one line per component, then the findings
    report.to_json()        # the same as a JSON string

- `lang`: "zh" or "en": the labels (ok / 不同, where / 位置, the summary); each finding's explanation is
  printed in both languages, Chinese first.
- `mask_convention`: None (read it from the learner's own mask function, else from the tutorial
  style), or one of "keep" (1/True = may attend), "pad" (1/True = padding, the Keras tutorial),
  "lens" (valid lengths, d2l).
- `mapping`: {kind: class-or-function name} for what discovery cannot guess, e.g.
  {"attention": "MyAttn"}; the kinds are those of `KINDS`. A comment line `# check: attention`
  right above a class or function does the same inside the file.
- `sizes`: {name: value} as `--size name=value` gives them (`d_model`, `n_embd`, `heads`, `n_kv_heads`,
  `max_len`, `block_size`, `vocab_size`, ...): they win over the learner's constants, config and defaults.
- `timeout_s`: the child process that loads and runs the learner's file is killed after this.
- `train_steps`, `train_png`: `check --train` (see `train.py`): `report.train["verdict"]` is
  "trains like the reference" or "does not learn" (with `step` and `why`: nan | flat | behind).

The learner's file never runs in this process: `check_file` starts a child (`python -m
scratchformer.check.child`) with a time limit and a memory limit (RLIMIT_AS); a hang, a crash, an
`exit()` or an import error gives a Report with exit_code 2 and one line (with the learner's own
traceback lines, never ours). `check_module(module)` runs the same checks in-process on an already
imported module (the tests use it on planted bugs; never call it on untrusted code).

The catalogue of ids is `catalogue.CATALOGUE` (stable: tools and docs link to them).

The package: `discover.py` (finding, building and calling the learner's components by name), `sizes.py`
(the sizes they are built with, read from their file),
`masks.py` (their mask convention), `reference.py` (ours, each bug a switch), `compare.py` (closeness,
the variant search, weights in and out, the context of one file), `attention.py` and `position_wise.py` (attention; FFN,
norm, positions checked), `checks.py` (the layers' wiring), `stacks.py` (the encoder and decoder stacks), `report.py`, `catalogue.py`, `child.py` (the child process),
`train.py` (`--train`); `watch.py` (the learner's own program run and watched, a call of our making),
`facts.py` (what the run tells the checks), `in_use.py` (components found by what the run does: add & norm,
functional code), `properties.py` (the whole model's properties on their own inputs), `notebook.py` (.ipynb),
`unseen.py` (the process as their file alone would see it: no checker in `sys.modules`).
It imports torch (and matplotlib for --train) and of ours only fileio:
the reference is plain formulas written here (not nn/'s fast paths), each classic bug a switch.
"""
from __future__ import annotations

KINDS = ("scaled_dot_product", "attention", "feed_forward", "layer_norm", "rms_norm", "positional_encoding", "add_norm",
         "encoder_layer", "decoder_layer", "block", "causal_mask", "encoder", "decoder", "model")

__all__ = ["KINDS", "check", "check_file", "check_module"]

_IN_CHECK = False  # True in the checking child (child.py): a check() the learner's code calls there does nothing


def check_file(path, lang: str = "zh", mask_convention: str | None = None, mapping: dict | None = None,
               timeout_s: float = 60.0, memory_mb: int = 4096, train_steps: int = 0, train_png=None,
               sizes: dict | None = None):
    """Check the learner's file `path` in a child process; returns a `report.Report`.

    `train_steps` > 0 also trains their encoder layer beside ours (`check --train`; `report.train`),
    drawing both curves into `train_png` when given."""
    from .child import run_child

    return run_child(path, lang=lang, mask_convention=mask_convention, mapping=mapping,
                     timeout_s=timeout_s, memory_mb=memory_mb, train_steps=train_steps, train_png=train_png,
                     sizes=sizes)


def check(obj=None, lang: str | None = None, quiet: bool = False, **options):
    """In a notebook cell: `check(MyModel)` (or `check()` for the notebook so far) prints the same report as
    `scratchformer check`. The cells run so far (IPython's history, in the order they ran) are written to a
    notebook file and checked in a child process, never in the kernel; places are named "cell 7, line 3"
    with the cell's execution count. Outside IPython it checks the file that defines `obj` (or the running
    script). With `obj`, the report keeps that class's lines. Returns the Report when `quiet` (nothing
    printed), else None (the notebook shows the printed report once)."""
    import inspect
    import json
    import os
    import sys
    import tempfile
    from pathlib import Path

    if _IN_CHECK:
        return None  # their notebook or script, run by the check itself: no check inside the check
    lang = lang or ("en" if os.environ.get("LANG", "").lower().startswith("en") else "zh")
    try:
        ip = get_ipython()  # noqa: F821 (defined inside IPython only)
    except NameError:
        ip = None
    name = getattr(obj, "__name__", None)
    mapping = dict(options.pop("mapping", None) or {})
    if name and inspect.isclass(obj):
        from .discover import kind_of_class
        kind = kind_of_class(name)
        if kind is not None and kind not in mapping:
            mapping[kind] = name
    if ip is not None and isinstance(ip.user_ns.get("In"), list):
        history = list(ip.user_ns["In"])
        cells = [{"cell_type": "code", "execution_count": n, "metadata": {}, "outputs": [],
                  "source": src} for n, src in enumerate(history) if n > 0]
        nb = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
        with tempfile.TemporaryDirectory(prefix="scratchformer-nb-") as tmp:
            path = Path(tmp) / "notebook_so_far.ipynb"
            path.write_text(json.dumps(nb), encoding="utf-8")
            report = check_file(path, lang=lang, mapping=mapping, **options)
            report.path = "this notebook"
    else:
        src = None
        if obj is not None:
            try:
                src = inspect.getsourcefile(obj)
            except TypeError:
                src = None
        src = src or getattr(sys.modules.get("__main__"), "__file__", None)
        if not src:
            raise ValueError("check(): no file to check; give a class defined in a file, or call it in a notebook")
        report = check_file(src, lang=lang, mapping=mapping, **options)
    if name and any(c.name == name for c in report.components):
        report.components = [c for c in report.components if c.name == name]
        report.findings = [f for f in report.findings if f.where.split(".")[0].split(" ")[0].rstrip("()") == name]
    if quiet:
        return report
    print(report.text(lang))
    return None


def check_module(module, lang: str = "zh", mask_convention: str | None = None, mapping: dict | None = None,
                 sizes: dict | None = None):
    """Run the checks in this process on an imported module (trusted code only: the tests)."""
    from .run import check_loaded

    return check_loaded(module, lang=lang, mask_convention=mask_convention, mapping=mapping, sizes=sizes)
