"""Every file scratchformer writes goes through here: atomically, and never through a link.

**Atomic.** A reader (or a crash) sees the old file or the whole new one, never half: the bytes
go to a temporary file created in the destination's own folder, are fsynced, and the temporary
file is renamed over the destination (`os.replace`); the folder is fsynced after. Used for
checkpoints, configs, tokenizers, metrics, reports, PNGs and the data cache alike.

**Never through a link.** A run folder never reaches outside itself. Inside a run folder (the
folders a command holds with `confined_to`, which `train/runfolder.py`'s lock does for every run
folder it locks, or an explicit ``root=``), every folder on the way to a file is opened with
``O_NOFOLLOW`` one after the other (``openat``), the temporary file is made with
``O_EXCL | O_NOFOLLOW``, logs are appended with ``O_NOFOLLOW``, and a delete removes only regular
files and real folders (`remove`). A symbolic link where we write or delete, dangling or not, is
refused with one line naming it (`LinkRefused`); a file with a second hard link is refused where
we would change it in place (appending, the lock), because the change would reach the other name.
The run folder itself may be a link (that is where the user chose to put it); what lies inside
it may not. Paths made from user data (grid axes, labels, member names) go through `inside`,
which keeps them one plain name below their parent.

A full disk (ENOSPC, or a quota: EDQUOT) while writing becomes `DiskFull`, a one-line `UserError`
that says how many bytes the write needed and how many were free; the temporary file is removed
and the destination is left as it was.

Every byte written and every rename goes through `write_data`, `os.fsync` and `os.replace`,
so a test can inject a failure at each boundary (tests/reliability).
"""
from __future__ import annotations

import contextlib
import errno
import io
import os
import secrets
import shutil
import stat
from pathlib import Path
from typing import IO, Any, BinaryIO, Callable, Iterator

from scratchformer.errors import UserError

_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | _DIRECTORY | _NOFOLLOW | _CLOEXEC


class DiskFull(UserError):
    """No space left on the device while writing; the message says how much was needed."""


class LinkRefused(UserError):
    """A symbolic (or second hard) link where scratchformer would write or delete."""


def is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in _FULL


