"""CJK labels render; top-K tables and JSON are exact; the page is offline and escaped."""
import json
import warnings

import pytest
import torch

from scratchformer.diagnostics.attention_html import page
from scratchformer.diagnostics.attention_plot import plot_view
from scratchformer.fonts import cjk_family, cjk_fonts, subset_font
from scratchformer.diagnostics.maps import AttentionResult, AttentionView, format_top_k, result_to_json, top_k
from scratchformer.errors import UserError

TOKENS = list("火箭客场击败湖人")


def _view():
    w = torch.tensor([[[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.2, 0.2, 0.6]],
                      [[0.1, 0.8, 0.1], [0.5, 0.5, 0.0], [0.0, 0.1, 0.9]]])  # (H=2, 3, 3)
    return AttentionView("encoder self-attention", ["火", "箭", "<cls>"], ["火", "箭", "<cls>"], [w])


def _missing_glyph_warnings(draw) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        draw()
    return [str(w.message) for w in caught if "missing from font" in str(w.message)]


def test_chinese_labels_draw_without_missing_glyphs(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    assert cjk_family() == "Noto Sans CJK SC"  # from the pinned noto-cjk-sans-otc package

    def draw(use_cjk):
        def go():
            fig, ax = plt.subplots()
            ax.set_xticks(range(len(TOKENS)), TOKENS)
            ax.set_title("第1层 第2个注意力头")
            fig.savefig(tmp_path / "t.png")
            plt.close(fig)
        if use_cjk:
            with cjk_fonts():
                go()
        else:
            go()

    assert _missing_glyph_warnings(lambda: draw(False))  # the check can fail: DejaVu has no 火
    assert _missing_glyph_warnings(lambda: draw(True)) == []
    g = torch.Generator().manual_seed(0)
    view = AttentionView("encoder self-attention", TOKENS, TOKENS,
                         [torch.softmax(torch.randn(2, 8, 8, generator=g), -1) for _ in range(2)])
    assert _missing_glyph_warnings(lambda: plot_view(view, tmp_path / "grid.png")) == []
    assert (tmp_path / "grid.png").stat().st_size > 20_000


def test_top_k_lists_each_query_best_keys_per_head_and_mean():
    rows = top_k(_view(), 2)
    assert len(rows) == 3 * 3  # (2 heads + mean) x 3 queries
    first = rows[0]
    assert (first["layer"], first["head"], first["query_token"]) == (1, "1", "火")
    assert first["top"] == [[0, "火", 0.7], [1, "箭", 0.2]]
    mean_q2 = [r for r in rows if r["head"] == "mean" and r["query"] == 2][0]
    assert mean_q2["top"][0] == [2, "<cls>", 0.75]
    text = format_top_k(_view(), 1, heads="mean")
    assert "layer 1 mean of heads" in text and "箭(1) -> 箭(1) 0.40" in text and "head 1" not in text
    with pytest.raises(UserError, match="--top"):
        top_k(_view(), 0)


def test_json_and_page_carry_the_weights_offline_and_escaped():
    view = _view()
    view.query_tokens[0] = view.key_tokens[0] = "</script><b>"
    res = AttentionResult("</script>火", [view], task="classify")
    d = result_to_json(res)
    assert d["views"][0]["layers"][0][1][2] == [0.0, 0.1, 0.9]
    html = page(res)
    assert html.count("</script>") == 2  # the data block and the code block end; the tokens do not
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "") and "https://" not in html
    start = html.index('type="application/json">') + len('type="application/json">')
    data = json.loads(html[start:html.index("</script>", start)])
    assert data["views"][0]["query_tokens"][0] == "</script><b>" and data["views"][0]["layers"] == d["views"][0]["layers"]
    assert "@font-face" in html  # Chinese shows even where the browser has no CJK font
    assert len(subset_font("火箭")) < 50_000
