"""The classification report: numbers from a known confusion matrix, and Chinese class names
drawn as glyphs (no "missing from font" warning) in the confusion plot."""
import warnings

import numpy as np

from scratchformer.tasks.classify import plot_confusion, write_report


def test_report_numbers_and_overlap_in_split_order(tmp_path):
    preds, gold = np.array([0, 1, 1, 0]), np.array([0, 1, 0, 0])
    order = np.array([3, 0, 1, 2])  # prediction i is split item order[i]
    rep = write_report(preds, gold, ["a", "b"], 0.5, tmp_path, "test", {"test_in_train": [0]}, order)
    assert rep["accuracy"] == 0.75 and rep["n"] == 4 and rep["loss"] == 0.5
    assert abs(rep["macro_f1"] - (0.8 + 2 / 3) / 2) < 1e-12
    assert abs(rep["accuracy_without_train_overlap"] - 2 / 3) < 1e-12  # prediction 1 (item 0) left out
    assert (tmp_path / "test_metrics.json").exists() and (tmp_path / "confusion_test.png").exists()


def test_confusion_plot_draws_chinese_labels(tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plot_confusion(np.array([[3, 1], [0, 4]]), ["体育", "财经"], tmp_path / "c.png")
    assert not [w for w in caught if "missing from font" in str(w.message)]
