"""What averaging a trained classifier with the TF-IDF baseline would score (a probe, not a feature).

    python scripts/blend_probe.py RUN_DIR

Loads the run (single or ensemble), refits the TF-IDF + logistic regression baseline on the run's own
train split (as `train classify` does), and averages the two models' probabilities,
p = w · p_ours + (1 − w) · p_tfidf, with w chosen on the valid split from 0, 0.1, ..., 1 (ties: the
w nearest 0.5). It prints test accuracy for ours, the baseline, the blend and the plain 50/50 mean.
`predict` does not use a blend: the baseline is not saved with the run (it would need its vocabularies
and weights saved without pickle). Texts that our model refuses (empty) stop the probe with that error.
"""
from __future__ import annotations

import sys

import numpy as np

from scratchformer.tasks.classify import Classifier, load_classification
from scratchformer.tasks.classify.baseline import _clip, fit_baseline


def main(run_dir: str) -> None:
    clf = Classifier.load(run_dir)
    data = load_classification(clf.recipe.data)
    ids = {lab: i for i, lab in enumerate(clf.labels)}
    base = fit_baseline(data.train, clf.labels, data.valid)

    def probs(pairs):
        texts = [t for t, _ in pairs]
        return (np.asarray(clf.predict_proba(texts)), base.model.predict_proba(_clip(texts)),
                np.asarray([ids[lab] for _, lab in pairs]))

    def acc(p, y) -> float:
        return float((p.argmax(1) == y).mean())

    vo, vb, vy = probs(data.valid)
    to, tb, ty = probs(data.test)
    w = max(np.linspace(0, 1, 11), key=lambda w: (acc(w * vo + (1 - w) * vb, vy), -abs(w - 0.5)))
    print(f"{run_dir}: test accuracy ours {acc(to, ty):.4f}, TF-IDF {acc(tb, ty):.4f}, "
          f"blend (w={w:.1f} on valid) {acc(w * to + (1 - w) * tb, ty):.4f}, 50/50 {acc((to + tb) / 2, ty):.4f}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
