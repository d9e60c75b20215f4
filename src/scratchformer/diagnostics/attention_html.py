"""`--html DIR`: one self-contained `index.html` to browse attention maps offline.

The page (template in `page/attention.html`) carries the maps as JSON inside the file and
its own JS/CSS: no CDN, no network, no notebook. It has a view/layer/head picker (with "mean
of heads"), a heatmap whose cells show the token pair and weight on hover, a head view
(queries left, keys right, one line per pair, opacity = weight) and a model view (a thumbnail
per layer and head), the two views that BertViz made familiar.
"""
from __future__ import annotations

import base64
import html
import json
import re
import string
from importlib import resources
from pathlib import Path

from ..fonts import subset_font
from ..fileio import atomic_write_text
from .maps import AttentionResult, result_to_json


def page(result: AttentionResult) -> str:
    template = resources.files(__package__).joinpath("page", "attention.html").read_text(encoding="utf-8")
    data = json.dumps(result_to_json(result), ensure_ascii=False, separators=(",", ":"))
    # inside <script>, "</script>" or "<!--" in a token would end the block: escape every "<"
    data = data.replace("<", "\\u003c")
    title = html.escape(f"attention: {result.text}")
    fills = {"__TITLE__": title, "__DATA__": data, "__FONTFACE__": _font_face(result)}
    return re.sub("__TITLE__|__DATA__|__FONTFACE__", lambda m: fills[m.group(0)], template)  # one pass


def _font_face(result: AttentionResult) -> str:
    """An inline @font-face with just the glyphs the page shows (the browser may have no CJK font)."""
    text = result.text + (result.output or "") + string.printable + "\u2192"
    for v in result.views:
        text += "".join(v.query_tokens) + "".join(v.key_tokens) + v.name + v.note
    font = subset_font(text)
    if font is None:
        return ""
    b64 = base64.b64encode(font).decode("ascii")
    return f'@font-face {{ font-family: "sf-cjk"; src: url(data:font/otf;base64,{b64}) format("opentype"); }}'


def write_html(result: AttentionResult, out_dir: str | Path) -> Path:
    """Write `out_dir/index.html` and return its path."""
    path = Path(out_dir) / "index.html"
    atomic_write_text(path, page(result))
    return path
