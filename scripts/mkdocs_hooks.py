"""MkDocs hooks for the documentation site (named in mkdocs.yml).

Two things the site needs that MkDocs does not do by itself:

1. A page may link to a file of the repository outside docs/ (`../benchmarks/results/attention.md`,
   `../CHANGELOG.md`), so that the link works where the Markdown is read as files. In the site such a
   file is copied under `repo/<its path>` and the link is rewritten to it. A linked file that does
   not exist is left alone, so MkDocs reports the broken link (and `--strict` fails).
2. A page under docs/ that mkdocs.yml's nav does not list is appended under "More", so a page
   added later is reachable before anyone edits the nav.
3. Chinese text must not render as empty boxes on a machine without CJK fonts: the site carries
   the toolkit's own Noto Sans CJK (PyPI `noto-cjk-sans-otc`) cut down to the characters the pages
   use (`scratchformer.fonts.subset_font`), as a fallback after the system fonts.
"""
from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.structure.files import File
from mkdocs.structure.nav import Section

# an inline link or image target: ](target) or ](target "title")
_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^(```|~~~)")
_CJK = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef\u3000-\u303f]")
MOUNT = "repo"
CJK_CSS = "assets/stylesheets/cjk.css"  # named in mkdocs.yml's extra_css
CJK_FONT = "assets/fonts/sf-cjk.otf"


def _targets(markdown: str):
    """(start, end, target) of every link outside fenced code blocks."""
    in_fence = False
    pos = 0
    for line in markdown.splitlines(keepends=True):
        if _FENCE.match(line.lstrip()):
            in_fence = not in_fence
        elif not in_fence:
            for m in _LINK.finditer(line):
                yield pos + m.start(1), pos + m.end(1), m.group(1)
        pos += len(line)


def _outside_file(src: Path, target: str, docs: Path, root: Path) -> Path | None:
    """The repository file outside docs/ that `target`, written in `src`, points at, if any."""
    path = target.split("#", 1)[0]
    if not path or "://" in path or path.startswith(("/", "mailto:")):
        return None
    dest = (src.parent / path).resolve()
    if dest.is_relative_to(docs) or not dest.is_relative_to(root) or not dest.is_file():
        return None
    return dest


def on_files(files, config):
    docs = Path(config["docs_dir"]).resolve()
    root = docs.parent
    todo = [Path(f.abs_src_path) for f in files.documentation_pages()]
    seen: set[Path] = set()
    while todo:  # breadth-first: a mounted page's own links are mounted too
        src = todo.pop()
        for _, _, target in _targets(src.read_text(encoding="utf-8")):
            dest = _outside_file(src, target, docs, root)
            if dest is None or dest in seen:
                continue
            seen.add(dest)
            uri = f"{MOUNT}/{dest.relative_to(root).as_posix()}"
            if files.get_file_from_path(uri) is None:
                files.append(File.generated(config, uri, abs_src_path=str(dest)))
            if dest.suffix == ".md":
                todo.append(dest)
    _add_cjk_font(files, config)
    return files


def _add_cjk_font(files, config) -> None:
    text = "".join(Path(f.abs_src_path).read_text(encoding="utf-8") for f in files.documentation_pages())
    text += repr(config.get("nav"))  # the section titles
    glyphs = "".join(sorted(set(_CJK.findall(text))))
    font = None
    if glyphs:
        from scratchformer.fonts import subset_font

        font = subset_font(glyphs)
    css = ""
    if font is not None:
        files.append(File.generated(config, CJK_FONT, content=font))
        css = ('@font-face { font-family: "sf-cjk"; src: url("../fonts/sf-cjk.otf") format("opentype"); }\n'
               ':root { --md-text-font: "sf-cjk"; }\n'
               'code, pre, kbd { font-family: var(--md-code-font-family), "sf-cjk"; }\n')
    files.append(File.generated(config, CJK_CSS, content=css))


def on_page_markdown(markdown, page, config, files):
    docs = Path(config["docs_dir"]).resolve()
    root = docs.parent
    src = Path(page.file.abs_src_path).resolve()
    here = posixpath.dirname(page.file.src_uri)
    out, last = [], 0
    for start, end, target in _targets(markdown):
        if src.is_relative_to(docs):
            dest = _outside_file(src, target, docs, root)
            if dest is None:
                continue
            uri = f"{MOUNT}/{dest.relative_to(root).as_posix()}"
        else:  # a mounted file: its in-repo links point at other mounted files
            dest = _outside_file(src, target, Path("/nonexistent"), root)
            if dest is None or dest.is_relative_to(docs):
                continue
            uri = f"{MOUNT}/{dest.relative_to(root).as_posix()}"
        anchor = target[len(target.split("#", 1)[0]):]
        out.append(markdown[last:start] + posixpath.relpath(uri, here or ".") + anchor)
        last = end
    return "".join(out) + markdown[last:]


def on_nav(nav, config, files):
    listed = {p.file.src_uri for p in nav.pages}
    extra = [f.page for f in files.documentation_pages()
             if f.page is not None and f.src_uri not in listed and not f.src_uri.startswith(f"{MOUNT}/")
             and "/" not in f.src_uri]
    if extra:
        more = Section("More", sorted(extra, key=lambda p: p.file.src_uri))
        for page in more.children:
            page.parent = more
        nav.items.append(more)
        nav.pages.extend(more.children)
    return nav
