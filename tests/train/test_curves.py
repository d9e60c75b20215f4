"""curves.png: validation metrics of different scales get panels of their own, so an accuracy of
0.3 is not drawn as a flat line at 0 beside a perplexity of 300 (as an MLM run's was)."""
import json
import struct

from scratchformer.train.curves import plot_curves, scale_groups


def png_size(path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_metrics_of_one_scale_share_a_panel_and_others_get_their_own():
    assert scale_groups({"accuracy": [0.18, 0.36], "perplexity": [325.0, 53.6]}) == [["accuracy"], ["perplexity"]]
    assert scale_groups({"macro_f1": [0.88], "accuracy": [0.9]}) == [["accuracy", "macro_f1"]]
    assert scale_groups({"bleu": [10.0, 15.6], "chrf": [30.0, 34.9], "accuracy": [0.5]}) == [["accuracy"], ["bleu", "chrf"]]
    # at most three panels: the last takes what is left
    many = {"a": [0.5], "b": [50.0], "c": [5e3], "d": [5e5], "e": [5e7]}
    assert scale_groups(many) == [["a"], ["b"], ["c", "d", "e"]]
    assert scale_groups({}) == []


def test_the_png_has_one_panel_more_per_scale(tmp_path):
    rows = [{"step": s, "split": "train", "loss": 5.0 - s / 1000} for s in (100, 200, 300)]
    rows += [{"step": s, "split": "valid", "loss": 4.0, "accuracy": s / 1000, "perplexity": 300 - s / 2}
             for s in (100, 200, 300)]
    m = tmp_path / "metrics.jsonl"
    m.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert png_size(plot_curves(m, tmp_path / "three.png")) == (1600, 400)  # loss, accuracy, perplexity
    m.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "perplexity"}) + "\n" for r in rows))
    assert png_size(plot_curves(m, tmp_path / "two.png")) == (1100, 400)
    m.write_text("".join(json.dumps({k: v for k, v in r.items() if k in ("step", "split", "loss")}) + "\n"
                         for r in rows))
    assert png_size(plot_curves(m, tmp_path / "one.png")) == (600, 400)
