"""Distillation: one model trained on an ensemble's probabilities as well as on the labels.

    loss = (1 − a) · CE(labels, p_student) + a · T² · CE(p_teacher^T, p_student^T)
    p^T = softmax(log p / T) (the teacher's mean probabilities), softmax(z / T) (the student's logits)
    a = distill_weight, T = distill_temperature
    蒸馏：学生模型同时学习标签和教师（集成）在训练文本上的概率分布。

An ensemble of seeds is the most reliable gain measured here (THUCNews: +1.4 to +3 points over
its members) but costs its size at every prediction. The teacher's probabilities on the
training texts carry what the members agree on, and how unsure they are between classes
(the "dark knowledge" of Hinton et al., 2015), which the one-hot labels do not. The teacher
is the run's Transformer part (its members' mean; a blend with TF-IDF is left out: the
linear model is near one-hot on the texts it was fitted on). The teacher has seen these texts:
the THUCNews ensemble is right on all of them with a mean top probability of 0.96, so at T = 1
its targets are nearly the labels; a temperature of 2 spreads them (Hinton et al., 2015).
A `cross_fit` ensemble (member i trained without every k-th text from the i-th) scores each
training text with the member that never saw it. Its targets are honest (right on 83% of
THUCNews' training texts), but students taught by them did worse (README).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ...errors import UserError
from ..runs import same_source
from .inference import Classifier, gold_ids

SAME_SPLIT = ("dataset", "dataset_options", "valid_file", "test_file", "text_col", "label_col")


def soften(probs: np.ndarray, temperature: float) -> np.ndarray:
    """softmax(log p / T) row by row: T > 1 flattens, T = 1 leaves p as it is."""
    from scipy.special import softmax

    return softmax(np.log(np.clip(probs, 1e-12, None)) / temperature, axis=1)


def teacher_probabilities(run_dir: str | Path, pairs, labels: list[str], log=print,
                          temperature: float = 1.0, data_config=None) -> np.ndarray:
    """`(N, K)` probabilities of the classification run `run_dir` (ours alone, its members'
    mean for an ensemble) on the labelled `pairs`, in their order, columns in `labels` order,
    softened at `temperature`."""
    if not Path(run_dir).is_dir():
        raise UserError(f"teacher {run_dir} is not a run directory: train one first (e.g. --set ensemble=5)")
    teacher = Classifier.load(run_dir, blend=False)
    if teacher.recipe.cross_fit and data_config is not None and any(
            not same_source(getattr(teacher.recipe.data, k), getattr(data_config, k)) for k in SAME_SPLIT):
        raise UserError(f"teacher {run_dir} is cross-fitted on another training split ({', '.join(SAME_SPLIT)} "
                        "must match): a text's fold would not be the one its member left out")
    if teacher.labels != labels:
        raise UserError(f"teacher {run_dir} was trained on the labels {teacher.labels[:5]}, this run has "
                        f"{labels[:5]}: the teacher must be trained on the same data set")
    probs = (cross_fitted(teacher, run_dir, pairs) if teacher.recipe.cross_fit
             else teacher.split_proba(pairs, "teacher scoring the training texts"))
    members = len(getattr(teacher, "members", ())) or 1
    agree = float((probs.argmax(1) == gold_ids(pairs, labels)).mean()) if pairs else 0.0
    soft = soften(probs, temperature)
    fitted = ", cross-fitted: each text scored by the member that never saw it" if teacher.recipe.cross_fit else ""
    log(f"teacher: {run_dir} ({members} member{'s' * (members > 1)}{fitted}), right on {agree:.1%} of the training texts, "
        f"mean top probability {float(probs.max(1).mean()):.3f} ({float(soft.max(1).mean()):.3f} at temperature "
        f"{temperature:g})")
    return soft


def cross_fitted(teacher, run_dir, pairs) -> np.ndarray:
    """`(N, K)`: text i scored by member i % k of a `cross_fit` ensemble, the one trained without it.
    The student must read the teacher's own training split, in the same order."""
    k = len(teacher.members)
    for i, m in enumerate(teacher.members):
        dc = m.recipe.data
        if (dc.holdout_fold, dc.folds) != (i, k):
            raise UserError(f"teacher {run_dir}: member {i} left out fold {dc.holdout_fold} of {dc.folds}, "
                            f"expected {i} of {k}; train the teacher again with cross_fit")
    probs = np.zeros((len(pairs), len(teacher.labels)))
    for i, m in enumerate(teacher.members):
        idx = np.arange(i, len(pairs), k)
        probs[idx] = m.split_proba([pairs[j] for j in idx],
                                   f"teacher member {i + 1} of {k} scoring its held-out texts")
    return probs


TEACHER_FILE = "teacher.json"


def check_teacher(out_dir: str | Path, teacher: str | Path, soft: np.ndarray, resume: bool) -> None:
    """Tie the run to its teacher's soft targets: the first start records their sha256 in
    `teacher.json`; a `--resume` whose teacher now gives other targets (replaced or retrained
    between a kill and the resume) is refused, since the run would be trained on two teachers."""
    import hashlib
    import json

    from ...fileio import atomic_write_text, make_dirs

    digest = hashlib.sha256(np.round(soft.astype(np.float64), 6).tobytes()).hexdigest()
    path = Path(out_dir) / TEACHER_FILE
    if resume and path.is_file():
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            saved = {}
        if saved.get("soft_targets_sha256") != digest:
            raise UserError(f"the teacher {teacher} gives other probabilities of the training texts than when "
                            f"{out_dir} started (it was replaced or retrained since): resuming would train on two "
                            "teachers; restore that teacher, or start again with --overwrite")
        return
    make_dirs(out_dir)
    atomic_write_text(path, json.dumps({"teacher": str(teacher), "soft_targets_sha256": digest}) + "\n",
                      root=out_dir)
