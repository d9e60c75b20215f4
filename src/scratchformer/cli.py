"""`scratchformer <verb> ...`: the command-line front door, thin over the Python API.

The verbs of every task are made from the registry of faces (tasks/faces.py): `train <task>` (or
the verb a face names, `pretrain mlm`) with the flags every train verb has and the task's own
(`face.cli.flags`), and `evaluate RUN`, which asks the run's face. The other verbs live in
`scratchformer.commands.<module>`, which exposes `register(cli: CLI)`. Errors meant for people
(`UserError`) print one line and exit 2.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from .errors import UserError

COMMAND_MODULES = [
    "scratchformer.commands.datasets",
    "scratchformer.commands.prepare",
    "scratchformer.commands.classify",
    "scratchformer.commands.embed",
    "scratchformer.commands.translate",
    "scratchformer.commands.lm",
    "scratchformer.commands.diagnostics",
    "scratchformer.commands.experiments",
    "scratchformer.commands.serve",
    "scratchformer.commands.check",
]


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line too: `error: ...` (exit 2), like a UserError."""

    json_errors = False  # `--json` on the command line: the error goes to stdout as JSON too

    def error(self, message: str):
        line = f"{message} (see `{self.prog} --help`)"
        if _Parser.json_errors:
            _json_error(line)
        self.exit(2, f"error: {line}\n")


def _json_error(message: str) -> None:
    """For a tool reading `--json` output: the error on stdout, one JSON line (stderr keeps its line)."""
    import json

    print(json.dumps({"error": message, "exit_code": 2}, ensure_ascii=False), flush=True)


class CLI:
    """What a command module registers into: top-level verbs; the task verbs (`train <task>`,
    `evaluate`) are made here from the faces."""

    def __init__(self) -> None:
        from .commands.common import COMPUTE_TYPES, add_recipe_args
        from .tasks.faces import faces

        self.parser = _Parser(
            prog="scratchformer", description="A Transformer toolkit written from scratch.")
        self.verbs = self.parser.add_subparsers(dest="verb", metavar="VERB", required=True)
        groups: dict[str, argparse._SubParsersAction] = {}  # `train`, `pretrain`: the verbs faces name
        for f in faces().values():
            if not f.cli:
                continue
            if f.cli.verb not in groups:
                names = [g.name for g in faces().values() if g.cli and g.cli.verb == f.cli.verb]
                group = self.verbs.add_parser(f.cli.verb, help=f"{f.cli.verb} a model: {f.cli.verb} {{{','.join(names)}}} ...")
                groups[f.cli.verb] = group.add_subparsers(dest="task", metavar="TASK", required=True)
            p = groups[f.cli.verb].add_parser(f.name, help=f.cli.help)
            f.cli.flags(p)
            add_recipe_args(p)
            p.set_defaults(func=f.cli.train)
        ev = self.verbs.add_parser("evaluate", help="evaluate a run directory on a split or a file")
        ev.add_argument("run_dir", type=Path)
        ev.add_argument("--split", default="test", choices=["train", "valid", "test"])
        ev.add_argument("--data", help="evaluate on this file instead of a split")
        ev.add_argument("--json", action="store_true", help="print metrics as JSON")
        ev.add_argument("--compute-type", choices=COMPUTE_TYPES, default=None,
                        help="what the evaluation computes in (see `predict --help`); default: the task's")
        for f in faces().values():
            if f.cli:
                f.cli.evaluate_flags(ev)
        ev.set_defaults(func=_evaluate)

    def verb(self, name: str, **kw) -> argparse.ArgumentParser:
        return self.verbs.add_parser(name, **kw)


def _evaluate(args) -> int:
    """`evaluate RUN`: the run's face evaluates it (a task without `evaluate` says why)."""
    from .tasks.faces import task_of

    read_run_task(args.run_dir)  # not a run folder: one line saying what to pass
    face = task_of(args.run_dir)
    if not face.cli:
        raise UserError(f"{args.run_dir} holds a {face.name!r} run, which `evaluate` does not know")
    _sort_needs_per_sentence(args, face)
    return face.cli.evaluate(args)


def _sort_needs_per_sentence(args, face) -> None:
    """`--sort` orders the table `--per-sentence` prints: alone it would order nothing, so it is
    one line rather than a silent no-op (or a table nobody asked for). A face that does not take
    `--per-sentence` refuses both flags itself, naming its task."""
    sort = getattr(args, "sort", None)
    if sort is None or getattr(args, "per_sentence", False):
        return
    probe = argparse.ArgumentParser(add_help=False)
    face.cli.evaluate_flags(probe)
    if "--per-sentence" in probe._option_string_actions:  # noqa: SLF001 - argparse has no public query
        raise UserError(f"--sort {sort} orders the per-sentence table, which only --per-sentence prints: add it "
                        f"(scratchformer evaluate {args.run_dir} --per-sentence --sort {sort}), or leave --sort out")


def read_run_task(run_dir: Path) -> str:
    import json

    cfg = Path(run_dir) / "config.json"
    if not cfg.exists():
        raise UserError(f"{run_dir} is not a run directory (no config.json); pass the --out of a training run")
    try:
        return json.loads(cfg.read_text(encoding="utf-8"))["task"]
    except (ValueError, KeyError):
        raise UserError(f"{cfg} is not a scratchformer run config (no 'task' field)") from None


def build_cli() -> CLI:
    cli = CLI()
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(cli)
    return cli


def main(argv: list[str] | None = None) -> int:
    cli = build_cli()
    _Parser.json_errors = "--json" in (sys.argv[1:] if argv is None else argv)
    args, extra = cli.parser.parse_known_args(argv)
    # argparse stops filling `texts` at the first flag: `predict RUN --json "a" "b"`
    if extra and isinstance(getattr(args, "texts", None), list) and not any(e.startswith("-") for e in extra):
        args.texts += extra
    elif extra:
        cli.parser.error(f"unrecognized arguments: {' '.join(extra)}")
    from .commands.common import run_folder_guard, under_torchrun
    from .fileio import disk_full, is_disk_full

    under_torchrun(args)
    try:
        with run_folder_guard(args):
            return args.func(args) or 0
    except UserError as e:
        if getattr(args, "json", False):
            _json_error(str(e))
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `scratchformer generate ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as e:  # the machine's doing, not ours: one line, no traceback
        where = e.filename or "a file"
        if is_disk_full(e):
            print(f"error: {disk_full(where, None)}", file=sys.stderr)
        elif e.filename is not None:
            print(f"error: {where}: {e.strerror or e}", file=sys.stderr)
        else:
            raise
        return 2


if __name__ == "__main__":
    sys.exit(main())
