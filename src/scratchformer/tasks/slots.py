"""The record a task's face is (the registry that finds faces: tasks/faces.py): its slots and the
helpers faces are written with. Each task package's `face.py` imports this module, and only the
registry imports those: no circle. Nothing here knows HTTP: serve keeps its routes and its
backends by task name (serve/backends.py)."""
from __future__ import annotations

from pathlib import Path

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..errors import UserError

DATA_FORMS = ("file", "pair", "list")


@dataclass(frozen=True)
class Unavailable:
    """A slot a task does not fill, with the reason a person reads when it is asked for anyway."""

    reason: str

    def __call__(self, *args: Any, **kw: Any):
        raise UserError(self.reason)

    def __bool__(self) -> bool:
        return False


def _no_runtime(folder, **options):
    raise UserError(f"{folder} is an export that scratchformer does not run itself: load it with the library "
                    "it was written for (its README.md says how)")


@dataclass(frozen=True)
class Export:
    """One `export --format` of a task: `run(run_dir, out_dir, check=True) -> report`, the files
    the folder holds (for the "wrote DIR/ (...)" line), `parity(report)`: the lines that say how
    close the export is to our model (none when the check was skipped), and how the folder runs
    again: `runtime(folder) -> the task's inference object` (what `load` gives for a run, as far as
    the export answers: serve opens an export through it) under the engine named `backend` (the
    `serve --backend` word; "" for a format scratchformer does not run itself). `refuses(run_dir)`:
    why this format cannot export that run of its task, read from the run's config alone ("" when
    it can), so that a hint names only the formats that work for the run at hand."""

    run: Callable[..., Any]
    files: str
    parity: Callable[[Any], list[str]] = field(default=lambda report: [])
    runtime: Callable[..., Any] = _no_runtime
    backend: str = ""
    refuses: Callable[[Any], str] = field(default=lambda run_dir: "")


@dataclass(frozen=True)
class TaskCLI:
    """The task's own part of the command line. `verb` is the word before the task's name
    (`train lm`, `pretrain mlm`); the front door adds the flags every train verb has (--out,
    --config, --set, --resume, --overwrite), then `flags(parser)` adds the task's own, and
    `train(args) -> exit code` runs it. `evaluate_flags(parser)` adds the task's flags to the
    shared `evaluate` verb (skipping a flag another task already added: `add_flag`), and
    `evaluate(args) -> exit code` evaluates a run of the task."""

    help: str
    flags: Callable[[Any], None]
    train: Callable[[Any], int]
    evaluate_flags: Callable[[Any], None] = field(default=lambda parser: None)
    evaluate: Callable[[Any], int] | Unavailable = Unavailable("this task's runs are not evaluated by `evaluate`")
    verb: str = "train"


@dataclass(frozen=True)
class Sweep:
    """What `sweep --task` and the experiments need of a task beyond `train`: `data(name, subset,
    folder, write) -> (train flags {"data": ..., "valid": ...}, a few validation texts)`: a
    registered data set's flags, or (with `subset`, the first n rows per split, where `subsets`)
    files of those rows written into `folder` through `write(path, text)`; `argv`: extra `train` arguments of every
    run; `sets(config)`: `--set`s of every run before the sweep's own (`config`: the base recipe
    file or None)."""

    data: Callable[..., tuple[dict, list[str]]]
    subsets: bool = False  # whether `data` writes subsets (else a spec's "subset" is refused)
    argv: tuple[str, ...] = ()
    sets: Callable[[str | None], list[str]] = field(default=lambda config: [])


@dataclass(frozen=True)
class YoursVsOurs:
    """How `experiment yours-vs-ours` trains this task with the learner's network and ours (docs/your-model.md):
    `recipe(data, seed, minutes, steps, quick) -> dict`, the one recipe both train from (the network aside);
    `score(run_dir) -> float`, what is compared, named `score_name`, `lower_is_better` or not, in units of
    `unit` ("points": a share times 100), judged within `bar` of ours; `argv`, extra `train` flags; `metric`,
    the validation metric whose curve is drawn; `text`, whether its data file is a plain text."""
    recipe: Callable[..., dict]
    score: Callable[[Path], float]
    score_name: str
    lower_is_better: bool
    unit: str
    scale: float
    bar: float
    metric: str
    argv: tuple[str, ...] = ()
    text: bool = False  # its data file is a plain text (.txt), not a table of labelled rows


@dataclass(frozen=True)
class Face:
    name: str
    words: str
    recipe: type | Unavailable
    data_form: str
    train: Callable[..., Any]
    train_recipe: Callable[..., Any]
    load: Callable[..., Any]
    inspect: Callable[..., Any]
    exports: Mapping[str, Export]
    # the task's own command line (`train <task>` flags, `evaluate`); Unavailable: no train verb
    cli: TaskCLI | Unavailable = Unavailable("this task has no train verb")
    # `params(recipe: dict) -> {component: Term}` (models/param_terms.py): the closed-form count
    # of a run's config.json or a recipe, per component (`scratchformer params`)
    params: Callable[[dict], dict] | Unavailable = Unavailable(
        "this task has no closed-form parameter count; `scratchformer params RUN` still counts the run's tensors")
    sweep: Sweep | Unavailable = Unavailable("this task is not swept by `scratchformer sweep`")
    # `prepare(config, sets, given, log) -> dict`: build the prepared (memory-mapped) data the
    # task's train would read, and say what was built (data/prepared.py; `scratchformer prepare`)
    prepare: Callable[..., Any] | Unavailable = Unavailable(
        "this task reads its data in memory: `scratchformer prepare` is for classify and lm")
    noun: str = ""  # how "... runs" names the task's runs ("translation runs"); default: its name
    # `experiment yours-vs-ours`: the learner's own network beside ours on this task (YoursVsOurs)
    yours: YoursVsOurs | Unavailable = Unavailable(
        "this task does not train a learner's own network (--model): yours-vs-ours runs classify and lm")

    def __post_init__(self):
        if not self.noun:
            object.__setattr__(self, "noun", self.name)


def recipe_from(cls) -> Callable[..., Any]:
    """The `train_recipe` slot of a task whose train run starts from its defaults."""

    def train_recipe(config: str | None, sets: list[str], flags: dict | None = None):
        from .runs import resolve_recipe

        return resolve_recipe(cls, config, sets, flags)

    return train_recipe


def add_flag(parser, flag: str, **kw) -> None:
    """add_argument that skips a flag another task already put on a shared parser (`evaluate`)."""
    if flag not in parser._option_string_actions:  # noqa: SLF001 - argparse has no public query
        parser.add_argument(flag, **kw)
