"""`check FILE.py`: check a learner's own Transformer against ours and name the bug (thin over scratchformer.check)."""
from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

from ..errors import UserError


def default_lang() -> str:
    """From the locale (LC_ALL, LC_MESSAGES, LANG); Chinese when the locale says neither."""
    for var in ("LC_ALL", "LC_MESSAGES", "LANG"):
        v = os.environ.get(var, "")
        if v.lower().startswith("en"):
            return "en"
        if v.lower().startswith("zh"):
            return "zh"
    return "zh"


def parse_map(items: list[str] | None) -> dict:
    from ..check import KINDS

    out = {}
    for item in items or []:
        for pair in item.split(","):
            kind, _, name = pair.partition("=")
            kind, name = kind.strip(), name.strip()
            if not name or kind not in KINDS:
                raise UserError(f"--map {pair!r}: write KIND=Name with KIND one of {', '.join(KINDS)}")
            out[kind] = name
    return out


def positive(flag: str, value: float, unit: str) -> None:
    """A limit is a finite number above 0: -5, 0, nan and inf would each switch the limit off or stop at once."""
    if not math.isfinite(value) or value <= 0:
        raise UserError(f"{flag} {value}: give a finite number above 0 ({unit})")


def parse_sizes(items: list[str] | None) -> dict:
    out = {}
    for item in items or []:
        for pair in item.split(","):
            name, _, value = pair.partition("=")
            name, value = name.strip(), value.strip()
            if not name or not value.isdigit() or int(value) <= 0:
                raise UserError(f"--size {pair!r}: write NAME=NUMBER, e.g. --size d_model=64 or --size n_embd=64,n_head=4")
            out[name] = int(value)
    return out


def register(cli) -> None:
    p = cli.verb("check", help="check your own hand-written Transformer (FILE.py) against ours and name the bug")
    p.add_argument("file", type=Path, help="your Python file (it is loaded in a child process, never run as a script)")
    p.add_argument("--lang", choices=["zh", "en"], default=None, help="labels in this language (default: the locale; Chinese)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--mask-convention", choices=["keep", "pad", "lens"], default=None,
                   help="keep: 1/True = may attend; pad: 1/True = padding (Keras); lens: valid lengths (d2l). "
                        "Default: read from your mask function or code")
    p.add_argument("--map", action="append", metavar="KIND=Name",
                   help="what discovery cannot guess, e.g. --map attention=MyAttn,feed_forward=Block")
    p.add_argument("--size", action="append", metavar="NAME=N",
                   help="a size your code uses when the file does not fix it, e.g. --size d_model=64,heads=4 "
                        "(or your own names: n_embd, n_head, block_size, n_kv_heads)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds your code may run (default 60)")
    p.add_argument("--memory-mb", type=float, default=4096, help="memory your code may use (default 4096 MB)")
    p.add_argument("--train", action="store_true",
                   help="also train your encoder layer (or decoder-only block) beside ours (same weights, same batches, about a minute)")
    p.add_argument("--train-steps", type=int, default=300, help="--train: steps (default 300)")
    p.add_argument("--train-png", type=Path, default=Path("check_train.png"),
                   help="--train: the PNG with both loss curves (default ./check_train.png)")
    p.set_defaults(func=check)


def check(args) -> int:
    from ..check import check_file

    from ..check.child import not_a_python_file

    why = not_a_python_file(args.file, "en")
    if why:
        raise UserError(why.split(" / ")[0])
    lang = args.lang or default_lang()
    positive("--timeout", args.timeout, "seconds, e.g. --timeout 60")
    positive("--memory-mb", args.memory_mb, "megabytes, e.g. --memory-mb 4096")
    if args.train and args.train_steps < 10:
        raise UserError(f"--train-steps {args.train_steps}: give at least 10 steps")
    if args.train and args.train_png.suffix.lower() != ".png":
        raise UserError(f"--train-png {args.train_png}: give a .png path")
    if args.train:
        folder = args.train_png.resolve().parent
        try:  # asked now, not after a minute of training: a failed write would replace the verdict
            if not folder.is_dir():
                raise FileNotFoundError("no such folder")
            tempfile.TemporaryFile(dir=folder).close()
        except OSError as e:
            raise UserError(f"--train-png {args.train_png}: cannot write into {folder} ({e.strerror or e}); "
                            f"give a path you can write") from None
    timeout = args.timeout + (args.train_steps * 1.0 if args.train else 0)  # a step is ~0.05 s on an idle core
    report = check_file(args.file, lang=lang, mask_convention=args.mask_convention, mapping=parse_map(args.map),
                        sizes=parse_sizes(args.size),
                        timeout_s=timeout, memory_mb=max(1, int(args.memory_mb)),
                        train_steps=args.train_steps if args.train else 0,
                        train_png=args.train_png if args.train else None)
    print(report.to_json() if args.json else report.text(lang))
    return report.exit_code
