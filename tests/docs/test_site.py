"""The documentation site builds with `mkdocs build --strict`: a broken link, a link to a missing
page or anchor fails the tests (mkdocs.yml; `make test` installs the `docs` extra)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("mkdocs", reason="mkdocs is not installed: pip install -e '.[docs]' (make test does)")
pytest.importorskip("material", reason="mkdocs-material is not installed: pip install -e '.[docs]' (make test does)")


def build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          capture_output=True, text=True, cwd=config.parent, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def test_the_site_builds_strictly(tmp_path):
    done = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    site = tmp_path / "site"
    for page in ("index.html", "toolkit/index.html", "claims/index.html", "zh/claims/index.html",
                 "experiments/heads/report/index.html"):
        assert (site / page).is_file(), page
    # Chinese pages carry the bundled CJK font, cut down to the characters they use (no empty boxes
    # on a machine without CJK fonts)
    assert (site / "assets" / "fonts" / "sf-cjk.otf").stat().st_size > 20_000
    assert 'font-family: "sf-cjk"' in (site / "assets" / "stylesheets" / "cjk.css").read_text(encoding="utf-8")
    # a link to a repository file outside docs/ is copied into the site and the link points at it
    assert (site / "repo" / "benchmarks" / "results" / "attention" / "index.html").is_file()
    assert 'href="../repo/benchmarks/results/"' in (site / "benchmarks" / "index.html").read_text(encoding="utf-8")


def _tiny_site(tmp_path: Path, index: str) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text(index, encoding="utf-8")
    (tmp_path / "docs" / "later.md").write_text("# A page added later\n", encoding="utf-8")
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "mkdocs_hooks.py", tmp_path / "scripts")
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    head, _, tail = text.partition("\nnav:\n")
    tail = tail[tail.index("\n# Links from"):]  # the repository's nav lists pages this tiny site lacks
    config = tmp_path / "mkdocs.yml"
    config.write_text(head + "\nnav:\n  - Home: index.md\n" + tail, encoding="utf-8")
    return config


def test_a_broken_link_fails_the_build_and_a_page_outside_nav_is_listed(tmp_path):
    config = _tiny_site(tmp_path, "# Home\n\n[gone](missing.md)\n")
    done = build(config, tmp_path / "site")
    assert done.returncode != 0 and "missing.md" in done.stdout + done.stderr
    config.unlink()
    shutil.rmtree(tmp_path / "docs")
    shutil.rmtree(tmp_path / "scripts")
    config = _tiny_site(tmp_path, "# Home\n\nfine\n")
    done = build(config, tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    home = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    assert "More" in home and "A page added later" in home
