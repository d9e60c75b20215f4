"""The face of language modelling (see tasks/faces.py): what the house may ask of an lm run."""
from __future__ import annotations

from ..slots import Export, Face, Sweep, TaskCLI, YoursVsOurs, recipe_from
from . import cli
from .recipe import LMRecipe


def _train(recipe, out_dir, resume: bool = False, log=print):
    from .pipeline import train_lm

    return train_lm(recipe, out_dir, resume=resume, log=log)


def _load(run_dir, **options):
    from .inference import LanguageModel

    return LanguageModel.load(run_dir, **options)


def _params(recipe: dict) -> dict:
    """The closed form of a decoder-only or encoder stack with its LM head (none when tied)."""
    from ...models.param_terms import encoder_terms, lm_head

    model = recipe.get("model", {})
    return lm_head(*encoder_terms(model), model)


def _sweep_data(name: str, subset: dict | None, folder, write) -> tuple[dict, list[str]]:
    """A sweep's text: the registered corpus, or its first n characters for train and m from the
    held-out tail for valid, as .txt files."""
    from ...data.registry import load_dataset

    if not subset:
        return {"data": name}, []
    text = load_dataset(name)
    n, m = int(subset["train"]), int(subset.get("valid", subset["train"] // 10))
    cut = int(len(text) * 0.9)  # validation from the part `train lm` holds out by default
    write(folder / "train.txt", text[:n])
    write(folder / "valid.txt", text[cut:cut + m])
    return {"data": str(folder / "train.txt"), "valid": str(folder / "valid.txt")}, []


def _inspect(run_dir):
    from .inspect import load

    return load(run_dir)


def _onnx(run_dir, out_dir, check: bool = True):
    from .export import export_lm_onnx

    return export_lm_onnx(run_dir, out_dir, check=check)


def _onnx_runtime(folder, **options):
    from .onnx_runtime import OnnxLanguageModel

    return OnnxLanguageModel(folder, **options)


def _onnx_parity(report) -> list[str]:
    if not report:
        return []
    return [f"parity with our model over {report['steps']} greedy steps: max |Δ logits| = "
            f"{report['max_abs_diff']:.2e}, tokens equal: {report['greedy_equal']}"]


def _prepare(config: str | None, sets: list[str], given: dict, log=print) -> dict:
    """A char LM's prepared id stream for the user's .txt file, built now."""
    from ...errors import UserError
    from ..runs import resolve_recipe
    from .data import prepared_lm

    extra = [k for k in ("data.test_file", "data.text_col", "data.label_col") if given.get(k) is not None]
    if extra:
        raise UserError("--test, --text-col and --label-col are for classify; an LM reads one text")
    recipe = resolve_recipe(LMRecipe, config, sets, given)
    prep = prepared_lm(recipe.data)
    if prep is None:
        raise UserError("prepared LM data is made for a char LM (data.tokenizer=char) on the user's .txt file; "
                        "registered corpora and BPE are read in memory")
    return {"dataset": recipe.data.dataset, "tokenizer": "char", "vocab_size": prep.tokenizer.vocab_size,
            "train_tokens": len(prep.train), "valid_tokens": len(prep.valid),
            "dtype": str(prep.train.dtype), "folder": prep.folder}


def _yours_recipe(data: str, seed: int, minutes: float | None, steps: int | None, quick: bool) -> dict:
    """One recipe for both networks: 64-token windows, batches of 32, AdamW 1e-3 with warmup and a cosine; ours
    a d128 x 2-layer GPT."""
    return {"task": "lm", "data": {"dataset": data, "context": 64, "batch_size": 32, "eval_windows": 100},
            "model": {"transformer": {"d_model": 128, "n_heads": 4, "d_ff": 512, "n_layers": 2, "dropout": 0.0}},
            "train": {"seed": seed, "max_minutes": minutes, "max_steps": steps, "epochs": None if steps else 100,
                      "lr": 1e-3, "warmup_steps": 5 if quick else 100, "schedule": "cosine",
                      "eval_every": 5 if quick else 50, "progress": False, "metric": "loss", "metric_mode": "min"}}


def _yours_score(run_dir) -> float:
    import json
    from pathlib import Path

    return json.loads((Path(run_dir) / "valid_metrics.json").read_text(encoding="utf-8"))["loss"]


_YOURS = YoursVsOurs(_yours_recipe, _yours_score, "validation loss", lower_is_better=True, unit="nats", scale=1.0,
                     bar=0.05, metric="loss", text=True)


FACE = Face(
    name="lm", words="a language model", recipe=LMRecipe, data_form="file",
    train=_train, train_recipe=recipe_from(LMRecipe), load=_load, inspect=_inspect,
    exports={"onnx": Export(_onnx, "model.onnx: one decoding step, KV cache in and out; tokenizer.json, generate.py, export.json, README.md",
                            _onnx_parity, runtime=_onnx_runtime, backend="onnxruntime")},
    params=_params, sweep=Sweep(_sweep_data, subsets=True),
    cli=TaskCLI("train a GPT-style language model on a text", cli.flags, cli.train, cli.evaluate_flags, cli.evaluate),
    prepare=_prepare, yours=_YOURS,
)
