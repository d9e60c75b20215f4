"""Helpers shared by the command modules: recipes from --config and --set, text inputs."""
from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
from pathlib import Path
from typing import Iterable, Iterator

from ..errors import UserError
from ..tasks.cli_args import (COMPUTE_TYPES, add_compute_type, compute_type, positive_int,  # noqa: F401  (moved; kept here)
                              recipe_for_run, refuse_translation_flags, say_compute)
from ..tasks.runs import resolve_recipe


def load_recipe(cls, config: str | None, sets: list[str], base=None):
    """The default recipe (or `base`), then the --config file, then each typed --set."""
    return resolve_recipe(cls, config, sets, base=base)


def read_inputs(texts: list[str], file: str | None) -> list[str]:
    """Texts from arguments, else from --file (one per line), else from stdin; bytes that are
    not UTF-8 stop with the file (or <stdin>), line and byte offset."""
    from ..data.readers import decode_utf8, read_utf8

    if texts:
        return texts
    if file:
        lines = read_utf8(file).splitlines()
    elif not sys.stdin.isatty():
        raw = getattr(sys.stdin, "buffer", None)
        lines = (decode_utf8(raw.read(), "<stdin>") if raw is not None else sys.stdin.read()).splitlines()
    else:
        raise UserError("give texts as arguments, with --file, or on stdin")
    lines = [line for line in lines if line.strip()]
    if not lines:
        raise UserError("no non-empty input lines")
    return lines


STREAM_BLOCK = 64 * 64  # texts per block when a file streams through predict / embed
PROGRESS_EVERY = 100_000  # a progress line on stderr every this many texts


def stream_inputs(texts: list[str], file: str | None) -> Iterator[str]:
    """`read_inputs`, with a --file read as it goes (bounded memory on a 10M-line file): the
    same non-empty lines (str.splitlines' line ends) and the same one-line UTF-8 errors."""
    if texts or not file:
        yield from read_inputs(texts, file)
        return
    from ..data.readers import not_utf8, read_utf8

    path = Path(file)
    if not path.is_file():
        read_utf8(path)  # the one-line error of a missing file or a folder
    n = 0
    with open(path, "rb") as f:
        offset = 0
        for lineno, raw in enumerate(f, 1):
            body = raw[3:] if lineno == 1 and raw.startswith(b"\xef\xbb\xbf") else raw
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise not_utf8(path, lineno, offset + (len(raw) - len(body)) + exc.start, body[exc.start]) from None
            offset += len(raw)
            for line in text.splitlines():
                if line.strip():
                    n += 1
                    yield line
    if not n:
        raise UserError("no non-empty input lines")


def blocks(items: Iterable, size: int) -> Iterator[list]:
    """`items` in lists of `size` (the last one shorter)."""
    block: list = []
    for x in items:
        block.append(x)
        if len(block) == size:
            yield block
            block = []
    if block:
        yield block


def under_torchrun(args) -> None:
    """Launched by torchrun (WORLD_SIZE > 1): only rank 0 prints (one log, one result line), and
    a `train` verb that torchrun restarted on a folder holding a checkpoint resumes it, so the
    same command line continues the job (train/distributed.py). Nothing otherwise."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return
    from ..train.distributed import leave_process_group, quiet_unless_main, restarted_with_checkpoint

    quiet_unless_main()
    atexit.register(leave_process_group)  # before teardown, so each rank exits with its own code
    # SIGTERM to the torchrun agent reaches every worker: end as an exception, not at once, so a
    # write in progress removes its temp file (fileio) and no half-written file stays in the run folder
    signal.signal(signal.SIGTERM, _terminated)
    if getattr(args, "claims_out", False) and not args.resume and restarted_with_checkpoint(args.out):
        print(f"torchrun restarted the job: resuming from the checkpoint in {args.out}", file=sys.stderr)
        args.resume, args.overwrite = True, False


def _terminated(signum, frame) -> None:
    raise SystemExit(128 + signum)


WRITES_INTO_RUN = ("evaluate", "attention", "align", "doctor", "blend")  # verbs that write into RUN


@contextlib.contextmanager
def run_folder_guard(args) -> Iterator[None]:
    """Held around a whole command by `cli.main`: a `train` verb (one that took
    `add_recipe_args`) locks its --out and claims it (empty, or --resume, or --overwrite: see
    train/runfolder.py); `evaluate`, `attention`, `align`, `doctor` and `blend` lock the run folder they write into. Under
    torchrun only rank 0 does this."""
    from ..train.runfolder import lock_run_folder, refuse_links, run_folder

    if os.environ.get("RANK", "0") != "0":
        yield
        return
    if getattr(args, "claims_out", False):
        if args.overwrite and not args.resume:
            check_train_inputs(args)  # before --overwrite removes anything
        with run_folder(args.out, args.resume, args.overwrite, args.verb):
            yield
    elif getattr(args, "verb", None) in WRITES_INTO_RUN and Path(args.run_dir).is_dir():
        with lock_run_folder(args.run_dir, args.verb):
            refuse_links(args.run_dir)  # before any work: a linked report, PNG or baseline/
            yield
    else:
        yield


def _face(args):
    """The face of a train verb's task: `train TASK`, or `pretrain mlm` (cli.py names both `task`)."""
    from ..tasks.faces import face

    return face(args.task)


