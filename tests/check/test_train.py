"""`check --train` (kept tiny: 30 steps of a synthetic keyword task): the learner's encoder layer and
ours start from the same weights and see the same batches, so a correct layer's curve is ours to
float32 precision; a layer that gives NaN or is cut off from its input is "does not learn"."""
import math

from test_catalogue import load, plant

from scratchformer.check.run import check_loaded
from scratchformer.check.train import verdict


def test_correct_layer_trains_like_the_reference_same_start(tmp_path):
    png = tmp_path / "curves.png"
    r = check_loaded(load(plant(tmp_path, "tutorial2", [])), lang="en", train_steps=30, train_png=str(png))
    t = r.train
    assert t["verdict"] == "trains like the reference", t["line"]
    assert len(t["learner"]) == len(t["reference"]) == 30
    assert abs(t["learner"][0] - t["reference"][0]) < 1e-5  # same initial weights, same first batch
    assert max(abs(a - b) for a, b in zip(t["learner"][:10], t["reference"][:10])) < 1e-3
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and t["png"] == str(png)
    assert "train: 训练曲线和参考实现一致 / trains like the reference" in r.text("en")


def test_nan_layer_does_not_learn_from_step_0(tmp_path):
    r = check_loaded(load(plant(tmp_path, "tutorial1", [("return x\n", "return x * float('nan')\n")])),
                     lang="en", train_steps=30)
    assert (r.train["verdict"], r.train["step"], r.train["why"]) == ("does not learn", 0, "nan")
    assert "does not learn: the loss became NaN from step 0" in r.train["line"]


def test_verdict_rules():
    ref = [0.7 - 0.02 * i for i in range(30)]
    assert verdict(ref, ref) == ("trains like the reference", None, "")
    assert verdict([0.7] * 30, ref)[0::2] == ("does not learn", "flat")
    assert verdict([0.7] * 5 + [math.nan] * 25, ref) == ("does not learn", 5, "nan")