def human_bytes(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def free_bytes(path: str | Path) -> int | None:
    """Free bytes on the file system of `path` (or of its nearest existing parent)."""
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def disk_full(what: str | Path, needed: int | None, where: str | Path | None = None,
              at_least: bool = False) -> DiskFull:
    """The one-line error for a write of `needed` bytes (`at_least`: or more) that found the
    disk full."""
    where = Path(where if where is not None else what)
    free = free_bytes(where)
    more = "more than " if at_least else ""
    need = f"it needs {more}{human_bytes(needed)}" if needed is not None else "it needs more space"
    have = f", {human_bytes(free)} free there" if free is not None else ""
    return DiskFull(f"no space left on the device writing {what}: {need}{have}; "
                    "free some space (or choose another folder) and run again")


def link_refused(path: str | Path, hard: bool = False) -> LinkRefused:
    """The one-line refusal for the link at `path` (a symbolic link; `hard`: a second hard link)."""
    if hard:
        return LinkRefused(f"{path} has another hard link elsewhere: scratchformer changes no file "
                           "of a run folder that another name shares; replace it with a copy "
                           f"(cp --remove-destination) or remove it, and run again")
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return LinkRefused(f"{path} is a symbolic link{target}: scratchformer never writes or deletes "
                       "through a link inside a run folder; remove the link (or put a real file or "
                       "folder there) and run again")


# ----------------------------------------------------------------------------- where a path lives
_roots: list[str] = []  # absolute paths of the folders this process confines its writes to


@contextlib.contextmanager
def confined_to(root: str | Path) -> Iterator[Path]:
    """While inside, every write and delete under `root` is checked from `root` down: no link
    on the way (`train/runfolder.lock_run_folder` holds this for each run folder it locks)."""
    key = os.path.abspath(root)
    _roots.append(key)
    try:
        yield Path(root)
    finally:
        _roots.remove(key)


def root_of(path: str | Path) -> Path | None:
    """The outermost confined folder that holds `path` (None: none does). The outermost, so that
    a member folder of an ensemble is itself checked for being a link."""
    p = os.path.abspath(path)
    found = [r for r in _roots if p.startswith(r.rstrip(os.sep) + os.sep)]
    return Path(min(found, key=len)) if found else None


def _split(path: str | Path, root: str | Path | None) -> tuple[Path, tuple[str, ...], str, Path]:
    """(root, the folder names between root and the file, the file's name, the path as shown)."""
    shown = Path(path)
    p = Path(os.path.abspath(path))  # lexically: `a/b/../../x` is `x`, and is then outside `a/b`
    base = Path(os.path.abspath(root)) if root is not None else root_of(p)
    if base is None:
        return p.parent, (), p.name, shown
    try:
        rel = p.relative_to(base)
    except ValueError:
        raise UserError(f"{shown} is outside {root}: scratchformer writes nothing outside the folder "
                        "it was given; check the names that make this path") from None
    if not rel.parts:
        raise UserError(f"{shown} is the folder {root} itself, not a file inside it")
    return base, rel.parts[:-1], rel.parts[-1], shown


def _is_link(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return False


def _open_dir_at(fd: int, name: str, where: Path) -> int:
    """One step down: the real folder `name` in `fd` (a link: `LinkRefused`)."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=fd)
    except OSError as e:
        if _is_link(name, fd):
            raise link_refused(where) from None
        if e.errno == errno.ENOTDIR:
            raise UserError(f"{where} is a file, not a folder; move that file away and run again") from None
        raise


def _remove_at(dfd: int, name: str, shown: Path, missing_ok: bool) -> bool:
    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        if missing_ok:
            return False
        raise
    if stat.S_ISLNK(st.st_mode):
        raise link_refused(shown)
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dfd)  # fd-based: links inside are unlinked, never followed
    else:
        os.unlink(name, dir_fd=dfd)
    return True


def _open_dir(root: Path, parts: tuple[str, ...], create: bool, shown: Path) -> int:
    """A descriptor of root/parts[0]/.../parts[-1], each step opened without following a link
    (missing folders made when `create`). A link on the way raises `LinkRefused`."""
    if create and not root.is_dir():
        root.mkdir(parents=True, exist_ok=True)  # above the run folder: the user's own paths
    fd = os.open(root, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    try:
        for i, part in enumerate(parts):
            where = root.joinpath(*parts[: i + 1])
            try:
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):  # a racing maker, or a dangling link
                    os.mkdir(part, 0o777, dir_fd=fd)
                if _is_link(part, fd):
                    raise link_refused(where) from None
                nfd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as e:
                if _is_link(part, fd):
                    raise link_refused(where) from None
                if e.errno == errno.ENOTDIR:
                    raise UserError(f"{where} is a file, not a folder: {shown} cannot be written "
                                    "there; move that file away and run again") from None
                raise
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def _folder(path: str | Path, root: str | Path | None, create: bool = True) -> Iterator[tuple[int, str, Path]]:
    """(a descriptor of the folder that holds `path`, the file's name there, the path as shown)."""
    base, parts, name, shown = _split(path, root)
    fd = _open_dir(base, parts, create, shown)
    try:
        yield fd, name, shown
    finally:
        os.close(fd)


def plain_name(name: str, what: str = "name", where: str | Path = "its folder") -> str:
    """`name` when it is one plain folder or file name (it comes from user data); else a
    one-line `UserError`: never empty, `.`, `..`, an absolute path, a separator or NUL."""
    bad = ("it is not a string" if not isinstance(name, str) else
           "it is empty" if not name else
           f"it is {name!r}" if name in (".", "..") else
           "it holds a path separator" if "/" in name or "\\" in name or os.sep in name else
           "it holds a NUL character" if "\0" in name else None)
    if bad:
        raise UserError(f"{what} {name!r} cannot name a folder or file inside {where}: {bad}; "
                        "choose a name without '/', '\\', NUL, '.' or '..'")
    return name


def inside(parent: str | Path, name: str, what: str = "name") -> Path:
    """`parent / name`, for a `name` made from user data (a grid axis and label, a member, a
    split): one plain name below `parent`, never `..`, an absolute path, a separator or NUL."""
    return Path(parent) / plain_name(name, what, parent)


def check_no_links(path: str | Path, root: str | Path | None = None) -> Path:
    """Refuse (`LinkRefused`) when `path` or a folder on the way to it (below its run folder) is
    a link; a missing path is fine. Returns `path`."""
    base, parts, name, shown = _split(path, root)
    try:
        fd = _open_dir(base, parts, False, shown)
    except FileNotFoundError:
        return Path(path)
    try:
        if _is_link(name, fd):
            raise link_refused(shown)
    finally:
        os.close(fd)
    return Path(path)


def make_dirs(path: str | Path, root: str | Path | None = None) -> Path:
    """`mkdir -p path` that refuses a link on the way (below the run folder) instead of following it."""
    base, parts, name, shown = _split(Path(path) / "x", root)
    try:
        os.close(_open_dir(base, parts, True, shown.parent))
    except OSError as e:
        if is_disk_full(e):
            raise disk_full(shown.parent, None) from None
        raise
    return Path(path)


class Folder:
    """An open folder inside a run folder (reached without following a link, see `open_folder`):
    several file operations on one descriptor, each by name, none following a link."""

    def __init__(self, fd: int, shown: Path) -> None:
        self.fd, self.path = fd, shown

    def _name(self, name: str) -> str:
        return plain_name(name, "file name", self.path)

    def is_link(self, name: str) -> bool:
        return _is_link(self._name(name), self.fd)

    def mkdir(self, name: str) -> None:
        os.mkdir(self._name(name), 0o777, dir_fd=self.fd)

    @contextlib.contextmanager
    def sub(self, name: str) -> Iterator["Folder"]:
        """The real sub-folder `name` (a link: `LinkRefused`)."""
        fd = _open_dir_at(self.fd, self._name(name), self.path / name)
        try:
            yield Folder(fd, self.path / name)
        finally:
            os.close(fd)

    def write_synced(self, name: str, data: bytes) -> None:
        """A new file `name` holding `data`, fsynced (never an existing file, never a link)."""
        shown = self.path / name
        try:
            f = open(shown, "xb", opener=lambda _path, _flags: _create(self._name(name), self.fd))
        except FileExistsError:
            if self.is_link(name):
                raise link_refused(shown) from None
            raise
        with f:
            write_data(f, data)
            f.flush()
            os.fsync(f.fileno())

    def replace(self, src: str, dst: str) -> None:
        os.replace(self._name(src), self._name(dst), src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def remove(self, name: str) -> bool:
        """Delete the regular file or real folder `name` (a link: `LinkRefused`)."""
        return _remove_at(self.fd, self._name(name), self.path / name, missing_ok=True)

    def names(self) -> list[str]:
        return sorted(os.listdir(self.fd))

    def fsync(self) -> None:
        with contextlib.suppress(OSError):  # not every file system can fsync a folder
            os.fsync(self.fd)


@contextlib.contextmanager
def open_folder(path: str | Path, root: str | Path | None = None, create: bool = True) -> Iterator[Folder]:
    """The folder `path` (made when `create`), reached from its run folder without following a
    link: ``with open_folder(run / "checkpoints", root=run) as ck: ck.write_synced(...)``."""
    base, parts, name, shown = _split(Path(path) / "x", root)
    fd = _open_dir(base, parts, create, shown.parent)
    try:
        yield Folder(fd, shown.parent)
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- writing
def fsync_dir(directory: str | Path) -> None:
    """Make a rename durable; some file systems cannot fsync a directory, which is fine."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


_fsync_dir = fsync_dir  # the old private name


def write_data(f: BinaryIO, data: bytes) -> None:
    """The one place bytes reach a file (a fault-injection point for the tests)."""
    f.write(data)


def _create(name: str, dir_fd: int, mode: int = 0o644) -> int:
    """A new file `name` in `dir_fd`: never an existing one, never through a link."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode, dir_fd=dir_fd)
    with contextlib.suppress(OSError):
        os.fchmod(fd, mode)  # not the umask's choice: these files are not secrets, and not executable
    return fd


def write_synced(path: str | Path, data: bytes, root: str | Path | None = None) -> None:
    """Write `data` to a new file `path` and fsync it (no rename: for files inside a
    directory that is itself renamed into place, see train/checkpoint_store.py)."""
    try:
        with _folder(path, root) as (dfd, name, shown):
            try:  # the file object keeps the path's name (for messages and the fault tests)
                f = open(shown, "xb", opener=lambda _path, _flags: _create(name, dfd))
            except FileExistsError:
                if _is_link(name, dfd):
                    raise link_refused(shown) from None
                raise
            with f:
                write_data(f, data)
                f.flush()
                os.fsync(f.fileno())
    except OSError as e:
        if is_disk_full(e):
            raise disk_full(path, len(data)) from None
        raise


def open_append(path: str | Path, root: str | Path | None = None, encoding: str | None = "utf-8") -> IO:
    """Open a log for appending (created if missing), never through a link: a symbolic link,
    dangling or not, or a file with another hard link, is refused (`LinkRefused`)."""
    try:
        with _folder(path, root) as (dfd, name, shown):
            try:
                fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW | _CLOEXEC, 0o644, dir_fd=dfd)
            except OSError as e:
                if _is_link(name, dfd):
                    raise link_refused(shown) from None
                if e.errno == errno.EISDIR:
                    raise UserError(f"{shown} is a folder, not a log file; move it away and run again") from None
                raise
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
                os.close(fd)
                raise (link_refused(shown, hard=True) if stat.S_ISREG(st.st_mode) else
                       UserError(f"{shown} is not a regular file; move it away and run again"))
    except OSError as e:
        if is_disk_full(e):
            raise disk_full(path, None) from None
        raise
    return os.fdopen(fd, "ab") if encoding is None else open(fd, "a", encoding=encoding)


def append_text(path: str | Path, text: str, root: str | Path | None = None) -> None:
    """Append ``text`` to a log file (not atomic: a crash may cut the last line, which readers
    of the log skip); a full disk raises `DiskFull`, a link `LinkRefused`."""
    data = text.encode("utf-8")
    try:
        with open_append(path, root, encoding=None) as f:
            write_data(f, data)
    except OSError as e:
        if is_disk_full(e):
            raise disk_full(path, len(data)) from None
        raise


class _Counting:
    """A file wrapper that counts the bytes written through it (for the DiskFull message)."""

    def __init__(self, f: BinaryIO) -> None:
        self._f, self.n = f, 0

    def write(self, data) -> int:
        write_data(self._f, data)
        self.n += len(data)
        return len(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def atomic_write(path: str | Path, write: Callable[[BinaryIO], Any], size: int | None = None,
                 root: str | Path | None = None) -> None:
    """Call ``write(f)`` on a temp file next to ``path``, fsync it, then rename it to ``path``.

    If anything fails (including ``write`` itself), the temp file is removed and ``path`` is
    left as it was. A full disk raises `DiskFull` (with ``size``, the bytes needed, when
    known; else at least the bytes written before the disk filled). A link at ``path``, or on
    the way to it inside its run folder (``root``, by default the confined folder holding it,
    else its parent), raises `LinkRefused` and writes nothing.
    """
    counted = None
    try:
        with _folder(path, root) as (dfd, name, shown):
            if _is_link(name, dfd):
                raise link_refused(shown)
            tmp = f".{name}.{secrets.token_hex(4)}.tmp"
            fd = _create(tmp, dfd)
            try:
                with os.fdopen(fd, "wb") as f:
                    counted = _Counting(f)
                    write(counted)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=dfd)
                raise
            with contextlib.suppress(OSError):  # the rename made durable (not every FS can)
                os.fsync(dfd)
    except BaseException as e:
        if is_disk_full(e):
            if size is None and counted is not None and counted.n:
                raise disk_full(path, counted.n, at_least=True) from None
            raise disk_full(path, size) from None
        raise


def atomic_write_bytes(path: str | Path, data: bytes, root: str | Path | None = None) -> None:
    atomic_write(path, lambda f: f.write(data), size=len(data), root=root)


def atomic_write_text(path: str | Path, text: str, root: str | Path | None = None) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), root=root)


def save_figure(fig, path: str | Path, root: str | Path | None = None, **savefig_kw) -> Path:
    """`fig.savefig` into memory, then `atomic_write_bytes`: matplotlib's own `savefig(path)`
    would open the path itself (following a link, and leaving half a PNG on a crash)."""
    buf = io.BytesIO()
    fig.savefig(buf, format=savefig_kw.pop("format", None) or Path(path).suffix.lstrip(".") or "png", **savefig_kw)
    atomic_write_bytes(path, buf.getvalue(), root=root)
    return Path(path)


# ----------------------------------------------------------------------------- deleting
def remove(path: str | Path, root: str | Path | None = None, missing_ok: bool = True) -> bool:
    """Delete the regular file or the real folder (with what it holds) at `path`; never a link
    (`LinkRefused`), never through one. Links inside a folder being removed are unlinked, not
    followed (`shutil.rmtree` with a folder descriptor). Returns whether something was removed."""
    try:
        with _folder(path, root, create=False) as (dfd, name, shown):
            return _remove_at(dfd, name, shown, missing_ok)
    except FileNotFoundError:
        if missing_ok:
            return False
        raise


def remove_empty_dir(path: str | Path, root: str | Path | None = None) -> bool:
    """Remove the real folder `path` if it is empty (a link: `LinkRefused`); False when it holds
    something (or is missing)."""
    try:
        with _folder(path, root, create=False) as (dfd, name, shown):
            if _is_link(name, dfd):
                raise link_refused(shown)
            os.rmdir(name, dir_fd=dfd)
            return True
    except (FileNotFoundError, OSError) as e:
        if isinstance(e, OSError) and e.errno not in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST):
            raise
        return False