def _check_source(option: str, value: str, pairs: bool = False) -> None:
    """A data set name or file(s) of a recipe/flag: registered, or files that exist."""
    from ..tasks.runs import registered

    if registered(value) is not None:  # an unknown, path-less name raises "did you mean" here
        return
    for part in (value.split(",") if pairs else [value]):
        if not Path(part.strip()).is_file():
            raise UserError(f"{option} {part.strip()}: no such file (nothing was removed); check the path, "
                            "or see `scratchformer datasets` for the registered data sets")


def check_train_inputs(args) -> None:
    """What a `train` verb reads, checked before `--overwrite` removes the old run: the
    --config, every --set, and the data files (or registered names) the recipe and the flags
    name, --teacher and --init. Only existence and form: reading a file's lines comes later."""
    face = _face(args)
    flags = {"time_budget": args.time_budget} if getattr(args, "time_budget", None) is not None else {}
    recipe = face.train_recipe(args.config, args.set, flags)  # the task's own start (classify: its adaptive base)
    data = getattr(recipe, "data", None)
    pairs = face.data_form == "pair"
    for option, value in (("--data", getattr(args, "data", None)), ("--valid", getattr(args, "valid", None)),
                          ("--test", getattr(args, "test", None))):
        for v in (value if isinstance(value, list) else [value] if value else []):
            for item in (v.split(",") if face.data_form == "list" else [v]):
                _check_source(option, item.strip(), pairs)
    if data is not None and not getattr(args, "data", None):
        for name in ([getattr(data, "dataset", None)] + list(getattr(data, "datasets", None) or [])):
            if name:
                _check_source("data.dataset", name, pairs)
    for field_name in ("valid_file", "test_file"):
        if data is not None and getattr(data, field_name, None) and not getattr(args, field_name[:-5], None):
            _check_source(f"data.{field_name}", getattr(data, field_name), pairs)
    teacher = getattr(args, "teacher", None)
    if teacher and not (Path(teacher) / "config.json").is_file():
        raise UserError(f"--teacher {teacher} is not a finished run folder (no config.json); nothing was removed")
    init = getattr(args, "init", None)
    from ..interop.zoo import entry

    if init and entry(init) is None and not Path(init).is_dir():
        raise UserError(f"--init {init}: no such folder (give a `pretrain mlm` run, 'minilm', 'e5' or a BERT folder); "
                        "nothing was removed")


def add_recipe_args(p) -> None:
    p.add_argument("--out", required=True, type=Path, help="run directory to create (or resume)")
    p.add_argument("--config", help="JSON recipe (see recipes/); overrides the defaults")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one option, e.g. --set train.lr=1e-3 --set model.encoder.n_layers=2")
    p.add_argument("--resume", action="store_true", help="continue the run in --out exactly where it stopped")
    p.add_argument("--overwrite", action="store_true",
                   help="train into a non-empty --out: delete the files of the run there (only files "
                        "scratchformer writes; anything else is kept)")
    p.set_defaults(claims_out=True)  # cli.main locks and checks --out (run_folder_guard)

