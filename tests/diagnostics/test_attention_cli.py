"""`scratchformer attention` for every task: PNG grids, --top, --json, --html."""
import json

from scratchformer.cli import main
from scratchformer.diagnostics import inspection


def _json(capsys):
    return json.loads(capsys.readouterr().out)


def test_classification_maps_top_table_and_page(clf_run, tmp_path, capsys):
    html = tmp_path / "page"
    assert main(["attention", str(clf_run), "球赛今日胜", "--top", "2", "--html", str(html)]) == 0
    out = capsys.readouterr().out
    assert "layer 2 head 4" in out and "layer 1 mean of heads" in out and "球(0) -> " in out
    assert (clf_run / "attention.png").stat().st_size > 20_000 and (html / "index.html").exists()
    assert main(["attention", str(clf_run), "球赛今日胜", "--json", "--top", "3", "--no-png"]) == 0
    d = _json(capsys)
    view = d["views"][0]
    assert view["name"] == "encoder self-attention" and view["query_tokens"] == list("球赛今日胜")
    assert len(view["top"]) == 2 * (4 + 1) * 5  # layers x (heads + mean) x queries
    assert all(len(r["top"]) == 3 and sum(w for _, _, w in r["top"]) <= 1.0001 for r in view["top"])
    assert main(["attention", str(clf_run), "球", "--view", "cross"]) == 2  # a one-line error


def test_translation_has_three_kinds_and_align_still_works(mt_run, tmp_path, capsys):
    res = inspection.load(mt_run).attention("ab cd ef")
    names = [v.name for v in res.views]
    assert names == ["encoder self-attention", "decoder self-attention", "cross-attention"]
    enc, dec, cross = res.views
    assert enc.query_tokens == ["ab", "cd", "ef", "<eos>"]
    assert cross.key_tokens == enc.key_tokens and cross.query_tokens[-1] == "<eos>"
    assert dec.query_tokens[0] == "<bos>" and len(dec.query_tokens) == len(cross.query_tokens)
    for w in dec.layers:  # causal: nothing above the diagonal
        assert float(w.triu(1).abs().max()) == 0.0
    for v in res.views:
        for w in v.layers:
            assert torch_allclose_rows(w)
    assert main(["attention", str(mt_run), "ab cd ef", "--out", str(tmp_path), "--view", "cross"]) == 0
    assert (tmp_path / "attention.png").exists()
    assert main(["attention", str(mt_run), "ab cd", "--out", str(tmp_path / "all.png")]) == 0
    assert {p.name for p in tmp_path.glob("all_*.png")} == {"all_encoder_self.png", "all_decoder_self.png", "all_cross.png"}
    assert main(["align", str(mt_run), "ab cd", "--out", str(tmp_path / "align.png")]) == 0
    assert (tmp_path / "align.png").exists()


def torch_allclose_rows(w):
    return bool(((w.sum(-1) - 1).abs() < 1e-4).all())


def test_language_model_and_mlm_runs(lm_run, mlm_run, tmp_path, capsys):
    assert main(["attention", str(lm_run), "春夏秋冬天地", "--json"]) == 0
    d = _json(capsys)
    assert d["views"][0]["name"] == "causal self-attention"
    res = inspection.load(lm_run).attention("春夏秋冬天地")
    assert float(res.views[0].layers[0].triu(1).abs().max()) == 0.0
    first = [r for r in d["views"][0]["top"] if r["query"] == 0]
    assert all(r["top"][0][:2] == [0, "春"] and r["top"][0][2] == 1.0 for r in first)  # the first token sees only itself
    assert main(["attention", str(mlm_run), "球赛今日", "--html", str(tmp_path / "h")]) == 0
    res = inspection.load(mlm_run).attention("球赛今日")
    assert res.views[0].query_tokens == list("球赛今日") and torch_allclose_rows(res.views[0].layers[0])
