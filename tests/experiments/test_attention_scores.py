"""The attention-scores experiment's point in a few hundred steps: on scalar keys a bilinear
(dot-product) score can only pick an extreme key, an additive one finds the nearest."""
from scratchformer.cli import main
from scratchformer.experiments.attention_scores import extreme_share, train_one


def test_additive_finds_the_nearest_key_where_dot_product_cannot():
    additive, dot = train_one("nearest", "additive", 0, 300), train_one("nearest", "dot", 0, 300)
    ceiling = extreme_share()
    assert 0.30 < ceiling < 0.36  # the nearest of 8 uniform keys is the largest or smallest one in ~1/3
    assert dot["test_accuracy"] < ceiling + 0.02  # measured 0.332
    assert additive["test_accuracy"] > 0.85  # measured 0.927 at 300 steps (0.996 at 1500)


def test_programmed_experiments_refuse_sweep_options(tmp_path, capsys):
    assert main(["experiment", "attention-scores", "--out", str(tmp_path), "--grid", "a=1,2"]) == 2
    assert "takes no --set/--grid" in capsys.readouterr().err
    assert main(["experiment", "copy-task", "--out", str(tmp_path), "--bugs", "no-such"]) == 2
    assert "unknown bug(s) no-such" in capsys.readouterr().err
