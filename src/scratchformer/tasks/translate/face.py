"""The face of translation (see tasks/faces.py): what the house may ask of a translate run."""
from __future__ import annotations

from ..slots import Export, Face, Sweep, TaskCLI, recipe_from
from . import cli
from .recipe import TranslateRecipe


def _train(recipe, out_dir, resume: bool = False, log=print):
    from .pipeline import train_translator

    return train_translator(recipe, out_dir, resume=resume, log=log)


def _params(recipe: dict) -> dict:
    """The closed form of an encoder-decoder: both stacks, cross-attention, embeddings, output
    (the Transformer's, or the LSTM translator's with model.kind=lstm)."""
    from ...models.param_terms import lstm_seq2seq_terms, seq2seq_terms

    model = recipe.get("model", {})
    return (lstm_seq2seq_terms if model.get("kind") == "lstm" else seq2seq_terms)(model)[0]


def _load(run_dir, **options):
    from .inference import Translator

    return Translator.load(run_dir, **options)


def _inspect(run_dir):
    from .inspect import load

    return load(run_dir)


def _transformers(run_dir, out_dir, check: bool = True):
    from .export import export_transformers

    return export_transformers(run_dir, out_dir, check=check)


def _ctranslate2(run_dir, out_dir, check: bool = True):
    from .export import export_ctranslate2

    return export_ctranslate2(run_dir, out_dir, check=check)


def _not_a_transformer(run_dir) -> str:
    """Why transformers/ctranslate2 cannot export the run ("" when they can): both hold a Transformer's
    layers (the Marian / Pegasus layouts), which an LSTM translator does not have."""
    import json
    from pathlib import Path

    try:
        model = json.loads((Path(run_dir) / "config.json").read_text(encoding="utf-8")).get("model") or {}
    except (OSError, ValueError, AttributeError):
        return ""  # unreadable: the export itself says so
    kind = model.get("kind", "transformer") if isinstance(model, dict) else "transformer"
    if kind == "transformer":
        return ""
    return (f"--format transformers and ctranslate2 export Transformer translators, and this one is "
            f"model.kind={kind}: serve the run folder itself, scratchformer serve {run_dir}")


def _ct2_runtime(folder, **options):
    from .ct2_runtime import Ct2Translator

    return Ct2Translator(folder, **options)


def _parity_lines(parts) -> list[str]:
    lines = []
    for name, r in parts:
        logits = f"max |Δ logits| = {r['max_abs_diff']:.2e}, " if "max_abs_diff" in r else ""
        lines.append(f"parity with our model ({name}, {r['n_sentences']} test sentences): {logits}greedy tokens "
                     f"equal: {r['greedy_equal']}, beam {r['beam']} equal: {r['beam_sentences_equal']}/"
                     f"{r['n_sentences']} (all {r['beam_finished_sentences']} that end with <eos>: "
                     f"{r['beam_equal_where_finished']})")
    return lines


FACE = Face(
    name="translate", words="a translator", recipe=TranslateRecipe, data_form="pair",
    train=_train, train_recipe=recipe_from(TranslateRecipe), load=_load, inspect=_inspect,
    exports={
        "transformers": Export(_transformers, "config.json, model.safetensors, tokenizer files, export.json",
                               lambda r: _parity_lines([("transformers", r)] if r else []), refuses=_not_a_transformer),
        "ctranslate2": Export(_ctranslate2, "CTranslate2 model.bin, vocabularies, tokenizer files, export.json",
                              lambda r: _parity_lines([("transformers", r["transformers"]),
                                                       ("ctranslate2", r["ctranslate2"])] if r else []),
                              runtime=_ct2_runtime, backend="ctranslate2", refuses=_not_a_transformer),
    },
    cli=TaskCLI("train an encoder-decoder translator", cli.flags, cli.train, cli.evaluate_flags, cli.evaluate),
    params=_params, sweep=Sweep(lambda name, subset, folder, write: ({"data": name}, [])), noun="translation",
)