def folder_mode(path: str | Path) -> None:
    """Give a folder made by `tempfile.mkdtemp` (0o700: private) the mode `mkdir` gives every
    other folder (0o777 less the umask), before it is renamed into place: a cache or an export
    is not a secret, and the user's group reads it as it reads the rest."""
    umask = os.umask(0)
    os.umask(umask)
    with contextlib.suppress(OSError):
        os.chmod(path, 0o777 & ~umask)


_OWNER = ".pid"  # in a staging folder of `staged_folder(owned=True)`: the pid filling it (exports' name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_dead_stages(target: str | Path) -> None:
    """The owned staging folders of `target` (`.NAME.partial-*`) whose process is gone (killed):
    removed, so a rerun cleans up after a killed one."""
    target = Path(target)
    with contextlib.suppress(OSError):
        for p in target.parent.glob(f".{target.name}.partial-*"):
            try:
                pid = int((p / _OWNER).read_text())
            except (OSError, ValueError):
                pid = -1
            if pid <= 0 or not _alive(pid):
                remove(p)


@contextlib.contextmanager
def staged_folder(target: str | Path, replace: bool = False, owned: bool = False,
                  into_empty: bool = False) -> Iterator[Path]:
    """A new temporary folder beside `target` to fill; on a clean exit it is renamed to `target`
    in one step, so readers see no folder or a whole one (`whole_folder` builds on it).

    `replace`: an existing `target` is removed first (through `remove`: never a link). Without
    it, a `target` that another process renamed into place first is kept and ours dropped (a
    folder appears only whole, so one that is there was finished). `owned`: the staging folder is
    `.NAME.partial-*` holding this process's pid, and those of dead processes are removed first
    (`remove_dead_stages`). `into_empty`: an empty folder at `target` (one the user made) is
    replaced, and a `target` that filled meanwhile is an error, never kept. The temporary folder
    is gone afterwards either way."""
    import tempfile

    target = Path(target)
    make_dirs(target.parent)
    if owned:
        remove_dead_stages(target)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.{'partial-' if owned else ''}", dir=target.parent))
    try:
        if owned:
            (tmp / _OWNER).write_text(str(os.getpid()))
        yield tmp
        if owned:
            os.unlink(tmp / _OWNER)
        folder_mode(tmp)
        if replace:
            remove(target)
        elif into_empty:
            remove_empty_dir(target)
        try:
            os.replace(tmp, target)
        except OSError as e:  # another process finished first: keep theirs
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST) or target.is_symlink() or not target.is_dir():
                raise
            if into_empty:
                raise UserError(f"{target} was filled by another process while this one was written; ours is "
                                "dropped: give a new folder and run again") from None
    finally:
        remove(tmp)
