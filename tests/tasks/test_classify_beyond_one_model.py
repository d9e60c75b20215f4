"""Beyond one model, the issue-17 predictors: the blend of ours with the TF-IDF baseline (the saved
baseline, JSON + safetensors, predicts what scikit-learn predicts; the weight rule; a run that
blends end to end) and distillation from a finished run (the loss, the teacher rows, a student)."""
import json
import re
import random

import numpy as np
import pytest
from safetensors.numpy import load_file

from scratchformer.cli import main
from scratchformer.errors import UserError
from scratchformer.tasks.classify import Classifier
from scratchformer.tasks.classify.baseline import Baseline, _clip, fit_baseline
from scratchformer.tasks.classify.blend import MARGIN, WEIGHTS, choose_weight, margin_for
from scratchformer.tasks.classify.distill import soften
from scratchformer.tasks.classify.inference import BlendedClassifier
from toy_data import write_reviews_tsv

EN = {"pos": ["good", "great", "fine"], "neg": ["bad", "awful", "poor"]}
ZH = {"体育": list("球赛队"), "财经": list("股市钱"), "娱乐": list("星影歌")}


def _pairs(n, seed, words):
    rng = random.Random(seed)
    filler = ["the", "movie", "was"] if words is EN else list("的了是")
    out = []
    for _ in range(n):
        label = rng.choice(sorted(words))
        # noisy on purpose: a filler-only text is possible, so the probabilities are not all 0/1
        tokens = [rng.choice(words[label] + filler) for _ in range(4)]
        out.append(((" " if words is EN else "").join(tokens), label))
    return out


@pytest.mark.parametrize("words", [EN, ZH], ids=["alphabetic-2-classes", "cjk-3-classes"])
def test_baseline_probabilities_match_sklearn_and_survive_a_round_trip(words, tmp_path):
    from sklearn.linear_model import LogisticRegression

    labels = sorted(words)
    train, valid, test = _pairs(300, 0, words), _pairs(60, 1, words), _pairs(80, 2, words)
    base = fit_baseline(train, labels, valid)
    assert len(base.vectorizers) == (2 if words is EN else 1)  # word + char n-grams / characters only
    texts = [t for t, _ in test] + ["", "zzz unseen 未见"]  # empty and unseen: intercept only
    ref = LogisticRegression(C=base.C, solver="saga", tol=1e-3, max_iter=1000, random_state=0)
    ref.fit(base.features([t for t, _ in train]), [labels.index(lab) for _, lab in train])
    np.testing.assert_allclose(ref.coef_, base.coef, atol=1e-5)  # the same fit (float32 features: rounding)
    ours = base.predict_proba(texts)
    np.testing.assert_allclose(ours, ref.predict_proba(base.features(texts)), atol=1e-5)
    assert ours.shape == (len(texts), len(labels)) and 0.05 < ours.std()  # not all one-hot

    base.save(tmp_path / "b")
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["baseline.json", "baseline.safetensors"]
    spec = json.loads((tmp_path / "b" / "baseline.json").read_text(encoding="utf-8"))
    assert spec["labels"] == labels and spec["C"] == base.C
    assert sum(len(v["vocabulary"]) for v in spec["vectorizers"]) == base.coef.shape[1]
    assert set(load_file(str(tmp_path / "b" / "baseline.safetensors"))) >= {"coef", "intercept", "idf.0"}
    loaded = Baseline.load(tmp_path / "b")
    np.testing.assert_allclose(loaded.predict_proba(texts), ours, atol=1e-5)  # float32 on disk
    assert (loaded.predict(texts) == base.predict(texts)).all()
    assert len(_clip(["x" * 5000])[0]) == 1000  # loaded or fitted, both read the first 1,000 characters


