"""The command-line arguments a task's own verbs share (tasks/slots.py `TaskCLI`): the recipe of
a train verb from --config, --set and its flags, --compute-type, whole-number flags. They live
below the commands (commands/common.py hands them on) so that a task package can declare its
`train` and `evaluate` flags itself."""
from __future__ import annotations

import argparse
import sys

from ..errors import UserError
from .runs import resolve_recipe


def recipe_for_run(cls, args, flags: dict | None = None):
    """The recipe of a `train` verb, resolved once (see `tasks.runs.resolve_recipe`): on
    --resume the saved recipe of the run directory is the base; then --config, --set, and
    the verb's flags (--data/--valid/--test where it has them, plus `flags`: dotted key ->
    value, None = not given)."""
    base = None
    if args.resume and (args.out / "config.json").exists():
        base = cls.load_json(args.out / "config.json")
    given = dict(flags or {})
    fields = cls.hints()["data"].hints() if "data" in cls.hints() else {}
    if getattr(args, "data", None) and "dataset" in fields:
        given["data.dataset"] = args.data
    for name in ("valid", "test"):
        if getattr(args, name, None):
            given[f"data.{name}_file"] = getattr(args, name)
    recipe = resolve_recipe(cls, args.config, args.set, given, base)
    train = getattr(recipe, "train", None)
    if train is not None and hasattr(train, "device"):  # before any data is read: an absent device is one line
        from ..train.device import check_available, parse_device

        check_available(parse_device(train.device, "train.device"), train.device)
    return recipe


def refuse_translation_flags(args, noun: str) -> None:
    """`evaluate` flags that only translation runs honour (the translate face puts them on the
    `evaluate` parser every task shares), refused in one line on a `noun` run rather than silently
    ignored: --per-sentence/--sort, and a --device other than the CPU."""
    if getattr(args, "per_sentence", False) or getattr(args, "sort", None):
        raise UserError(f"--per-sentence and --sort are for translation runs (sentence BLEU); this is a {noun} run")
    device = getattr(args, "device", None)
    if device not in (None, "cpu"):
        raise UserError(f"--device {device}: {noun} runs evaluate on the CPU so far (translation runs take --device)")


COMPUTE_TYPES = ("auto", "float32", "bfloat16", "int8")  # CTranslate2's names (nn/compute.py)


def add_compute_type(p, default: str = "float32") -> None:
    """--compute-type, and the deprecated --quantize that it replaces (skipped where a shared
    parser already has them)."""
    if "--compute-type" in p._option_string_actions:  # noqa: SLF001 - argparse has no public query
        return
    p.add_argument("--compute-type", choices=COMPUTE_TYPES, default=None,
                   help=f"what inference computes in (default {default}): float32; bfloat16 (a bf16 copy of "
                        "the model); int8 (int8 projections, CPU); auto (per batch, what a probe measures "
                        "faster on this CPU; it says what it chose and why). See docs/speed.md")
    p.add_argument("--quantize", choices=["none", "int8"], default=None,
                   help="deprecated: --compute-type int8")


def compute_type(args) -> str | None:
    """--compute-type, or the deprecated --quantize int8 / --precision (a warning on stderr);
    None: the task's default."""
    given = getattr(args, "compute_type", None)
    old = []
    if getattr(args, "quantize", None) not in (None, "none"):
        old.append(("--quantize int8", "int8"))
    precision = getattr(args, "precision", None)
    if precision is not None:
        old.append((f"--precision {precision}", {"fp32": "float32", "bf16": "bfloat16", "auto": "auto"}[precision]))
    for flag, value in old:
        print(f"warning: {flag} is deprecated; use --compute-type {value}", file=sys.stderr)
        if given is not None and given != value:
            raise UserError(f"--compute-type {given} and {flag} disagree; pass --compute-type only")
        given = value
    return given


def say_compute(model, args) -> None:
    """With --compute-type auto, what a typical batch computes in and why (on stderr): the
    loaded model's own answer (`compute_choice`)."""
    if getattr(args, "compute_type", None) == "auto":
        kind, why = model.compute_choice()
        print(f"compute type: {kind} ({why})", file=sys.stderr)


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1 (`--top`, `--max-new-tokens`, ...)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


def your_model_flags(p) -> None:
    """`--model FILE.py[:Name]` and `--strict` (docs/your-model.md): the learner's own network in the run."""
    p.add_argument("--model", metavar="FILE.py[:Name]", default=None,
                   help="train your own model: the nn.Module class (or a function that builds it) in FILE.py, "
                        "checked first (`scratchformer check`), copied into the run folder; see docs/your-model.md")
    p.add_argument("--strict", action="store_true",
                   help="with --model: refuse to train when `scratchformer check` names a bug in the file")
    p.add_argument("--size", action="append", default=[], metavar="NAME=N",
                   help="with --model: a constructor argument of your model, by your name (e.g. --size d=128,h=4): "
                        "where your file never builds it, or to build it at another size")
