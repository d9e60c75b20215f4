"""`pretrain mlm`: masked-language-model pretraining of our encoder on unlabeled text."""
from __future__ import annotations

import json
import sys

from .common import add_recipe_args, recipe_for_run


def register(cli) -> None:
    pre = cli.verb("pretrain", help="pretrain an encoder on unlabeled text: pretrain mlm ...")
    kinds = pre.add_subparsers(dest="objective", metavar="OBJECTIVE", required=True)
    p = kinds.add_parser("mlm", help="BERT-style masked language modelling (15%% masked, 80/10/10)")
    p.add_argument("--data", action="append", default=[],
                   help="registered data set (texts of train+valid, labels unused) or a text file "
                        "(one document per line); repeat or comma-separate for several")
    add_recipe_args(p)
    p.set_defaults(func=pretrain)


def pretrain(args) -> int:
    from ..tasks.mlm import MLMRecipe, pretrain_mlm

    recipe = recipe_for_run(MLMRecipe, args)
    if args.data:
        recipe.data.datasets = [d.strip() for item in args.data for d in item.split(",") if d.strip()]
    summary = pretrain_mlm(recipe, args.out, resume=args.resume, log=lambda m: print(m, file=sys.stderr))
    print(json.dumps({"run_dir": str(args.out), "valid_accuracy": summary.get("best_metric"),
                      "valid_loss": summary.get("valid_loss"), "steps": summary.get("step"),
                      "next": f"scratchformer train classify --init {args.out} ..."}, ensure_ascii=False))
    return 0