def test_a_damaged_saved_baseline_gives_one_line_errors(tmp_path):
    base = fit_baseline(_pairs(100, 0, EN), ["neg", "pos"])
    base.save(tmp_path / "b")
    spec = (tmp_path / "b" / "baseline.json").read_text(encoding="utf-8")
    (tmp_path / "b" / "baseline.json").write_text(spec.replace('"vocabulary"', '"vocab"'), encoding="utf-8")
    with pytest.raises(UserError, match="does not hold a readable baseline"):
        Baseline.load(tmp_path / "b")
    (tmp_path / "b" / "baseline.json").write_text(spec.replace('["neg", "pos"]', '["neg", "pos", "mixed"]'),
                                                  encoding="utf-8")
    with pytest.raises(UserError, match="coef has shape"):
        Baseline.load(tmp_path / "b")
    (tmp_path / "b" / "baseline.safetensors").unlink()
    with pytest.raises(UserError, match="baseline.safetensors is missing"):
        Baseline.load(tmp_path / "b")


def test_a_mix_is_kept_only_when_it_beats_the_better_part_by_the_margin():
    ours, base = np.array([[0.9, 0.1]]), np.array([[0.2, 0.8]])
    # w in 0..0.4 are right on label 1, but so is the baseline alone: no mix beats it
    assert choose_weight(ours, base, np.array([1])) == (0.0, 1.0)
    assert choose_weight(ours, base, np.array([0])) == (1.0, 1.0)  # ours alone
    # each part right on two of four texts; w = 0.7 and 0.8 get all four (two more: the margin on 4)
    ours = np.array([[0.6, 0.4], [0.6, 0.4], [0.45, 0.55], [0.45, 0.55]])
    base = np.array([[0.3, 0.7], [0.3, 0.7], [0.9, 0.1], [0.9, 0.1]])
    assert choose_weight(ours, base, np.zeros(4, int)) == (0.7, 1.0)
    assert margin_for(4) == pytest.approx(0.5) and margin_for(1000) == MARGIN == 0.005
    # the same on 10 texts where the six others are right either way: 1.0 vs 0.8 beats 2/10
    six = np.array([[0.9, 0.1]] * 6)
    assert choose_weight(np.concatenate([ours, six]), np.concatenate([base, six]), np.zeros(10, int)) == (0.7, 1.0)
    # one text more right than ours alone (9 of 10) is not enough on 10: ours alone
    ours1, base1 = np.concatenate([ours[:3], six, [[0.9, 0.1]]]), np.concatenate([base[:3], six, [[0.9, 0.1]]])
    assert choose_weight(ours1, base1, np.zeros(10, int)) == (1.0, 0.9)
    assert WEIGHTS[0] == 0.0 and WEIGHTS[-1] == 1.0 and len(WEIGHTS) == 11


def test_a_chance_level_model_that_ties_tfidf_on_valid_loses_to_tfidf_alone():
    """The probe's case: flat probabilities that happen to be right on 6 of 10 valid texts, TF-IDF
    right on the same 6, every mix too: TF-IDF alone (the old rule took the even mix)."""
    gold = np.array([0] * 6 + [1] * 4)
    ours = np.array([[0.51, 0.49]] * 10)  # says 0 everywhere: 6 right
    base = np.array([[0.9, 0.1]] * 6 + [[0.6, 0.4]] * 4)  # 6 right, confident where right
    w, acc = choose_weight(ours, base, gold)
    assert (w, acc) == (0.0, 0.6)
    # accuracy and macro-F1 disagree: ours says class 0 for all five (4 right), the baseline catches the one
    # class-1 text but misses two class-0 ones
    ours, base = np.array([[0.7, 0.3]] * 5), np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0], [0.0, 1.0]])
    gold = np.array([0, 0, 0, 1, 0])
    assert choose_weight(ours, base, gold) == (1.0, 0.8)  # accuracy 0.8 for w >= 0.8: ours alone has it
    w, f1 = choose_weight(ours, base, gold, metric="macro_f1")  # macro-F1 0.583 for w <= 0.7: the baseline's
    assert w == 0.0 and f1 == pytest.approx((2 / 3 + 1 / 2) / 2)
    with pytest.raises(UserError, match="valid split, which is empty"):
        choose_weight(np.zeros((0, 2)), np.zeros((0, 2)), np.zeros(0, int))


