"""Ours averaged with the TF-IDF baseline: the run's predictor when the recipe says `blend`.

    p(y | x) = w · p_ours(y | x) + (1 − w) · p_tfidf(y | x),   w ∈ {0, 0.1, ..., 1}
    w: the best accuracy (or macro-F1, when the run is tuned for it) on the valid split, kept only
       when it beats the better part alone (w = 0 or w = 1) by a margin; else that better part
    融合：本模型与 TF-IDF 基线的概率加权平均，权重在验证集上选。

The two models err on different texts: the Transformer reads order and composition, the
linear model counts rare n-grams exactly. On THUCNews the adaptive default scored 85.7, the
baseline 85.3, their blend 87.0 (test). The weight is chosen on valid, never on test; w = 1
is ours alone and w = 0 the baseline alone, so on valid the blend is never below either.

Why a margin: on a small valid split a chance-level model and TF-IDF can tie, and a tie that went
to the even mix once scored 84.4% on test where TF-IDF alone scored 91.1%. A mix is kept only when
it is right on at least two more valid texts than the better part alone, and half a point
(`MARGIN`); otherwise the better part alone is the run's predictor, and between two parts with
the same score the one that gives the gold labels the higher mean log-probability on valid (a
chance-level model's probabilities are flat, so it loses that tie).
The baseline (vocabularies, idf, weights) is saved in `baseline/` as JSON + safetensors and
`Classifier.load` returns the blend; `--no-blend` (or `blend=False`) gives ours alone.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...errors import UserError
from .baseline import NAME, Baseline
from .inference import BLEND_DIR, BlendedClassifier, gold_ids
from .report import confusion_matrix, meta_for, report

WEIGHTS = tuple(i / 10 for i in range(11))  # coarse on purpose: a valid split of ~1,000 texts cannot tell finer
MARGIN = 0.005  # a mix must beat the better part alone by half a point (and two valid texts), see above


def margin_for(n: int) -> float:
    """How much a mix must beat the better part alone by on `n` valid texts (see the module doc)."""
    return max(MARGIN, 2 / max(n, 1) - 1e-9)


def choose_weight(ours: np.ndarray, baseline: np.ndarray, gold: np.ndarray,
                  weights: Sequence[float] = WEIGHTS, metric: str = "accuracy") -> tuple[float, float]:
    """(w, its valid score) for `(N, K)` probabilities of ours and the baseline and `(N,)` gold
    ids, by `metric` ("accuracy" or "macro_f1", the run's own `train.metric` when it is one of
    them). The better part alone (w = 1 ours, w = 0 the baseline; a tie goes to the higher mean
    log-probability of the gold labels) unless the best mix (0 < w < 1; among ties the w nearest
    0.5, then the smaller) beats it by `margin_for(N)`."""
    if len(gold) == 0:
        raise UserError("the blend weight is chosen on the valid split, which is empty")
    if metric not in ("accuracy", "macro_f1"):
        raise UserError(f"the blend weight is chosen by accuracy or macro_f1, not {metric!r}")
    n_classes = ours.shape[1]

    def score(w: float) -> float:
        pred = (w * ours + (1 - w) * baseline).argmax(1)
        if metric == "accuracy":
            return float((pred == gold).mean())
        return float(report(confusion_matrix(gold, pred, n_classes), [str(i) for i in range(n_classes)])["macro_f1"])

    def log_likelihood(p: np.ndarray) -> float:
        return float(np.log(np.clip(p[np.arange(len(gold)), gold], 1e-12, 1.0)).mean())

    singles = [(score(w), log_likelihood(p), w) for w, p in ((1.0, ours), (0.0, baseline))]
    single, _, single_w = max(singles)
    mixes = [(score(w), -abs(w - 0.5), -w, w) for w in weights if 0.0 < w < 1.0]
    if mixes:
        mix, _, _, w = max(mixes)
        if mix >= single + margin_for(len(gold)):
            return w, mix
    return single_w, single


def blend_run(run_dir: str | Path, ours, base: Baseline, data, log=print) -> dict[str, Any]:
    """Choose the weight of `ours` (the run's `Classifier` or `EnsembleClassifier`) against the
    fitted `base` on `data.valid`, save both into `run_dir/baseline/` and report the blend on
    `data.test` (files `blend_test_metrics.json`, `confusion_blend_test.png`)."""
    if not data.valid:
        raise UserError("the blend weight is chosen on a valid split and this run has none: "
                        "pass --valid FILE (or let the data be split)")
    run_dir = Path(run_dir)
    texts = [t for t, _ in data.valid]
    gold = gold_ids(data.valid, ours.labels)
    p_ours, p_base = ours.split_proba(data.valid), base.predict_proba(texts)
    metric = ours.recipe.train.metric if ours.recipe.train.metric in ("accuracy", "macro_f1") else "accuracy"
    w, valid_score = choose_weight(p_ours, p_base, gold, metric=metric)
    blend_valid = (w * p_ours + (1 - w) * p_base).argmax(1)
    record = {"valid_accuracy": float((blend_valid == gold).mean()), "chosen_by": metric,
              f"valid_{metric}": valid_score, "chosen_on": "valid", "grid": list(WEIGHTS),
              "margin": margin_for(len(gold)),
              "ours_valid_accuracy": float((p_ours.argmax(1) == gold).mean()),
              "baseline_valid_accuracy": float((p_base.argmax(1) == gold).mean())}
    blended = BlendedClassifier(ours, base, w)
    blended.save(run_dir / BLEND_DIR, record)
    what = ("ours alone" if w == 1.0 else f"the {NAME} baseline alone" if w == 0.0
            else f"{w:.1f} × ours + {1 - w:.1f} × {NAME}")
    log(f"blend: {what}, chosen on valid by {metric} ({valid_score:.4f}; valid accuracy {record['valid_accuracy']:.4f}, "
        f"ours {record['ours_valid_accuracy']:.4f}, "
        f"{NAME} {record['baseline_valid_accuracy']:.4f}); saved in {run_dir / BLEND_DIR}/")
    out: dict[str, Any] = {"weight": w, **record}
    if data.test:
        rep = blended.evaluate(data.test, run_dir, "blend_test", meta_for(data.meta, "test", "blend_test"))
        out["test"] = {"accuracy": rep["accuracy"], "macro_f1": rep["macro_f1"]}
        log(f"blend test: accuracy {rep['accuracy']:.4f}, macro-F1 {rep['macro_f1']:.4f} "
            f"(the run's predictor: `predict` and `evaluate` use it; --no-blend for ours alone)")
    return {"blend": out}
