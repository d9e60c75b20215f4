"""The toy task's face (scratchformer/tasks/slots.py): every slot the house asks for."""
from __future__ import annotations

import json
import sys

from scratchformer.models.param_terms import Term
from scratchformer.tasks.cli_args import recipe_for_run
from scratchformer.tasks.slots import Export, Face, Sweep, TaskCLI, Unavailable, recipe_from

from .task import BUCKETS, Toy, ToyRecipe, export_json, json_runtime, read_rows, train_toy


def _flags(p) -> None:
    p.add_argument("--data", help="a text<TAB>label file")


def _train_cli(args) -> int:
    recipe = recipe_for_run(ToyRecipe, args)
    summary = train_toy(recipe, args.out, log=lambda m: print(m, file=sys.stderr))
    print(json.dumps({"run_dir": str(args.out), **summary}))
    return 0


def _evaluate_cli(args) -> int:
    toy = Toy.load(args.run_dir)
    cfg = json.loads((args.run_dir / "config.json").read_text(encoding="utf-8"))
    print(json.dumps({"accuracy": toy.accuracy(read_rows(args.data or cfg["data"]["dataset"]))}))
    return 0


def _params(recipe: dict) -> dict:
    c = len(recipe.get("model", {}).get("labels") or [0, 0])
    return {"head": Term(BUCKETS * c + c, "buckets·C + C")}


FACE = Face(
    name="toy", words="a toy classifier", recipe=ToyRecipe, data_form="file",
    train=train_toy, train_recipe=recipe_from(ToyRecipe), load=Toy.load,
    inspect=Unavailable("the toy task has no attention to draw"),
    exports={"json": Export(export_json, "weights.json, export.json", runtime=json_runtime, backend="numpy")},
    cli=TaskCLI("train the toy classifier", _flags, _train_cli, evaluate=_evaluate_cli),
    params=_params, sweep=Sweep(lambda name, subset, folder, write: ({"data": name}, [])),
)
