"""The command line of masked-LM pretraining (its face's `cli`, tasks/slots.py `TaskCLI`):
`pretrain mlm`, BERT-style pretraining of our encoder on unlabeled text."""
from __future__ import annotations

import json
import sys

from ..cli_args import recipe_for_run


def flags(p) -> None:
    p.add_argument("--data", action="append", default=[],
                   help="registered data set (texts of train+valid, labels unused) or a text file "
                        "(one document per line); repeat or comma-separate for several")


def train(args) -> int:
    from . import MLMRecipe, pretrain_mlm

    recipe = recipe_for_run(MLMRecipe, args)
    if args.data:
        recipe.data.datasets = [d.strip() for item in args.data for d in item.split(",") if d.strip()]
    summary = pretrain_mlm(recipe, args.out, resume=args.resume, log=lambda m: print(m, file=sys.stderr))
    print(json.dumps({"run_dir": str(args.out), "valid_accuracy": summary.get("best_metric"),
                      "valid_loss": summary.get("valid_loss"), "steps": summary.get("step"),
                      "next": f"scratchformer train classify --init {args.out} ..."}, ensure_ascii=False))
    return 0
