"""The TF-IDF + logistic regression baseline beside every classification result."""
import json
import random

from scratchformer.cli import main
from scratchformer.tasks.classify.baseline import NAME, Comparison, fit_baseline

TINY = ["--set", "model.encoder.d_model=16", "--set", "model.encoder.n_heads=2", "--set", "model.encoder.d_ff=32",
        "--set", "train.epochs=2", "--set", "train.progress=false"]


EN = {"pos": ["good", "great", "fine"], "neg": ["bad", "awful", "poor"]}
ZH = {"体育": list("球赛队"), "财经": list("股市钱")}


def _pairs(n, seed, words):
    rng = random.Random(seed)
    filler = ["the", "movie", "was"] if words is EN else list("的了是")
    join = " " if words is EN else ""
    out = []
    for _ in range(n):
        label = rng.choice(sorted(words))
        tokens = [rng.choice(words[label])] + [rng.choice(words[label] + filler) for _ in range(5)]
        rng.shuffle(tokens)  # at least one word of its class: separable
        out.append((join.join(tokens), label))
    return out


def test_baseline_separates_a_separable_set_in_either_script():
    for words in (EN, ZH):
        labels = sorted(words)
        base = fit_baseline(_pairs(200, 0, words), labels, _pairs(40, 1, words))
        scored = base.score(_pairs(50, 2, words), labels)
        assert scored["accuracy"] == 1.0 and scored["macro_f1"] == 1.0 and scored["n"] == 50
        assert scored["correct"] == 50 and scored["valid_accuracy"] == 1.0
        assert scored["C"] == 1.0  # all C tie on valid: the smallest is kept


def test_baseline_scores_agree_with_a_hand_count():
    labels = ["neg", "pos"]
    base = fit_baseline(_pairs(200, 0, EN), labels)  # no valid: C = 4
    test = [("good great", "pos"), ("bad awful", "neg"), ("good fine", "neg"), ("poor bad", "pos")]
    assert list(base.predict([t for t, _ in test])) == [1, 0, 1, 0]
    scored = base.score(test, labels)
    assert scored["accuracy"] == 0.5 and scored["correct"] == 2 and scored["C"] == 4.0


def test_printed_difference_is_exactly_the_difference_of_the_printed_numbers():
    rng = random.Random(0)
    for _ in range(500):
        n = rng.randint(1, 3000)
        ours, base = rng.randint(0, n) / n, rng.randint(0, n) / n
        c = Comparison.of("test", ours, base, n)
        line = c.line()
        printed_ours = float(line.split("ours ")[1].split("%")[0])
        printed_base = float(line.split(f"{NAME} ")[1].split("%")[0])
        printed_diff = float(line.split("difference ")[1].split(" points")[0])
        assert printed_diff == round(printed_ours - printed_base, 2)
        assert ("the baseline wins" in line) == (printed_diff < 0)


def test_comparison_line_and_advice():
    c = Comparison.of("test", 0.8412, 0.853, 1000)
    assert c.line() == "test accuracy: ours 84.12%, TF-IDF+LogReg 85.30%, difference -1.18 points (the baseline wins, n=1000)"
    assert "--init minilm" in c.advice(alphabetic=True) and "ensemble" in c.advice(alphabetic=True)
    assert "--init minilm" not in c.advice(alphabetic=False) and "pretrain mlm" in c.advice(alphabetic=False)
    assert Comparison.of("test", 0.9, 0.8, 10).advice(True) is None
    assert "--set ensemble=5" not in c.advice(alphabetic=True, members=5) and "more seeds fit" in c.advice(True, 5)
    assert c.to_dict() == {"split": "test", "ours": 84.12, "baseline": 85.3, "difference": -1.18, "n": 1000}


def _write(path, pairs):
    path.write_text("text\tlabel\n" + "".join(f"{t}\t{lab}\n" for t, lab in pairs))


def test_train_and_evaluate_print_the_baseline_beside_ours(tmp_path, capsys):
    _write(tmp_path / "train.tsv", _pairs(160, 0, EN))
    _write(tmp_path / "test.tsv", _pairs(40, 1, EN))
    out = tmp_path / "run"
    assert main(["train", "classify", "--data", str(tmp_path / "train.tsv"), "--test", str(tmp_path / "test.tsv"),
                 "--out", str(out)] + TINY) == 0
    cap = capsys.readouterr()
    printed = json.loads(cap.out.splitlines()[-1])
    saved = json.loads((out / "baseline_test_metrics.json").read_text())
    assert printed["baseline"]["accuracy"] == saved["baseline"]["accuracy"] == 1.0
    ours = round(100 * printed["test"]["accuracy"], 2)
    assert printed["difference_points"] == saved["comparison"]["difference"] == round(ours - 100.0, 2)
    assert f"test accuracy: ours {ours:.2f}%, TF-IDF+LogReg 100.00%" in cap.err
    assert "recipe (adaptive default" in cap.err and "as many seeds as fit" in cap.err
    assert "ensemble=0: 5 members" in cap.err and cap.err.count("plan: time budget") == 5  # tiny: 5 fit in 8 min
    assert len(json.loads((out / "members.json").read_text())) == 5

    assert main(["evaluate", str(out), "--data", str(tmp_path / "test.tsv")]) == 0
    assert "test accuracy: ours" in capsys.readouterr().out
    assert main(["evaluate", str(out), "--split", "valid", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["comparison"]["split"] == "valid" and rep["baseline"]["n"] == rep["n"] == 16  # 10% of 160
    assert (out / "baseline_valid_metrics.json").exists()
    assert main(["evaluate", str(out), "--split", "valid", "--json", "--no-baseline"]) == 0
    assert "baseline" not in json.loads(capsys.readouterr().out)


def test_no_baseline_skips_it(tmp_path, capsys):
    _write(tmp_path / "train.tsv", _pairs(120, 0, EN))
    out = tmp_path / "run"
    assert main(["train", "classify", "--data", str(tmp_path / "train.tsv"), "--out", str(out), "--no-baseline",
                 "--set", "time_budget=null"] + TINY) == 0
    assert "baseline" not in json.loads(capsys.readouterr().out.splitlines()[-1])
    assert not list(out.glob("baseline_*"))
    assert json.loads((out / "config.json").read_text())["plan"] is None  # no budget, no plan
