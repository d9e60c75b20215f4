"""The face of language modelling (see tasks/faces.py): what the house may ask of an lm run."""
from __future__ import annotations

from ..slots import COMPLETIONS, Export, Face, recipe_from
from .recipe import LMRecipe


def _train(recipe, out_dir, resume: bool = False, log=print):
    from .pipeline import train_lm

    return train_lm(recipe, out_dir, resume=resume, log=log)


def _load(run_dir, **options):
    from .inference import LanguageModel

    return LanguageModel.load(run_dir, **options)


def _inspect(run_dir):
    from .inspect import load

    return load(run_dir)


def _onnx(run_dir, out_dir, check: bool = True):
    from .export import export_lm_onnx

    return export_lm_onnx(run_dir, out_dir, check=check)


def _onnx_parity(report) -> list[str]:
    if not report:
        return []
    return [f"parity with our model over {report['steps']} greedy steps: max |Δ logits| = "
            f"{report['max_abs_diff']:.2e}, tokens equal: {report['greedy_equal']}"]


FACE = Face(
    name="lm", words="a language model", recipe=LMRecipe, data_form="file",
    train=_train, train_recipe=recipe_from(LMRecipe), load=_load, inspect=_inspect,
    exports={"onnx": Export(_onnx, "model.onnx: one decoding step, KV cache in and out; tokenizer.json, export.json",
                            _onnx_parity)},
    routes=(COMPLETIONS,),
)
