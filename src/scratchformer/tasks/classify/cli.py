"""The command line of classification (its face's `cli`, tasks/slots.py `TaskCLI`): the flags and
the run of `train classify`, and `evaluate` of a classify run."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from ..cli_args import (compute_type, positive_int, recipe_for_run, refuse_translation_flags, say_compute,
                        your_model_flags)
from ..slots import add_flag


def flags(p) -> None:
    p.add_argument("--data", help="registered data set (see `scratchformer datasets`) or a .tsv/.csv/.jsonl file")
    p.add_argument("--valid", help="validation file (default: a seeded split of --data)")
    p.add_argument("--test", help="test file (default: a seeded split of --data)")
    p.add_argument("--text-col", help="text column name or 0-based position")
    p.add_argument("--label-col", help="label column name or 0-based position")
    p.add_argument("--init", help="start from a pretrained encoder: a `pretrain mlm` run directory, "
                                  "'minilm' (all-MiniLM-L6-v2) or a Hugging Face BERT folder")
    p.add_argument("--teacher", metavar="RUN",
                   help="distillation: also learn this finished run's probabilities on the training texts "
                        "(e.g. an ensemble; `distill_weight` of the loss, default 0.9)")
    p.add_argument("--time-budget", type=float, metavar="MIN",
                   help="minutes for the whole run (baseline, training, test): a few steps are timed and "
                        "the schedule is planned for the steps that fit (default without --config: 8)")
    p.add_argument("--no-baseline", action="store_true",
                   help="skip the TF-IDF + logistic regression baseline fitted on the same split "
                        "(and so the blend with it; `--set blend=false` keeps the baseline but does not blend)")
    your_model_flags(p)


def evaluate_flags(ev) -> None:
    add_flag(ev, "--no-baseline", action="store_true",
             help="classifiers: skip the TF-IDF + logistic regression baseline printed beside the result")
    add_flag(ev, "--no-blend", action="store_true",
             help="classifiers: evaluate ours alone, without the run's blend with TF-IDF")
    add_flag(ev, "--max-len", type=positive_int, default=None, metavar="N",
             help="classifiers: evaluate with data.max_len=N tokens per segment instead of the "
                  "trained one (a learned position table cannot go past its length)")


def _col(v):
    return int(v) if v is not None and v.isdigit() else v


def train(args) -> int:
    import time

    from . import ClassifyRecipe, train_classifier
    from .auto import adaptive_recipe, describe

    started = time.monotonic()
    log = lambda m: print(m, file=sys.stderr)  # noqa: E731
    flags = {"data.text_col": _col(args.text_col), "data.label_col": _col(args.label_col),
             "model.init": None if args.resume else args.init, "time_budget": args.time_budget,
             "teacher": None if args.resume else args.teacher}
    if args.config or args.resume:
        recipe = recipe_for_run(ClassifyRecipe, args, flags)
    else:  # the adaptive default: chosen from the data (tasks/classify/auto.py)
        given = {"data.dataset": args.data, "data.valid_file": args.valid, "data.test_file": args.test, **flags}
        recipe = adaptive_recipe(args.set, {k: v for k, v in given.items() if v is not None})
        log(f"recipe (adaptive default; --config FILE to choose your own): {describe(recipe)}")
    from .auto import e5_candidate  # the adaptive default also considers e5

    candidate = e5_candidate(recipe, log, chosen=bool(args.config or args.resume or args.init or args.teacher
                                                      or args.model),
                             sets=args.set)
    if candidate is not None:
        from .pipeline import train_with_candidate

        result = train_with_candidate(recipe, candidate, args.out, log, baseline=not args.no_baseline, started=started)
    else:
        result = train_classifier(recipe, args.out, resume=args.resume, log=log, baseline=not args.no_baseline,
                                  started=started, your_model=args.model, strict=args.strict,
                                  sizes=args.size)
    out = {"run_dir": str(args.out), "test": {k: result.get("test", {}).get(k) for k in ("accuracy", "macro_f1")},
           "best_valid": result["train"].get("best_metric")}
    if "comparison" in result:
        out["baseline"] = {k: result["baseline"][k] for k in ("accuracy", "macro_f1")}
        out["difference_points"] = result["comparison"]["difference"]
    if "blend" in result:
        out["blend"] = {"weight": result["blend"]["weight"], **result["blend"].get("test", {})}
    print(json.dumps(out, ensure_ascii=False))
    return 0


def evaluate(args) -> int:
    from . import Classifier
    from .data import labeled_pairs
    from . import format_report, load_classification
    from .report import meta_for
    from ..runs import file_report_name, split_of
    from ...errors import UserError

    if getattr(args, "context", None) is not None:
        raise UserError("--context is for language-model runs; for a classifier use --max-len N")
    refuse_translation_flags(args, "classification")
    clf = Classifier.load(args.run_dir, blend=not args.no_blend, compute_type=compute_type(args))
    say_compute(clf, args)
    trained_max_len = clf.recipe.data.max_len
    if args.max_len is not None:
        clf = clf.with_max_len(args.max_len)
    if args.data:
        pairs, name, meta = (labeled_pairs(args.data, clf.recipe.data.text_col, clf.recipe.data.label_col),
                             file_report_name(args.data), None)
    else:
        data = load_classification(clf.recipe.data)
        pairs, name, meta = split_of(data, args.split, args.run_dir, "evaluate"), args.split, data.meta
    split = name
    if args.max_len is not None:  # its own report files beside the trained-length ones
        name = f"{name}_maxlen{args.max_len}"
    # the blend's report files beside ours' (test_metrics.json stays ours)
    report_name = f"blend_{name}" if hasattr(clf, "baseline") else name
    rep = clf.evaluate(pairs, args.run_dir, report_name, meta_for(meta, split, report_name))
    if args.max_len is not None:
        rep.update({"max_len": args.max_len, "trained_max_len": trained_max_len})
    lines: list[str] = []
    if not args.no_baseline:
        rep.update(_baseline(clf, pairs, name, rep.get("ours_accuracy", rep["accuracy"]), args.run_dir, lines.append))
    if args.json:
        print(json.dumps(rep, ensure_ascii=False))
    else:
        if args.max_len is not None:
            print(f"evaluated with data.max_len={args.max_len} (trained with {trained_max_len})")
        if "blend_weight" in rep:
            w = rep["blend_weight"]
            print(f"the run's blend: {w:.1f} × ours + {1 - w:.1f} × TF-IDF (--no-blend: ours alone); "
                  f"accuracy of its parts alone: ours {rep['ours_accuracy']:.4f}, TF-IDF {rep['baseline_accuracy']:.4f}")
        print(format_report(rep))
        if "accuracy_without_train_overlap" in rep:
            print(f"accuracy without the {name} texts that also occur in train: {rep['accuracy_without_train_overlap']:.4f}")
        print(f"confusion matrix: {args.run_dir / f'confusion_{report_name}.png'}")
        for line in lines:
            print(line)
    return 0


def _baseline(clf, pairs, name: str, ours_alone: float, run_dir: Path, log) -> dict:
    """The TF-IDF baseline (the run's saved one, else fitted on the run's own training split in
    seconds) scored on `pairs`, beside ours alone (`ours_alone`: accuracy without the blend)."""
    from ...errors import UserError
    from .baseline import fit_baseline, is_alphabetic
    from .data import load_classification, texts_of
    from .inference import member_count
    from .pipeline import baseline_beside

    members = member_count(clf)
    if hasattr(clf, "baseline"):  # a blended run saved its baseline: ours alone against it, nothing refitted
        return baseline_beside(clf.baseline, pairs, name, ours_alone, clf.labels, is_alphabetic(texts_of(pairs)),
                               run_dir, log, members)  # its first 2,000 texts are read, not all
    try:
        data = load_classification(clf.recipe.data)
    except UserError as e:  # e.g. the training file moved: the run still evaluates
        print(f"baseline skipped: the run's training data cannot be read ({e})", file=sys.stderr)
        return {}
    base = fit_baseline(data.train, clf.labels, data.valid or None)
    return baseline_beside(base, pairs, name, ours_alone, clf.labels, is_alphabetic([t for t, _ in data.train[:2000]]),
                           run_dir, log, members)
