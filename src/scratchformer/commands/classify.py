"""`predict` and `blend` (classification runs). `train classify` and `evaluate` of a classify run:
the task's face (tasks/classify/cli.py). Attention maps: `commands.diagnostics`."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .common import (PROGRESS_EVERY, STREAM_BLOCK, add_compute_type, blocks, compute_type, positive_int, say_compute,
                     stream_inputs)


def register(cli) -> None:
    p = cli.verb("predict", help="classify texts with a trained run")
    p.add_argument("run_dir", type=Path)
    p.add_argument("texts", nargs="*", help="texts (or --file, or stdin)")
    p.add_argument("--file", help="one text per line")
    p.add_argument("--json", action="store_true", help="JSON lines with all probabilities")
    p.add_argument("--top", type=positive_int, default=3, help="probabilities shown per text")
    p.add_argument("--no-blend", action="store_true", help="ours alone, without the run's blend with TF-IDF")
    add_compute_type(p)
    p.set_defaults(func=predict)

    p = cli.verb("blend", help="average a finished classification run with the TF-IDF baseline "
                               "(weight chosen on valid); `predict` and `evaluate` then use the blend")
    p.add_argument("run_dir", type=Path)
    p.set_defaults(func=blend)



def blend(args) -> int:
    """Fit the baseline on the run's own training split, compare, choose the blend weight on
    valid and save it into the run (what `train classify` does at the end with `blend: true`)."""
    from ..tasks.classify import Classifier, load_classification
    from ..tasks.classify.baseline import is_alphabetic
    from ..tasks.classify.blend import blend_run
    from ..tasks.classify.inference import member_count
    from ..tasks.classify.pipeline import baseline_beside, fit_and_log_baseline

    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    ours = Classifier.load(args.run_dir, blend=False)
    data = load_classification(ours.recipe.data)
    base = fit_and_log_baseline(data, log)
    split = "test" if data.test else "valid"
    rep = ours.evaluate(getattr(data, split), None, split)
    baseline_beside(base, getattr(data, split), split, rep["accuracy"], ours.labels,
                    is_alphabetic([t for t, _ in data.train[:2000]]), args.run_dir, log, member_count(ours))
    result = blend_run(args.run_dir, ours, base, data, log)["blend"]
    print(json.dumps({"run_dir": str(args.run_dir), f"ours_{split}_accuracy": rep["accuracy"], "blend": result},
                     ensure_ascii=False))
    return 0


def predict(args) -> int:
    """Texts in blocks of `STREAM_BLOCK` (a multiple of predict's batch of 64, so the batches and
    the numbers are those of one call on all texts): a file of millions of lines streams, each
    block's lines printed as it is done, progress on stderr every 100,000 texts."""
    from ..tasks.classify import Classifier

    clf = Classifier.load(args.run_dir, blend=not args.no_blend, compute_type=compute_type(args))
    say_compute(clf, args)
    done = 0
    for texts in blocks(stream_inputs(args.texts, args.file), STREAM_BLOCK):
        for text, res in zip(texts, clf.predict(texts)):
            if args.json:
                print(json.dumps({"text": text, **res}, ensure_ascii=False))
            else:
                top = sorted(res["probs"].items(), key=lambda kv: -kv[1])[: args.top]
                shown = "  ".join(f"{k} {v:.3f}" for k, v in top)
                print(f"{res['label']}\t{shown}\t{text}")
        sys.stdout.flush()
        if (done + len(texts)) // PROGRESS_EVERY > done // PROGRESS_EVERY:
            print(f"predict: {done + len(texts):,} texts", file=sys.stderr)
        done += len(texts)
    return 0
