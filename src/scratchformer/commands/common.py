"""Helpers shared by the command modules: recipes from --config and --set, text inputs."""
from __future__ import annotations

import json
import sys
from pathlib import Path

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
    """Texts from arguments, else from --file (one per line), else from stdin."""
    if texts:
        return texts
    if file:
        path = Path(file)
        if not path.exists():
            raise UserError(f"input file {file} does not exist")
        lines = path.read_text(encoding="utf-8").splitlines()
    elif not sys.stdin.isatty():
        lines = sys.stdin.read().splitlines()
    else:
        raise UserError("give texts as arguments, with --file, or on stdin")
    lines = [line for line in lines if line.strip()]
    if not lines:
        raise UserError("no non-empty input lines")
    return lines


def add_recipe_args(p) -> None:
    p.add_argument("--out", required=True, type=Path, help="run directory to create (or resume)")
    p.add_argument("--config", help="JSON recipe (see recipes/); overrides the defaults")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one option, e.g. --set train.lr=1e-3 --set model.encoder.n_layers=2")
    p.add_argument("--resume", action="store_true", help="continue the run in --out exactly where it stopped")
