"""The face of classification (see tasks/faces.py): what the house may ask of a classify run."""
from __future__ import annotations

from ..slots import Export, Face, Sweep, TaskCLI, YoursVsOurs
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


def _params(recipe: dict) -> dict:
    """The closed form of a classifier: its encoder (or LSTM), then the head d·C + C."""
    from ...models.param_terms import add, encoder_terms, final_norms

    model = recipe.get("model", {})
    terms, t = encoder_terms(model)
    c = model.get("n_classes", 2)
    add(terms, "head", t.d_model * c + c, "d·C + C")
    return final_norms(terms, t, 1)


def _sweep_data(name: str, subset: dict | None, folder, write) -> tuple[dict, list[str]]:
    """A sweep's data: the registered set, or its first n rows per split as JSONL files; and 32
    validation texts (the experiments measure on them)."""
    import json

    from ...data.registry import load_dataset

    data = load_dataset(name)
    texts = [t for t, _ in data.valid[:32]]
    if not subset:
        return {"data": name}, texts
    flags = {}
    for split in ("train", "valid", "test"):
        pairs = getattr(data, split)[: int(subset.get(split, len(getattr(data, split))))]
        rows = "".join(json.dumps({"text": t, "label": lab}, ensure_ascii=False) + "\n" for t, lab in pairs)
        write(folder / f"{split}.jsonl", rows)
        flags["data" if split == "train" else split] = str(folder / f"{split}.jsonl")
    return flags, texts


# a sweep's seeds are its repeats: without --config (the adaptive default trains as many members
# as fit) each cell is one run; the TF-IDF baseline depends on the split, not the cell: not per run
_SWEEP = Sweep(_sweep_data, subsets=True, argv=("--no-baseline",),
               sets=lambda config: [] if config else ["ensemble=1"])


def _load(run_dir, **options):
    from .inference import Classifier

    return Classifier.load(run_dir, **options)


def _inspect(run_dir):
    from .inspect import load

    return load(run_dir)


def _onnx(run_dir, out_dir, check: bool = True):
    from .export import export_onnx

    return export_onnx(run_dir, out_dir, check=check)


def _onnx_runtime(folder, **options):
    from .onnx_runtime import OnnxClassifier

    return OnnxClassifier(folder, **options)


def _onnx_parity(report) -> list[str]:
    if not report or report.get("max_abs_diff") is None:
        return []
    return [f"parity with our model on {report['n_texts']} texts: max |Δ logits| = {report['max_abs_diff']:.2e}"]


def _yours_recipe(data: str, seed: int, minutes: float | None, steps: int | None, quick: bool) -> dict:
    """One recipe for both networks: chars, 48 tokens, batches of 64, AdamW 1e-3 with 100 warmup steps and a
    cosine; ours a Post-LN d128 x 2-layer encoder with sinusoidal positions and a mean-pooled head, as the
    exercises build theirs."""
    opts = {"max_train": 600} if quick else {}
    return {"task": "classify", "time_budget": None, "ensemble": 1, "blend": False,
            "data": {"dataset": data, "tokenizer": "char", "max_len": 48, "batch_size": 64, **opts},
            "model": {"encoder": {"d_model": 128, "n_heads": 4, "d_ff": 256, "n_layers": 2, "dropout": 0.1,
                                  "norm_first": False, "position": "sinusoidal"},
                      "bigram_buckets": 0, "token_dropout": 0.0, "head_dropout": 0.1},
            "train": {"seed": seed, "max_minutes": minutes, "max_steps": steps, "epochs": None if steps else 100,
                      "lr": 1e-3, "warmup_steps": 5 if quick else 100, "schedule": "cosine",
                      "eval_every": 5 if quick else 50, "progress": False, "metric": "accuracy", "metric_mode": "max"}}


def _yours_score(run_dir) -> float:
    import json
    from pathlib import Path

    return json.loads((Path(run_dir) / "test_metrics.json").read_text(encoding="utf-8"))["accuracy"]


_YOURS = YoursVsOurs(_yours_recipe, _yours_score, "test accuracy", lower_is_better=False, unit="points", scale=100.0,
                     bar=2.0, metric="accuracy", argv=("--no-baseline",))


FACE = Face(
    name="classify", words="a classifier", recipe=ClassifyRecipe, data_form="file",
    train=_train, train_recipe=_train_recipe, load=_load, inspect=_inspect,
    exports={"onnx": Export(_onnx, "model.onnx, tokenizer.json, preprocess.py, labels.json, export.json, README.md",
                            _onnx_parity, runtime=_onnx_runtime, backend="onnxruntime")},
    cli=TaskCLI("train a text classifier", cli.flags, cli.train, cli.evaluate_flags, cli.evaluate),
    params=_params, sweep=_SWEEP, prepare=_prepare, yours=_YOURS,
)
