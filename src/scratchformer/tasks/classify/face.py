"""The face of classification (see tasks/faces.py): what the house may ask of a classify run."""
from __future__ import annotations

from ..slots import Export, Face, TaskCLI
from . import cli
from .recipe import ClassifyRecipe


def _train(recipe, out_dir, resume: bool = False, log=print, **kw):
    from .pipeline import train_classifier

    return train_classifier(recipe, out_dir, resume=resume, log=log, **kw)


def _train_recipe(config: str | None, sets: list[str], flags: dict | None = None) -> ClassifyRecipe:
    """Without --config the adaptive default's base (tasks/classify/auto.py): a time budget and as
    many members as fit, unless `--set time_budget=null` (read as `adaptive_recipe` reads it).
    The data is not read here: this is what the checks before --overwrite resolve."""
    from ..runs import resolve_recipe
    from .auto import DEFAULT_BUDGET_MIN

    base = None
    if not config:
        nulled = any(k.strip() == "time_budget" and v.strip().lower() in ("null", "none")
                     for k, _, v in (x.partition("=") for x in sets))
        base = ClassifyRecipe() if nulled else ClassifyRecipe(time_budget=DEFAULT_BUDGET_MIN, ensemble=0)
    return resolve_recipe(ClassifyRecipe, config, sets, flags, base=base)


def _prepare(config: str | None, sets: list[str], given: dict, log=print) -> dict:
    """What `train classify` would prepare with these settings (the adaptive default without
    --config), built now."""
    from ..runs import resolve_recipe
    from .auto import adaptive_recipe
    from .data import prepare_classification

    recipe = resolve_recipe(ClassifyRecipe, config, sets, given) if config else adaptive_recipe(sets, given)
    return prepare_classification(recipe, log)


def _load(run_dir, **options):
    from .inference import Classifier

    return Classifier.load(run_dir, **options)


def _inspect(run_dir):
    from .inspect import load

    return load(run_dir)


def _onnx(run_dir, out_dir, check: bool = True):
    from .export import export_onnx

    return export_onnx(run_dir, out_dir, check=check)


def _onnx_parity(report) -> list[str]:
    if not report or report.get("max_abs_diff") is None:
        return []
    return [f"parity with our model on {report['n_texts']} texts: max |Δ logits| = {report['max_abs_diff']:.2e}"]


FACE = Face(
    name="classify", words="a classifier", recipe=ClassifyRecipe, data_form="file",
    train=_train, train_recipe=_train_recipe, load=_load, inspect=_inspect,
    exports={"onnx": Export(_onnx, "model.onnx, tokenizer.json, preprocess.py, labels.json, export.json, README.md",
                            _onnx_parity)},
    cli=TaskCLI("train a text classifier", cli.flags, cli.train, cli.evaluate_flags, cli.evaluate),
    prepare=_prepare,
)
