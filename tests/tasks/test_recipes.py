"""Every shipped recipe loads (as its command would load it), typed `--set` checks every
section, a resolved recipe is frozen, and run folders written before the task packages
(LM configs with `model.encoder`) still load."""
import json
from pathlib import Path

import pytest

from scratchformer.errors import UserError
from scratchformer.tasks.classify import ClassifyRecipe
from scratchformer.tasks.lm import LMRecipe
from scratchformer.tasks.mlm import MLMRecipe
from scratchformer.tasks.runs import resolve_recipe
from scratchformer.tasks.translate import TranslateRecipe

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
TASK_OF = {"thucnews-mlm.json": MLMRecipe, "thucnews100k-mlm.json": MLMRecipe, "shakespeare-small.json": LMRecipe, "shakespeare-large.json": LMRecipe,
           "sanguo-small.json": LMRecipe, "hsk-base.json": TranslateRecipe, "hsk-ensemble.json": TranslateRecipe,
           "en-fr-base.json": TranslateRecipe, "hsk-e5.json": TranslateRecipe,
           "d2l-en-fr.json": TranslateRecipe}


@pytest.mark.parametrize("path", sorted(RECIPES.glob("*.json")), ids=lambda p: p.name)
def test_every_shipped_recipe_loads(path):
    cls = TASK_OF.get(path.name, ClassifyRecipe)
    recipe = resolve_recipe(cls, config=str(path))
    assert recipe.task == cls().task
    assert type(recipe).from_dict(json.loads(json.dumps(recipe.to_dict()))) == recipe


def test_typed_set_in_every_section():
    r = resolve_recipe(ClassifyRecipe, sets=["model.encoder.norm_first=False", "model.encoder.d_model=64",
                                             "train.lr=1e-3", "data.lowercase=yes", "train.betas=0.8,0.9",
                                             "model.init=null", "ensemble=2"])
    assert r.model.encoder.norm_first is False and r.model.encoder.d_model == 64 and r.train.lr == 1e-3
    assert r.data.lowercase is True and r.train.betas == (0.8, 0.9) and r.model.init is None and r.ensemble == 2
    for bad, msg in [("model.encoder.d_model=abc", "whole number"), ("model.encoder.norm_first=maybe", "true or false"),
                     ("train.lr=fast", "number"), ("model.encoder.d_modl=3", "did you mean 'd_model'"),
                     ("data.nope=1", "no option 'nope'"), ("model.encoder.d_model", "key=value")]:
        with pytest.raises(UserError, match=msg):
            resolve_recipe(ClassifyRecipe, sets=[bad])
    with pytest.raises(UserError, match="n_layers must be a whole number"):
        ClassifyRecipe.from_dict({"model": {"encoder": {"n_layers": "4"}}})


def test_set_reaches_one_key_of_a_dataset_options_dict():
    """The README's `--set data.dataset_options.reverse=true` (and fields=title for inews): one key
    of a free-form dict, typed from JSON or kept as text; the other keys stay."""
    r = resolve_recipe(ClassifyRecipe, sets=['data.dataset_options={"fields": "title", "x": 1}',
                                             "data.dataset_options.fields=content"])
    assert r.data.dataset_options == {"fields": "content", "x": 1}
    t = resolve_recipe(TranslateRecipe, sets=["data.dataset_options.reverse=true"])
    assert t.data.dataset_options == {"reverse": True}
    with pytest.raises(UserError, match="is not a section"):
        resolve_recipe(ClassifyRecipe, sets=["data.dataset_options.a.b=1"])


def test_resolved_recipe_is_frozen_and_keeps_derived_sizes():
    given = resolve_recipe(ClassifyRecipe, sets=["model.encoder.d_model=64"])

    def derive(r):
        r.model.vocab_size, r.model.n_classes = 123, 7

    resolved = given.resolved(derive)
    assert (resolved.model.vocab_size, resolved.model.n_classes) == (123, 7)
    assert given.model.vocab_size == 0  # the given recipe is untouched
    with pytest.raises(AttributeError, match="frozen"):
        resolved.model.encoder.d_model = 32
    assert resolved.copy().frozen is False


def test_old_lm_config_with_encoder_section_still_loads(tmp_path):
    old = LMRecipe().to_dict()
    old["model"]["encoder"] = old["model"].pop("transformer")
    old["model"]["encoder"]["n_layers"] = 3
    (tmp_path / "config.json").write_text(json.dumps(old))
    assert LMRecipe.load_json(tmp_path / "config.json").model.transformer.n_layers == 3
    assert resolve_recipe(LMRecipe, sets=["model.encoder.d_model=64"]).model.transformer.d_model == 64
