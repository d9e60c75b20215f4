"""The baseline beside every result: TF-IDF (word and character n-grams) + logistic regression,
fitted with scikit-learn on the same train split, its regularisation chosen on the same valid
split, scored on the same test split. Seconds to fit; it keeps the neural numbers honest.

    features  = [tfidf(word 1-2 grams), tfidf(char 2-5 grams within words)]   alphabetic text
              = tfidf(character 1-3 grams)                                    CJK text
    p(y | x)  = softmax(W · features + b),  W fitted with an L2 penalty 1/C
    基线：词与字 n-gram 的 TF-IDF 加逻辑回归，同一切分上训练、选 C、测试。

For Chinese the characters are the words: the word analyzer would take each run of characters
between spaces as one token, and adding it cost 2.3 points on THUCNews (83.0 vs 85.3 test).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ...data.tokenizers import cjk_fraction
from ...errors import UserError
from ...fileio import atomic_write_bytes, atomic_write_text
from .report import confusion_matrix, report

NAME = "TF-IDF+LogReg"
SPEC_FILE, WEIGHTS_FILE = "baseline.json", "baseline.safetensors"  # in a run's baseline/ folder
C_GRID = (1.0, 4.0, 16.0, 64.0)  # inverse L2 strength; the best on valid is kept (ties: the smaller C)
MAX_FEATURES = 300_000  # per analyzer: bounds memory and time on large corpora
# the first characters of each text only: n-gram counting is pure Python in scikit-learn, and
# on long documents (inews articles, 20newsgroups posts) full texts took 1.5-8 minutes to fit.
# Our model reads at most max_len tokens (128 by default), so the baseline still reads more.
MAX_CHARS = 1_000
SCORE_BLOCK = 20_000  # texts whose features are held at once when scoring
# A training split bigger than this is fitted on its first FIT_SAMPLE texts (the split is in
# seeded random order: a random sample) and C chosen on the first FIT_SAMPLE // 4 valid texts:
# TF-IDF + SAGA on all of a 3M-row split would be the run's memory wall (features of every text
# at once). The log line says when it was.
FIT_SAMPLE = 200_000
CJK_SHARE = 0.30  # above this share of CJK characters a corpus is read as Chinese (characters are its words)


def is_alphabetic(texts: Sequence[str]) -> bool:
    """Whether `texts` (the first 2,000 are enough) are alphabetic rather than CJK text."""
    return cjk_fraction(list(texts[:2000])) <= CJK_SHARE


@dataclass
class Baseline:
    """A fitted baseline: TF-IDF vectorizers (their features side by side) and the logistic
    regression's weights. `predict_proba(texts)` gives `(N, K)` probabilities in the run's label
    order; `save(dir)` / `Baseline.load(dir)` keep it beside a run without pickle (JSON + safetensors)."""

    vectorizers: list  # fitted sklearn TfidfVectorizers
    coef: np.ndarray  # (K, F); (1, F) for two classes (logistic regression's binary form)
    intercept: np.ndarray  # (K,) or (1,)
    labels: list[str]
    C: float
    valid_accuracy: float | None
    fit_seconds: float

    def features(self, texts: Sequence[str]):
        """`(N, F)` sparse TF-IDF rows (each vectorizer's block L2-normalised, as fitted)."""
        from scipy.sparse import hstack

        clipped = _clip(texts)
        return hstack([v.transform(clipped) for v in self.vectorizers]).tocsr()

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        """softmax(x W^T + b); for two classes sigmoid(x w + b) for the second label (sklearn's
        `predict_proba`, to float rounding: tested)."""
        from scipy.special import expit, softmax

        z = np.asarray(self.features(texts) @ self.coef.T, dtype=np.float64) + self.intercept  # (N, K) or (N, 1)
        if z.shape[1] == 1:
            p = expit(z[:, 0])
            return np.stack([1.0 - p, p], axis=1)
        return softmax(z, axis=1)

    def predict(self, texts: Sequence[str]) -> np.ndarray:
        """The most probable label of each text, in blocks of SCORE_BLOCK texts (a split of
        millions holds one block's features at a time)."""
        if len(texts) <= SCORE_BLOCK:
            return self.predict_proba(texts).argmax(axis=1)
        return np.concatenate([self.predict_proba(list(texts[i:i + SCORE_BLOCK])).argmax(axis=1)
                               for i in range(0, len(texts), SCORE_BLOCK)])

    def score(self, pairs: Sequence[tuple[str, str]], labels: list[str]) -> dict[str, Any]:
        """accuracy and macro-F1 (our report's definitions) on labelled pairs."""
        from .data import gold_ids, texts_of

        gold = gold_ids(pairs, labels)  # prepared rows: from the index, no text read for it
        rep = report(confusion_matrix(gold, self.predict(texts_of(pairs)), len(labels)), labels)
        return {"model": NAME, "accuracy": rep["accuracy"], "macro_f1": rep["macro_f1"], "n": len(pairs),
                "correct": int(round(rep["accuracy"] * len(pairs))), "C": self.C,
                "valid_accuracy": self.valid_accuracy, "fit_seconds": round(self.fit_seconds, 2)}

    def save(self, directory: str | Path) -> None:
        """`directory/baseline.json` (settings, labels, vocabularies in column order) and
        `directory/baseline.safetensors` (idf per vectorizer, coef, intercept)."""
        from safetensors.numpy import save

        directory = Path(directory)
        spec = {"model": NAME, "labels": self.labels, "C": self.C, "valid_accuracy": self.valid_accuracy,
                "fit_seconds": round(self.fit_seconds, 2), "max_chars": MAX_CHARS,
                "vectorizers": [{**{k: v.get_params()[k] for k in _SAVED_PARAMS},
                                 "vocabulary": v.get_feature_names_out().tolist()} for v in self.vectorizers]}
        tensors = {f"idf.{i}": np.ascontiguousarray(v.idf_, dtype=np.float32) for i, v in enumerate(self.vectorizers)}
        tensors.update(coef=np.ascontiguousarray(self.coef, dtype=np.float32),
                       intercept=np.ascontiguousarray(self.intercept, dtype=np.float32))
        # weights first: the spec marks it complete; root: `baseline/` itself must not be a link
        atomic_write_bytes(directory / WEIGHTS_FILE, save(tensors), root=directory.parent)
        atomic_write_text(directory / SPEC_FILE, json.dumps(spec, ensure_ascii=False) + "\n", root=directory.parent)

    @classmethod
    def load(cls, directory: str | Path) -> "Baseline":
        from safetensors.numpy import load_file
        from sklearn.feature_extraction.text import TfidfVectorizer

        directory = Path(directory)
        for name in (SPEC_FILE, WEIGHTS_FILE):
            if not (directory / name).is_file():
                raise UserError(f"{directory / name} is missing: the saved baseline is incomplete; "
                                f"delete {directory} and run `scratchformer blend RUN_DIR` again")
        try:
            spec = json.loads((directory / SPEC_FILE).read_text(encoding="utf-8"))
            tensors = load_file(str(directory / WEIGHTS_FILE))
            vectorizers = []
            for i, v in enumerate(spec["vectorizers"]):
                params = {k: tuple(v[k]) if k == "ngram_range" else v[k] for k in _SAVED_PARAMS}
                _check_params(params, directory / SPEC_FILE)
                vec = TfidfVectorizer(vocabulary={t: j for j, t in enumerate(v["vocabulary"])}, dtype=np.float32,
                                      **params)
                vec.idf_ = tensors[f"idf.{i}"]
                vectorizers.append(vec)
            coef, intercept = tensors["coef"], tensors["intercept"]
            labels = list(spec["labels"])
        except (KeyError, TypeError, ValueError) as e:
            raise UserError(f"{directory} does not hold a readable baseline ({type(e).__name__}: {e}); "
                            f"delete it and run `scratchformer blend RUN_DIR` again") from None
        width = sum(len(v["vocabulary"]) for v in spec["vectorizers"])
        if coef.shape != ((1 if len(labels) == 2 else len(labels)), width):
            raise UserError(f"{directory / WEIGHTS_FILE}: coef has shape {tuple(coef.shape)} but the baseline has "
                            f"{len(labels)} labels and {width} features; delete it and run `scratchformer blend` again")
        if intercept.shape != (coef.shape[0],):
            raise UserError(f"{directory / WEIGHTS_FILE}: intercept has shape {tuple(intercept.shape)} but the "
                            f"baseline has {len(labels)} labels (coef {tuple(coef.shape)}); delete {directory} "
                            "and run `scratchformer blend RUN_DIR` again")
        for i, vec in enumerate(vectorizers):
            if vec.idf_.shape != (len(spec["vectorizers"][i]["vocabulary"]),):
                raise UserError(f"{directory / WEIGHTS_FILE}: idf.{i} has shape {tuple(vec.idf_.shape)} but its "
                                f"vocabulary {len(spec['vectorizers'][i]['vocabulary'])} terms; delete {directory} "
                                "and run `scratchformer blend RUN_DIR` again")
        return cls(vectorizers, coef, intercept, labels, spec["C"], spec.get("valid_accuracy"),
                   spec.get("fit_seconds", 0.0))


# what a vectorizer needs besides its vocabulary and idf to turn texts into the same features
_SAVED_PARAMS = ("analyzer", "ngram_range", "token_pattern", "lowercase", "sublinear_tf", "norm", "use_idf",
                 "smooth_idf", "strip_accents")


# what `_features` writes, and nothing else: a regex read from a run folder is code of a kind (a
# crafted one backtracks for ever), so only the two patterns we use are accepted
_ALLOWED = {"analyzer": {"word", "char", "char_wb"}, "token_pattern": {r"(?u)\b\w+\b", r"(?u)\b\w\w+\b"},
            "norm": {"l1", "l2", None}, "strip_accents": {None, "ascii", "unicode"}}


def _check_params(params: dict, where: Path) -> None:
    """The saved vectorizer settings are ours (see `_ALLOWED`); else one line, nothing compiled."""
    for k, allowed in _ALLOWED.items():
        if params[k] not in allowed:
            raise UserError(f"{where}: {k} {str(params[k])[:60]!r} is not one scratchformer writes "
                            f"(expected one of {sorted(map(str, allowed))}); the file was edited: delete "
                            f"{where.parent} and run `scratchformer blend RUN_DIR` again")
    n = params["ngram_range"]
    if not (len(n) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in n) and 1 <= n[0] <= n[1] <= 8):
        raise UserError(f"{where}: ngram_range {n!r} is not one scratchformer writes (1 <= low <= high <= 8); "
                        f"delete {where.parent} and run `scratchformer blend RUN_DIR` again")
    for k in ("lowercase", "sublinear_tf", "use_idf", "smooth_idf"):
        if not isinstance(params[k], bool):
            raise UserError(f"{where}: {k} must be true or false, found {params[k]!r}; delete {where.parent} "
                            "and run `scratchformer blend RUN_DIR` again")


