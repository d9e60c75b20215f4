"""The face of masked-LM pretraining (see tasks/faces.py): an mlm run is a backbone to start
classifiers from, so it has no inference API, no export and no serve route of its own."""
from __future__ import annotations

from ..slots import Face, Unavailable, recipe_from
from .recipe import MLMRecipe


def _train(recipe, out_dir, resume: bool = False, log=print):
    from .pipeline import pretrain_mlm

    return pretrain_mlm(recipe, out_dir, resume=resume, log=log)


def _inspect(run_dir):
    from .inspect import load

    return load(run_dir)


FACE = Face(
    name="mlm", words="a masked language model (a pretrained encoder)", recipe=MLMRecipe, data_form="list",
    train=_train, train_recipe=recipe_from(MLMRecipe),
    load=Unavailable("an mlm run has no inference API of its own: start a classifier from it with "
                     "`scratchformer train classify --init RUN ...`"),
    inspect=_inspect, exports={}, routes=(),
)