TINY = ["--set", "model.encoder.d_model=16", "--set", "model.encoder.n_heads=2", "--set", "model.encoder.d_ff=32",
        "--set", "model.encoder.n_layers=1", "--set", "train.epochs=2", "--set", "train.progress=false",
        "--set", "data.tokenizer=word"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("blend")
    write_reviews_tsv(d / "train.tsv", 300, 0, words_per_text=(2, 7))  # short texts: both models err a little
    write_reviews_tsv(d / "test.tsv", 100, 1, words_per_text=(2, 7))
    common = ["--data", str(d / "train.tsv"), "--test", str(d / "test.tsv"), "--set", "ensemble=1"] + TINY
    assert main(["train", "classify", "--out", str(d / "blended")] + common) == 0  # the adaptive default blends
    assert main(["train", "classify", "--out", str(d / "plain"), "--set", "blend=false"] + common) == 0
    return d


def test_a_default_run_predicts_with_the_blend_of_its_parts(runs, capsys):
    run = runs / "blended"
    record = json.loads((run / "baseline" / "blend.json").read_text())
    w = record["weight"]
    assert w in WEIGHTS and record["chosen_on"] == "valid"
    clf, ours = Classifier.load(run), Classifier.load(run, blend=False)
    assert isinstance(clf, BlendedClassifier) and not isinstance(ours, BlendedClassifier) and clf.weight == w
    texts = ["good movie", "the awful was", "fine fine bad", "movie"]
    base = Baseline.load(run / "baseline")
    np.testing.assert_allclose(clf.predict_proba(texts),
                               w * ours.predict_proba(texts) + (1 - w) * base.predict_proba(texts), atol=1e-6)
    assert clf.attention("good movie")[0] == ours.attention("good movie")[0]  # maps are ours
    with pytest.raises(UserError, match="empty"):
        clf.predict(["  "])

    test = json.loads((run / "blend_test_metrics.json").read_text())
    ours_test = json.loads((run / "test_metrics.json").read_text())
    assert test["blend_weight"] == w and test["ours_accuracy"] == ours_test["accuracy"]
    assert main(["evaluate", str(run), "--data", str(runs / "test.tsv"), "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["accuracy"] == test["accuracy"] and rep["blend_weight"] == w
    assert rep["comparison"]["ours"] == round(100 * ours_test["accuracy"], 2)  # ours alone beside the baseline
    assert (run / "blend_test_metrics.json").exists() and (run / "confusion_blend_test.png").exists()
    assert json.loads((run / "test_metrics.json").read_text()) == ours_test  # ours' report is left alone

    assert main(["predict", str(run), "--json", "--no-blend", "good movie"]) == 0
    alone = json.loads(capsys.readouterr().out)["probs"]
    assert alone == pytest.approx(ours.predict(["good movie"])[0]["probs"], abs=1e-6)


def test_blending_a_finished_run_equals_blending_in_training(runs, capsys):
    plain = runs / "plain"
    assert not (plain / "baseline").exists() and not isinstance(Classifier.load(plain), BlendedClassifier)
    assert main(["blend", str(plain)]) == 0  # same data, seed and recipe: the same parts, the same weight
    out = json.loads(capsys.readouterr().out.splitlines()[-1])
    trained = json.loads((runs / "blended" / "baseline" / "blend.json").read_text())
    assert out["blend"]["weight"] == trained["weight"]
    assert out["blend"]["test"] == pytest.approx(
        {k: json.loads((runs / "blended" / "blend_test_metrics.json").read_text())[k] for k in ("accuracy", "macro_f1")})
    assert isinstance(Classifier.load(plain), BlendedClassifier)
    (plain / "baseline" / "notes.txt").write_text("mine")  # --overwrite removes our files only
    assert main(["train", "classify", "--data", str(runs / "train.tsv"), "--out", str(plain), "--overwrite",
                 "--set", "time_budget=null", "--no-baseline"] + TINY) == 0
    assert sorted(p.name for p in (plain / "baseline").iterdir()) == ["notes.txt"]
    assert not isinstance(Classifier.load(plain), BlendedClassifier)


# ----------------------------------------------------------------------------- distillation

def test_distillation_loss_is_the_stated_mix_and_the_teacher_rows_follow_the_shuffle():
    import torch
    import torch.nn.functional as F

    from scratchformer.models.classifier import build_classifier
    from scratchformer.tasks.classify import ClassificationTask, ClassifyRecipe, EncodedSplit, encoder_for
    from scratchformer.data.tokenizers import build_tokenizer

    pairs = _pairs(40, 0, EN)
    labels = sorted(EN)
    soft = np.random.default_rng(0).dirichlet([1.0, 1.0], size=len(pairs))  # (N, K) any teacher
    r = ClassifyRecipe.from_dict({"data": {"tokenizer": "word", "batch_size": 8, "label_smoothing": 0.1},
                                  "model": {"encoder": {"d_model": 16, "n_heads": 2, "d_ff": 32, "n_layers": 1}},
                                  "distill_weight": 0.3})
    tok = build_tokenizer("word", [t for t, _ in pairs])
    r.model.vocab_size, r.model.n_classes = tok.vocab_size, 2
    split = EncodedSplit(pairs, encoder_for(r, tok), {lab: i for i, lab in enumerate(labels)}, r.data,
                         shuffle=True, seed=3, soft=soft)
    for idx, b in zip(split.sampler.epoch_batches(2), split.batches(2)):  # a shuffled epoch: rows follow the texts
        assert torch.equal(b.soft, torch.as_tensor(soft[np.asarray(idx)], dtype=torch.float32))
        assert b.labels.tolist() == [labels.index(pairs[i][1]) for i in idx]
    torch.manual_seed(0)
    task = ClassificationTask(build_classifier(r.model).eval(), r, tok, labels)
    b = split.batches(0)[0]
    torch.set_grad_enabled(False)  # numbers only
    logits = task.logits(b).float()
    expected = (0.7 * F.cross_entropy(logits, b.labels, reduction="sum", label_smoothing=0.1)
                - 0.3 * 2.0 ** 2 * (b.soft * F.log_softmax(logits / 2.0, -1)).sum())  # default temperature 2
    assert abs(float(task.loss_sum(b)[0]) - float(expected)) < 1e-5
    no_teacher = EncodedSplit(pairs, encoder_for(r, tok), {lab: i for i, lab in enumerate(labels)}, r.data,
                              shuffle=True, seed=3).batches(0)[0]
    assert no_teacher.soft is None
    assert abs(float(task.loss_sum(no_teacher)[0])
               - float(F.cross_entropy(logits, b.labels, reduction="sum", label_smoothing=0.1))) < 1e-5
    torch.set_grad_enabled(True)
    with pytest.raises(UserError, match="teacher's probabilities have shape"):
        EncodedSplit(pairs, encoder_for(r, tok), {"neg": 0, "pos": 1}, r.data, shuffle=False, soft=soft[:5])
    with pytest.raises(UserError, match="distill_weight must be in"):
        ClassifyRecipe.from_dict({"distill_weight": 1.5})
    with pytest.raises(UserError, match="distill_temperature must be > 0"):
        ClassifyRecipe.from_dict({"distill_temperature": 0})
    p = np.array([[0.81, 0.18, 0.01], [0.5, 0.5, 0.0]])
    np.testing.assert_allclose(soften(p, 1.0), np.clip(p, 1e-12, None) / np.clip(p, 1e-12, None).sum(1, keepdims=True))
    root = np.sqrt(np.clip(p, 1e-12, None))
    np.testing.assert_allclose(soften(p, 2.0), root / root.sum(1, keepdims=True))  # T = 2: square roots, renormalised
    assert soften(p, 2.0)[0, 0] < 0.81 and soften(p, 0.5)[0, 0] > 0.81


def test_a_student_learns_from_a_finished_run(runs, tmp_path, capsys):
    out = tmp_path / "student"
    args = ["train", "classify", "--data", str(runs / "train.tsv"), "--test", str(runs / "test.tsv"),
            "--set", "ensemble=1", "--teacher", str(runs / "plain"), "--out", str(out)] + TINY
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "teacher: " in err and "right on" in err
    n = re.search(r"teacher scoring the training texts: 100% of (\d+) texts", err)  # progress off a terminal
    assert n and err.count("teacher scoring the training texts:") == 4
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["teacher"] == str(runs / "plain") and cfg["distill_weight"] == 0.9 and cfg["distill_temperature"] == 2.0
    assert json.loads((out / "test_metrics.json").read_text())["accuracy"] > 0.5
    (runs / "zh.tsv").write_text("text\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in _pairs(60, 0, ZH)))
    assert main(["train", "classify", "--data", str(runs / "zh.tsv"), "--teacher", str(runs / "plain"),
                 "--out", str(tmp_path / "wrong"), "--set", "ensemble=1"] + TINY[:-2]) == 2
    assert "must be trained on the same data set" in capsys.readouterr().err


def test_cross_fitted_teacher_scores_each_text_with_the_member_that_never_saw_it(runs, tmp_path, capsys):
    from scratchformer.data.datasets import ClassificationData
    from scratchformer.tasks.classify import ClassifyRecipe, load_classification
    from scratchformer.tasks.classify.data import without_holdout_fold
    from scratchformer.tasks.classify.distill import teacher_probabilities

    dc = ClassifyRecipe.from_dict({"data": {"holdout_fold": 1, "folds": 3}}).data
    data = ClassificationData([(str(i), "a") for i in range(10)], [], [], ["a"])
    kept, soft = without_holdout_fold(data, dc, np.arange(10.0)[:, None])
    assert [t for t, _ in kept.train] == ["0", "2", "3", "5", "6", "8", "9"] and soft[:, 0].tolist() == [0, 2, 3, 5, 6, 8, 9]
    for bad in ({"data": {"holdout_fold": 3, "folds": 3}}, {"data": {"holdout_fold": 0}}, {"cross_fit": True}):
        with pytest.raises(UserError, match="holdout_fold|cross_fit needs an ensemble"):
            ClassifyRecipe.from_dict(bad)

    teacher = tmp_path / "crossfit"
    assert main(["train", "classify", "--data", str(runs / "train.tsv"), "--test", str(runs / "test.tsv"),
                 "--out", str(teacher), "--set", "ensemble=2", "--set", "cross_fit=true", "--no-baseline"] + TINY) == 0
    err = capsys.readouterr().err
    full = load_classification(ClassifyRecipe.load_json(teacher / "config.json").data)
    n = len(full.train)
    sizes = [int(line.split("data: ")[1].split(" train")[0]) for line in err.splitlines() if line.startswith("data: ")]
    assert sizes == [n - len(range(0, n, 2)), n - len(range(1, n, 2))]  # each member without its fold
    members = Classifier.load(teacher).members
    assert [(m.recipe.data.holdout_fold, m.recipe.data.folds) for m in members] == [(0, 2), (1, 2)]
    probs = teacher_probabilities(teacher, full.train, full.labels, log=lambda m: None)
    for j in (0, 1, 2, 7):
        np.testing.assert_allclose(probs[j], members[j % 2].split_proba([full.train[j]])[0], atol=1e-6)
    assert not np.allclose(probs[1], members[0].split_proba([full.train[1]])[0], atol=1e-6)  # the other member differs
    other = ClassifyRecipe.from_dict({"data": {"dataset": str(runs / "test.tsv")}}).data
    with pytest.raises(UserError, match="cross-fitted on another training split"):
        teacher_probabilities(teacher, full.train, full.labels, log=lambda m: None, data_config=other)