def _features(cjk: bool) -> list:
    from sklearn.feature_extraction.text import TfidfVectorizer

    def tfidf(analyzer: str, n: tuple[int, int], **kw) -> TfidfVectorizer:
        return TfidfVectorizer(analyzer=analyzer, ngram_range=n, sublinear_tf=True, lowercase=True,
                               max_features=MAX_FEATURES, dtype=np.float32, **kw)

    if cjk:
        return [tfidf("char", (1, 3))]
    # token_pattern keeps one-letter words ("a", "i")
    return [tfidf("word", (1, 2), token_pattern=r"(?u)\b\w+\b"), tfidf("char_wb", (2, 5))]


def fit_baseline(train: Sequence[tuple[str, str]], labels: list[str],
                 valid: Sequence[tuple[str, str]] | None = None) -> Baseline:
    """Fit on `train`; with `valid`, choose C from `C_GRID` by valid accuracy (else C=4).
    The features are fitted once and shared by the C grid. SAGA to a tolerance of 1e-3 gives
    lbfgs's accuracy ~30x faster (THUCNews: 2.2 s vs 71 s); its seed is fixed."""
    from scipy.sparse import hstack
    from sklearn.linear_model import LogisticRegression

    t0 = time.monotonic()
    if len(train) > FIT_SAMPLE:
        train = list(train[:FIT_SAMPLE])
    if valid is not None and len(valid) > FIT_SAMPLE // 4:
        valid = list(valid[:FIT_SAMPLE // 4])
    ids = {lab: i for i, lab in enumerate(labels)}
    vectorizers = _features(not is_alphabetic([t for t, _ in train[:2000]]))
    train_texts = _clip(t for t, _ in train)
    x_train = hstack([v.fit_transform(train_texts) for v in vectorizers]).tocsr()
    y = np.asarray([ids[lab] for _, lab in train])
    x_valid = hstack([v.transform(_clip(t for t, _ in valid)) for v in vectorizers]).tocsr() if valid else None
    y_valid = np.asarray([ids[lab] for _, lab in valid]) if valid else None
    best: tuple[float | None, float, Any] | None = None  # (valid accuracy, C, classifier)
    for C in C_GRID if valid else (4.0,):
        clf = LogisticRegression(C=C, solver="saga", tol=1e-3, max_iter=1000, random_state=0).fit(x_train, y)
        acc = float((clf.predict(x_valid) == y_valid).mean()) if valid else None
        if best is None or (acc is not None and acc > best[0]):
            best = (acc, C, clf)
    acc, C, clf = best
    if list(clf.classes_) != list(range(len(labels))):
        raise UserError(f"the training split has examples of only {len(clf.classes_)} of the {len(labels)} labels: "
                        "the baseline cannot be fitted; add examples of every label to the training file")
    return Baseline(vectorizers, clf.coef_.copy(), clf.intercept_.copy(), list(labels), C, acc,
                    time.monotonic() - t0)


def _clip(texts) -> list[str]:
    return [t[:MAX_CHARS] for t in texts]


# ----------------------------------------------------------------------------- the comparison

@dataclass(frozen=True)
class Comparison:
    """Ours against the baseline on one split, in percentage points as printed (two decimals),
    so that the printed difference is exactly the difference of the printed numbers."""

    split: str
    ours: float  # percent, rounded to 2 decimals
    baseline: float
    n: int

    @classmethod
    def of(cls, split: str, ours_accuracy: float, baseline_accuracy: float, n: int) -> "Comparison":
        return cls(split, round(100 * ours_accuracy, 2), round(100 * baseline_accuracy, 2), n)

    @property
    def difference(self) -> float:
        return round(self.ours - self.baseline, 2)

    @property
    def baseline_wins(self) -> bool:
        return self.difference < 0

    def line(self) -> str:
        verdict = "the baseline wins" if self.baseline_wins else "ours wins" if self.difference > 0 else "a tie"
        return (f"{self.split} accuracy: ours {self.ours:.2f}%, {NAME} {self.baseline:.2f}%, "
                f"difference {self.difference:+.2f} points ({verdict}, n={self.n})")

    def advice(self, alphabetic: bool, members: int = 1) -> str | None:
        """What to try when the baseline wins (None otherwise); `members`: the run's ensemble size."""
        if not self.baseline_wins:
            return None
        tips = ["a longer budget (--time-budget 20: more seeds fit)" if members > 1 else "a longer budget (--time-budget 20)"]
        if members < 5:
            tips.append("an ensemble (--set ensemble=5: mean of 5 seeds)")
        if alphabetic:
            tips.append("a pretrained English encoder (--init minilm)")
        else:
            tips.append("pretraining on your own text (scratchformer pretrain mlm, then --init RUN)")
        return f"the TF-IDF baseline is {-self.difference:.2f} points ahead; try " + ", ".join(tips)

    def to_dict(self) -> dict[str, Any]:
        return {"split": self.split, "ours": self.ours, "baseline": self.baseline,
                "difference": self.difference, "n": self.n}
