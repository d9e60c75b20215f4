"""`sweep` (a grid of ordinary runs with mean ± std over seeds), `experiment` (a tutorial claim
put to the test, with a verdict), `params` (parameters per component, counted and closed form)."""
from __future__ import annotations

import sys
from pathlib import Path


def register(cli) -> None:
    from ..tasks.faces import having

    p = cli.verb("sweep", help="train every point of a grid x seeds; table, plots, resumable")
    p.add_argument("--task", default="classify", choices=having("sweep"))
    p.add_argument("--config", help="base recipe (JSON) of every run, as `train --config`")
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="one axis of the grid, e.g. --grid model.encoder.n_heads=2,4,8 (repeatable)")
    p.add_argument("--seeds", type=int, default=1, help="runs per grid point (train.seed = 0..N-1)")
    p.add_argument("--out", required=True, type=Path, help="sweep folder (rerun the same command to resume)")
    p.add_argument("--data", help="as `train --data`")
    p.add_argument("--valid", help="as `train --valid`")
    p.add_argument("--test", help="as `train --test`")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every run")
    p.add_argument("--time-budget", type=float, metavar="MIN",
                   help="wall-clock minutes per run (train.max_minutes): compare at equal time")
    p.add_argument("--in-process", action="store_true",
                   help="run every cell in this process (faster start; peak memory less exact)")
    p.add_argument("--retrain-changed", action="store_true",
                   help="retrain the cells of --out that were trained with other settings or data (else refused)")
    p.set_defaults(func=sweep_cmd)

    from ..experiments.programs import PROGRAMS
    from ..experiments.spec import available

    names = available() + sorted(PROGRAMS)
    p = cli.verb("experiment", help="test a tutorial claim: " + ", ".join(names))
    p.add_argument("name", help=f"one of: {', '.join(names)}; or the path of a spec .json")
    p.add_argument("--out", type=Path, help="experiment folder (rerun to resume; default runs/exp-NAME)")
    p.add_argument("--quick", action="store_true", help="tiny model, few steps, data subset (seconds; no evidence)")
    p.add_argument("--seeds", type=int, help="runs per grid point (default: the spec's)")
    p.add_argument("--data", metavar="NAME", help="a registered data set in place of the spec's, e.g. "
                   "thucnews-100k: the same claim at another size (the report names it)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="extra override for every run, after the spec's (e.g. train.epochs=1 on a slow machine)")
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="replace the values of one axis of the spec, e.g. a smaller grid")
    p.add_argument("--in-process", action="store_true", help="run every cell in this process")
    p.add_argument("--retrain-changed", action="store_true",
                   help="retrain the cells of --out that were trained with other settings or data (else refused)")
    p.add_argument("--model", metavar="FILE.py[:Name]",
                   help="yours-vs-ours only: your model file, trained beside ours (docs/your-model.md)")
    p.add_argument("--size", action="append", default=[], metavar="NAME=N",
                   help="yours-vs-ours only: a size of your model by your name (as `train --model --size`)")
    p.add_argument("--bugs", nargs="?", const="all", metavar="BUG,BUG",
                   help="copy-task only: also run the task with each planted bug (all, or a comma list)")
    p.set_defaults(func=experiment_cmd)

    p = cli.verb("params", help="parameters per component (embeddings, attention, FFN, norms, head) "
                                "with the closed form beside")
    p.add_argument("run_dir", nargs="?", type=Path, help="a run folder")
    p.add_argument("--config", type=Path, help="a recipe instead of a run (closed form only)")
    p.add_argument("--task", choices=having("params"), help="the recipe's task (default: its 'task' or classify)")
    p.set_defaults(func=params_cmd)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def sweep_cmd(args) -> int:
    from ..errors import UserError
    from ..experiments.grid import Axis, parse_grid_arg
    from ..experiments.runner import SweepSpec
    from ..experiments.sweep import sweep

    if not args.grid:
        raise UserError("give at least one --grid KEY=V1,V2 (with --seeds N for repeats)")
    parsed = [parse_grid_arg(g) for g in args.grid]
    keys = [k for k, _ in parsed]
    twice = next((k for k in keys if keys.count(k) > 1), None)
    if twice is not None:
        raise UserError(f"--grid {twice} is given twice; give all its values once, e.g. --grid {twice}=V1,V2,V3")
    short = [k.split(".")[-1] for k, _ in parsed]
    axes = [Axis.from_key(k, v, s if short.count(s) == 1 else k) for (k, v), s in zip(parsed, short)]
    spec = SweepSpec(task=args.task, out=args.out, axes=axes, seeds=args.seeds, config=args.config,
                     sets=args.set, data=args.data, valid=args.valid, test=args.test,
                     time_budget=args.time_budget, isolate=not args.in_process,
                     retrain_changed=args.retrain_changed)
    result = sweep(spec, _log)
    print((args.out / "results.md").read_text(encoding="utf-8"))
    for name, path in result.figures.items():
        print(f"{name}: {path}")
    return 0


