"""Accuracy by input length, and time per epoch, of a finished classification run.

Length buckets: the test split's texts cut into thirds by their length in characters (the
bounds are the 1/3 and 2/3 quantiles), so every run of an experiment — whatever its tokenizer
or model — is scored on the same three groups of texts. Columns:

    accuracy_short, accuracy_medium, accuracy_long   test accuracy within each third
    long_over_chars                                   long: more characters than this (the 2/3 quantile)
    epoch_s                                           time per step × batches per epoch

Time per step is the sweep's own median (`results.time_per_step`, evaluations left out), so
`epoch_s` is training time only.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..errors import UserError
from .results import read_jsonl, time_per_step

BUCKETS = ("short", "medium", "long")


def length_thirds(lengths: np.ndarray) -> tuple[np.ndarray, float]:
    """Bucket index 0/1/2 of each length (a length equal to a bound goes to the lower third),
    and the bound above which a text is long."""
    lo, hi = np.quantile(lengths, [1 / 3, 2 / 3])
    return np.digitize(lengths, [lo, hi], right=True), float(hi)


def classifier_length_buckets(run_dir: Path, texts: list[str]) -> dict[str, float]:
    """The columns above for the classification run in `run_dir` (`texts` is not used: the
    measure needs the labelled test split, read from the run's own recipe)."""
    from ..tasks.classify import Classifier, EncodedSplit, load_classification

    clf = Classifier.load(run_dir, blend=False)  # the Transformer, not its blend with TF-IDF
    data = load_classification(clf.recipe.data)
    if not data.test:
        raise UserError(f"{run_dir}: accuracy by length needs a test split")
    probs = clf.split_proba(data.test)  # (N, K), in the split's order
    gold = np.array([clf.labels.index(lab) for _, lab in data.test])
    right = probs.argmax(-1) == gold
    bucket, long_over = length_thirds(np.array([len(t) for t, _ in data.test]))
    out = {f"accuracy_{name}": float(right[bucket == i].mean()) if (bucket == i).any() else float("nan")
           for i, name in enumerate(BUCKETS)}
    out["long_over_chars"] = long_over
    rows = read_jsonl(Path(run_dir) / "metrics.jsonl")
    step_s = time_per_step([r for r in rows if r.get("split") == "train"],
                           {r["step"] for r in rows if r.get("split") == "valid"})
    label_ids = {lab: i for i, lab in enumerate(clf.labels)}
    train = EncodedSplit(data.train, clf._encode, label_ids, clf.recipe.data, shuffle=True, seed=clf.recipe.train.seed)
    out["epoch_s"] = step_s * len(train.sampler.epoch_batches(0)) if step_s else float("nan")
    return out
