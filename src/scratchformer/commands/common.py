"""Helpers shared by the command modules: recipes from --config and --set, text inputs."""
from __future__ import annotations

import argparse
import contextlib
import os
import json
import sys
from pathlib import Path
from typing import Iterator

from ..errors import UserError


def set_dotted(d: dict, key: str, raw: str) -> None:
    """`model.encoder.d_model=128` -> d["model"]["encoder"]["d_model"] = 128 (JSON value, or a
    plain string when the value is not JSON)."""
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    parts = key.split(".")
    node = d
    for i, part in enumerate(parts[:-1]):
        if not isinstance(node.get(part), dict):
            raise UserError(f"--set {key}: {'.'.join(parts[: i + 1])} is not a section of the config")
        node = node[part]
    if parts[-1] not in node:
        raise UserError(f"--set {key}: no option {parts[-1]!r} here; known: {', '.join(sorted(node))}")
    node[parts[-1]] = value


def load_recipe(cls, config: str | None, sets: list[str], base=None):
    """The default recipe (or `base`), then the --config file, then each --set, validated."""
    d = (base if base is not None else cls()).to_dict()
    if config:
        try:
            override = json.loads(Path(config).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UserError(f"config file {config} does not exist") from None
        except json.JSONDecodeError as e:
            raise UserError(f"{config}:{e.lineno}: not valid JSON ({e.msg})") from None
        merge(d, override, config)
    for item in sets or []:
        if "=" not in item:
            raise UserError(f"--set expects key=value, got {item!r}")
        key, raw = item.split("=", 1)
        set_dotted(d, key.strip(), raw.strip())
    return cls.from_dict(d)


def recipe_for_run(cls, args):
    """The recipe of a `train` verb: on --resume the saved config of the run directory is the
    base; then --config and --set (`load_recipe`); then --data/--valid/--test where the verb
    has them."""
    base = None
    if args.resume and (args.out / "config.json").exists():
        base = cls.load_json(args.out / "config.json")
    recipe = load_recipe(cls, args.config, args.set, base)
    data = recipe.data
    if getattr(args, "data", None) and hasattr(data, "dataset"):
        data.dataset = args.data
    for name in ("valid", "test"):
        if getattr(args, name, None):
            setattr(data, f"{name}_file", getattr(args, name))
    return recipe


def merge(base: dict, override: dict, where: str) -> None:
    for k, v in override.items():
        if k not in base:
            raise UserError(f"{where}: unknown option {k!r}; known: {', '.join(sorted(base))}")
        if isinstance(v, dict) and isinstance(base[k], dict) and k != "dataset_options":
            merge(base[k], v, f"{where}:{k}")
        else:
            base[k] = v


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


def positive_int(text: str) -> int:
    """An argparse type: a whole number >= 1 (`--top`, `--max-new-tokens`, ...)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {value}")
    return value


@contextlib.contextmanager
def run_folder_guard(args) -> Iterator[None]:
    """Held around a whole command by `cli.main`: a `train` verb (one that took
    `add_recipe_args`) locks its --out and claims it (empty, or --resume, or --overwrite: see
    train/runfolder.py); `evaluate` locks the run folder it writes its reports into. Under
    torchrun only rank 0 does this."""
    from ..train.runfolder import claim_run_folder, lock_run_folder

    if os.environ.get("RANK", "0") != "0":
        yield
        return
    if getattr(args, "claims_out", False):
        if args.resume:  # a missing --out: say so before the lock creates the folder
            claim_run_folder(args.out, args.resume, args.overwrite)
        with lock_run_folder(args.out, args.verb):
            claim_run_folder(args.out, args.resume, args.overwrite)
            yield
    elif getattr(args, "verb", None) == "evaluate" and Path(args.run_dir).is_dir():
        with lock_run_folder(args.run_dir, "evaluate"):
            yield
    else:
        yield


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
