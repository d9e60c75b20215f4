"""`prepare`: tokenize a data set once into its prepared, memory-mapped form (data/prepared.py)
ahead of training, and print what was built. `train` finds it in the cache and reuses it."""
from __future__ import annotations

import json
import sys
import time

from .common import positive_int


def register(cli) -> None:
    p = cli.verb("prepare", help="tokenize a data set once into memory-mapped arrays (train reuses them)")
    p.add_argument("task", choices=["classify", "lm"], help="the task the data is for")
    p.add_argument("--data", required=True, help="the training file (.tsv/.txt labelled rows; .txt text for lm)")
    p.add_argument("--valid", help="validation file (default: a seeded split of --data)")
    p.add_argument("--test", help="test file (classify; default: a seeded split of --data)")
    p.add_argument("--text-col", help="text column name or 0-based position (classify)")
    p.add_argument("--label-col", help="label column name or 0-based position (classify)")
    p.add_argument("--config", help="the JSON recipe the run will use (its data and tokenizer settings)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="the run's overrides (those that shape the data: data.tokenizer, data.min_freq, ...)")
    p.add_argument("--workers", type=positive_int, help="worker processes (default: the CPU count)")
    p.add_argument("--json", action="store_true", help="print what was built as one JSON line")
    p.set_defaults(func=prepare)


def prepare(args) -> int:
    import os

    from ..errors import UserError
    from ..tasks.runs import resolve_recipe

    if args.workers:
        os.environ["SCRATCHFORMER_PREPARE_WORKERS"] = str(args.workers)
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    t0 = time.monotonic()
    given = {"data.dataset": args.data, "data.valid_file": args.valid}
    if args.task == "classify":
        from ..commands.classify import _col
        from ..tasks.classify import ClassifyRecipe
        from ..tasks.classify.auto import adaptive_recipe
        from ..tasks.classify.data import prepare_classification

        given.update({"data.test_file": args.test, "data.text_col": _col(args.text_col),
                      "data.label_col": _col(args.label_col)})
        given = {k: v for k, v in given.items() if v is not None}
        recipe = (resolve_recipe(ClassifyRecipe, args.config, args.set, given) if args.config
                  else adaptive_recipe(args.set, given))  # what `train classify` would choose
        out = prepare_classification(recipe, log)
    else:
        from ..tasks.lm import LMRecipe
        from ..tasks.lm.data import prepared_lm

        if args.test or args.text_col or args.label_col:
            raise UserError("--test, --text-col and --label-col are for classify; an LM reads one text")
        recipe = resolve_recipe(LMRecipe, args.config, args.set, {k: v for k, v in given.items() if v is not None})
        prep = prepared_lm(recipe.data)
        if prep is None:
            raise UserError("prepared LM data is made for a char LM (data.tokenizer=char) on the user's .txt file; "
                            "registered corpora and BPE are read in memory")
        out = {"dataset": recipe.data.dataset, "tokenizer": "char", "vocab_size": prep.tokenizer.vocab_size,
               "train_tokens": len(prep.train), "valid_tokens": len(prep.valid),
               "dtype": str(prep.train.dtype), "folder": prep.folder}
    out["seconds"] = round(time.monotonic() - t0, 2)
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
        return 0
    print(f"prepared {out['dataset']} for {args.task}: {out['tokenizer']} tokenizer, vocabulary {out['vocab_size']:,}, "
          f"{out['seconds']:.1f} s")
    if args.task == "classify":
        print("splits: " + ", ".join(f"{k} {v:,}" for k, v in out["splits"].items()) + f" rows; {out['labels']} labels")
        for f in out["files"]:
            print(f"{f['file']}: {f['rows']:,} rows, {f['tokens']:,} tokens ({f['dtype']}), "
                  f"{f['bytes'] / 1e6:.1f} MB in {f['folder']}")
    else:
        print(f"{out['train_tokens']:,} train / {out['valid_tokens']:,} valid tokens ({out['dtype']}) in {out['folder']}")
    return 0
