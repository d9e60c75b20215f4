"""A CJK font for matplotlib, so Chinese (Japanese, Korean) token labels are drawn as text,
not as empty boxes.

The font comes with the project's own install: the PyPI package `noto-cjk-sans-otc` carries
Google's Noto Sans CJK collection (OFL-1.1). It is registered with matplotlib's font manager
at plot time (`FontManager.addfont` reads every face of the .ttc: SC, TC, JP, KR, HK). When
that package is missing, a CJK font of the machine is used if there is one.

Use `with cjk_fonts(): ...` around drawing code; it sets the font list for that block only.
"""
from __future__ import annotations

import contextlib
from functools import lru_cache

# Noto Sans CJK SC first: simplified-Chinese glyph shapes, and it also has Latin, kana and
# hangul. DejaVu Sans (matplotlib's own) fills in symbols the CJK font lacks; matplotlib
# falls back along this list glyph by glyph.
SYSTEM_CJK = ("Noto Sans CJK SC", "Noto Sans CJK JP", "Source Han Sans SC", "WenQuanYi Zen Hei",
              "WenQuanYi Micro Hei", "SimHei", "AR PL UMing CN")


@lru_cache(maxsize=1)
def cjk_family() -> str | None:
    """The family name of a CJK font matplotlib can use (registering the bundled one), or None."""
    from matplotlib import font_manager

    try:
        import noto_cjk_sans_otc

        font_manager.fontManager.addfont(str(noto_cjk_sans_otc.FONT_PATH))
    except (ImportError, OSError, RuntimeError):  # not installed, or an unreadable file
        pass
    have = {f.name for f in font_manager.fontManager.ttflist}
    return next((name for name in SYSTEM_CJK if name in have), None)


def font_list() -> list[str]:
    family = cjk_family()
    return ([family] if family else []) + ["DejaVu Sans"]


@contextlib.contextmanager
def cjk_fonts():
    """A matplotlib rc context whose sans-serif list starts with the CJK font."""
    import matplotlib

    with matplotlib.rc_context({"font.family": "sans-serif", "font.sans-serif": font_list()}):
        yield


def subset_font(text: str) -> bytes | None:
    """The CJK font cut down to the characters of `text` (an OpenType file of a few KB), so a
    web page can carry it inline and show Chinese on a machine without CJK fonts. None when
    there is no CJK font or fontTools (a matplotlib dependency) cannot read it."""
    import io

    from matplotlib import font_manager

    family = cjk_family()
    entry = next((f for f in font_manager.fontManager.ttflist if f.name == family), None)
    if entry is None:
        return None
    try:
        from fontTools import subset
        from fontTools.ttLib import TTFont

        font = TTFont(entry.fname, fontNumber=getattr(entry, "index", 0) or 0)
        opts = subset.Options()
        opts.layout_features, opts.hinting, opts.notdef_outline = [], False, True
        sub = subset.Subsetter(opts)
        sub.populate(text="".join(sorted(set(text))))
        sub.subset(font)
        buf = io.BytesIO()
        font.save(buf)
        return buf.getvalue()
    except Exception:  # noqa: BLE001 - an inline font is a nicety; the page works without it
        return None
