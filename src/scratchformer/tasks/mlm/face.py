"""The face of masked-LM pretraining (see tasks/faces.py): an mlm run is a backbone to start
classifiers from, so it has no inference API, no export and no serve route of its own."""
from __future__ import annotations

from ..slots import Face, TaskCLI, Unavailable, recipe_from
from . import cli
from .recipe import MLMRecipe


def _train(recipe, out_dir, resume: bool = False, log=print):
    from .pipeline import pretrain_mlm

    return pretrain_mlm(recipe, out_dir, resume=resume, log=log)


def _params(recipe: dict) -> dict:
    """The closed form of a decoder-only or encoder stack with its LM head (none when tied)."""
    from ...models.param_terms import encoder_terms, lm_head

    model = recipe.get("model", {})
    return lm_head(*encoder_terms(model), model)


def _inspect(run_dir):
    from .inspect import load

    return load(run_dir)


FACE = Face(
    name="mlm", words="a masked language model (a pretrained encoder)", recipe=MLMRecipe, data_form="list",
    train=_train, train_recipe=recipe_from(MLMRecipe),
    load=Unavailable("an mlm run has no inference API of its own: start a classifier from it with "
                     "`scratchformer train classify --init RUN ...`"),
    inspect=_inspect, exports={},
    params=_params,
    cli=TaskCLI("BERT-style masked language modelling (15%% masked, 80/10/10)", cli.flags, cli.train,
                evaluate=Unavailable("an mlm run is a backbone, not evaluated by `evaluate`: its valid accuracy is in "
                                     "its summary; evaluate a classifier trained from it with --init"),
                verb="pretrain"),
)
