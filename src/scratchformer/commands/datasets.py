"""`scratchformer datasets`: the built-in data sets, their sources and cache state."""
from __future__ import annotations


def register(cli) -> None:
    p = cli.verb("datasets", help="list the built-in data sets (source, size, cached?)")
    p.add_argument("--fetch", metavar="NAME", help="fetch and cache one data set now")
    p.set_defaults(func=run)


def run(args) -> int:
    from ..data.registry import format_table, load_dataset

    if args.fetch:
        load_dataset(args.fetch)
    print(format_table())
    return 0
