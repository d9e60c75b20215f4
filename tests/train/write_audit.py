"""One process of test_torchrun.py's one-writer tests, launched by torchrun: `scratchformer.cli`
with every write this process makes inside a watched folder recorded, one line per write, in
`<log_dir>/rank<RANK>.txt` (opened before the recording starts, written with `os.write`).

    python write_audit.py WATCHED LOG_DIR -- train lm --data ... --out WATCHED/run ...

What counts as a write: a file opened for writing (`open`, `os.open`; a descriptor-relative
name is resolved through its folder's descriptor, as fileio's writers open them), a rename
(its target), a removal, a new folder. Python's audit hooks see the first four kinds from
every caller; `os.open` is wrapped because its audit event does not carry `dir_fd`.
"""
from __future__ import annotations

import os
import sys

_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


def _where(path, dir_fd=None) -> str | None:
    if isinstance(path, int):
        return None  # an open descriptor: its opening was recorded
    name = os.fsdecode(path)
    if os.path.isabs(name):
        return os.path.normpath(name)
    base = os.readlink(f"/proc/self/fd/{dir_fd}") if dir_fd is not None else os.getcwd()
    return os.path.normpath(os.path.join(base, name))


def install(watched: str, log_path: str) -> None:
    watched = os.path.realpath(watched)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    busy = []

    def record(kind: str, path, dir_fd=None) -> None:
        if busy:
            return
        busy.append(1)
        try:
            where = _where(path, dir_fd)
            if where is not None and (where == watched or where.startswith(watched + os.sep)):
                os.write(log_fd, f"{kind} {os.path.relpath(where, watched)}\n".encode())
        finally:
            busy.pop()

    def hook(event: str, args) -> None:
        if event == "open" and isinstance(args[1], str) and any(c in args[1] for c in "wax+"):
            record("open", args[0])  # builtins.open / io.open (os.open: the wrapper below)
        elif event == "os.rename":  # os.rename and os.replace
            record("rename", args[1], args[3] if args[3] != -1 else None)
        elif event in ("os.remove", "os.rmdir"):
            record("remove", args[0], args[1] if args[1] != -1 else None)
        elif event == "os.mkdir":
            record("mkdir", args[0], args[2] if args[2] != -1 else None)
        elif event == "shutil.rmtree":
            record("remove", args[0], args[1] if len(args) > 1 else None)

    real_open = os.open

    def audited_open(path, flags, mode=0o777, *, dir_fd=None):
        if flags & _WRITE_FLAGS:
            record("open", path, dir_fd)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    for capable in (os.supports_dir_fd, os.supports_fd, os.supports_follow_symlinks):
        if real_open in capable:  # shutil.rmtree asks these sets whether it may work by descriptors
            capable.add(audited_open)
    os.open = audited_open
    sys.addaudithook(hook)


def main(argv: list[str]) -> int:
    watched, log_dir, sep, *cli_args = argv
    assert sep == "--"
    install(watched, os.path.join(log_dir, f"rank{os.environ.get('RANK', '0')}.txt"))
    from scratchformer.cli import main as cli_main

    return cli_main(cli_args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
