"""`prepare`: tokenize a data set once into its prepared, memory-mapped form (data/prepared.py)
ahead of training, and print what was built. `train` finds it in the cache and reuses it."""
from __future__ import annotations

import json
import sys
import time

from .common import positive_int


def register(cli) -> None:
    from ..tasks.faces import faces

    p = cli.verb("prepare", help="tokenize a data set once into memory-mapped arrays (train reuses them)")
    p.add_argument("task", choices=[name for name, f in faces().items() if f.prepare],
                   help="the task the data is for")
    p.add_argument("--data", required=True, help="the training file (.tsv/.txt labelled rows; .txt text for lm)")
    p.add_argument("--valid", help="validation file (default: a seeded split of --data)")
    p.add_argument("--test", help="test file (classify; default: a seeded split of --data)")
    p.add_argument("--text-col", help="text column name or 0-based position (classify)")
    p.add_argument("--label-col", help="label column name or 0-based position (classify)")
    p.add_argument("--config", help="the JSON recipe the run will use (its data and tokenizer settings)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="the run's overrides (those that shape the data: data.tokenizer, data.min_freq, ...)")
    p.add_argument("--workers", type=positive_int,
                   help="processes that prepare, this one included (default: the CPU count)")
    p.add_argument("--json", action="store_true", help="print what was built as one JSON line")
    p.set_defaults(func=prepare)


def _column(v):
    """A column given on the command line: a 0-based position if it is digits, else a name."""
    return int(v) if v is not None and v.isdigit() else v


def prepare(args) -> int:
    import os

    from ..tasks.faces import face

    if args.workers:
        os.environ["SCRATCHFORMER_PREPARE_WORKERS"] = str(args.workers)
    t0 = time.monotonic()
    given = {"data.dataset": args.data, "data.valid_file": args.valid, "data.test_file": args.test,
             "data.text_col": _column(args.text_col), "data.label_col": _column(args.label_col)}
    out = face(args.task).prepare(args.config, args.set, {k: v for k, v in given.items() if v is not None},
                                  lambda m: print(m, file=sys.stderr))
    out["seconds"] = round(time.monotonic() - t0, 2)
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
        return 0
    print(f"prepared {out['dataset']} for {args.task}: {out['tokenizer']} tokenizer, vocabulary {out['vocab_size']:,}, "
          f"{out['seconds']:.1f} s")
    if "splits" in out:  # labelled rows: one folder per file
        print("splits: " + ", ".join(f"{k} {v:,}" for k, v in out["splits"].items()) + f" rows; {out['labels']} labels")
        for f in out["files"]:
            print(f"{f['file']}: {f['rows']:,} rows, {f['tokens']:,} tokens ({f['dtype']}), "
                  f"{f['bytes'] / 1e6:.1f} MB in {f['folder']}")
    else:  # one token stream
        print(f"{out['train_tokens']:,} train / {out['valid_tokens']:,} valid tokens ({out['dtype']}) in {out['folder']}")
    return 0