def experiment_cmd(args) -> int:
    from ..errors import UserError
    from ..experiments.experiment import run_experiment
    from ..experiments.programs import program

    if args.out is None:  # the docs' convention (docs/claims.md), so that the first try runs as written
        args.out = Path("runs") / f"exp-{Path(args.name).stem}"
        _log(f"--out not given: writing into {args.out}/ (rerun the same command to resume)")
    run = program(args.name)
    if run is not None:  # an experiment written as a program (its own tiny models, no spec)
        options = {"bugs": args.bugs} if args.name == "copy-task" else {}
        if (args.model or args.size) and args.name != "yours-vs-ours":
            raise UserError("--model and --size are for the yours-vs-ours experiment (or `train classify|lm --model`)")
        if args.name == "transformer-vs-lstm":  # its runs are translation runs: a time budget and data sets
            options.update(_budget_options(args))
        elif args.name == "yours-vs-ours":
            options.update(_yours_options(args))
        elif args.set or args.grid or args.data:
            raise UserError(f"experiment {args.name} takes no --set/--grid/--data (it is not a sweep of train runs)")
        if args.bugs and args.name != "copy-task":
            raise UserError("--bugs is for the copy-task experiment only")
        seeds = args.seeds or (3 if args.name in ("copy-task", "transformer-vs-lstm", "yours-vs-ours") else 5)
        from ..train.runfolder import lock_run_folder

        with lock_run_folder(args.out, "experiment"):  # one experiment per --out, like a sweep's
            print(run(args.out, seeds=seeds, quick=args.quick, log=_log, **options))
        return 0
    if args.bugs:
        raise UserError("--bugs is for the copy-task experiment only")

    res = run_experiment(args.name, args.out, quick=args.quick, seeds=args.seeds,
                         isolate=False if args.in_process else None, sets=args.set, grid=args.grid, log=_log,
                         retrain_changed=args.retrain_changed, data=args.data)
    print(res.report)
    return 0


def _yours_options(args) -> dict:
    """yours-vs-ours: --model FILE.py, --data NAME (a registered classify or lm set), --set minutes=M."""
    from ..errors import UserError

    options: dict = {"model": args.model, "data": args.data or "thucnews", "sizes": args.size}
    for item in args.set:
        key, _, value = item.partition("=")
        try:
            if key not in ("minutes", "steps") or float(value) <= 0 or key == "steps" and not value.isdigit():
                raise ValueError
        except ValueError:
            raise UserError(f"--set {item}: yours-vs-ours takes --set minutes=M (wall-clock minutes per run, > 0) "
                            f"or --set steps=N (optimizer steps per run)") from None
        options[key] = float(value) if key == "minutes" else int(value)
    if args.grid:
        raise UserError("yours-vs-ours takes no --grid: its grid is your model and ours x seeds")
    return options


def _budget_options(args) -> dict:
    """`--set minutes=M` (wall-clock minutes per run) and `--data a,b` (which of its data sets)."""
    from ..errors import UserError
    from ..experiments.transformer_vs_lstm import DATA

    options: dict = {}
    for item in args.set:
        key, _, value = item.partition("=")
        try:
            if key != "minutes" or float(value) <= 0:
                raise ValueError
        except ValueError:
            raise UserError(f"--set {item}: transformer-vs-lstm takes --set minutes=M (minutes per run, > 0)") from None
        options["minutes"] = float(value)
    if args.grid:
        raise UserError("transformer-vs-lstm takes no --grid: its grid is the two models x its data sets")
    if args.data:
        datas = tuple(d.strip() for d in args.data.split(","))
        unknown = [d for d in datas if d not in DATA]
        if unknown:
            raise UserError(f"--data {args.data}: transformer-vs-lstm runs on {', '.join(DATA)}; got {', '.join(unknown)}")
        options["datas"] = datas
    return options


def params_cmd(args) -> int:
    from ..errors import UserError
    from ..experiments.params import format_params, params_table

    target = args.config or args.run_dir
    if target is None or (args.config and args.run_dir):
        raise UserError("give a run folder, or --config RECIPE.json (not both)")
    print(format_params(*params_table(target, args.task)))
    return 0
