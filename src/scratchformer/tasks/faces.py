"""The face of a task: everything the house may ask of a task, declared once in its package.

The rooms above `tasks/` (commands, serve, diagnostics, experiments) never test a task's name:
they find a run's task with `task_of(run_dir)` (its config.json "task") or a verb's with
`face(name)`, and ask the face. So a new task is a new package with a `face.py`, one line in
`_PACKAGES` below, and nothing else changes; a new export format is one entry of a face's
`exports`.

    slot        what it is                                              who asks
    name        config.json "task"                                      everyone
    words       how a sentence names a model of the task ("a classifier")  serve's errors
    recipe      the recipe class (sections data / model / train)        train verbs, sweeps
    data_form   how --data names its files: "file", "pair" (SRC,TGT) or "list" (a,b,c)  the checks before --overwrite
    train       (recipe, out_dir, resume=False, log=print) -> summary   train verbs
    train_recipe (config, sets, flags) -> the recipe a train run starts from, before any data
                is read (the adaptive default of classify, for instance)  the checks before --overwrite
    load        (run_dir, **options) -> the inference object            Python users, serve, evaluate
    inspect     (run_dir) -> an Inspector (tasks/inspection.py)         attention, doctor, serve's page
    exports     format -> Export                                        `export --format`
    noun        how "... runs" names its runs ("translation runs")      messages
    routes      the HTTP routes a served run answers                   serve

A slot a task cannot fill is filled with `Unavailable("why, and what to do instead")`: calling it
is a one-line UserError, and the registry test checks that every face fills every slot one way
or the other (tests/tasks/test_faces.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ..errors import UserError

# the serve routes (the same strings serve/backends.py answers; tests/tasks/test_faces.py checks)
CLASSIFY, TRANSLATE, EMBEDDINGS, COMPLETIONS = "/v1/classify", "/v1/translate", "/v1/embeddings", "/v1/completions"
DATA_FORMS = ("file", "pair", "list")


@dataclass(frozen=True)
class Unavailable:
    """A slot a task does not fill, with the reason a person reads when it is asked for anyway."""

    reason: str

    def __call__(self, *args: Any, **kw: Any):
        raise UserError(self.reason)

    def __bool__(self) -> bool:
        return False


@dataclass(frozen=True)
class Export:
    """One `export --format` of a task: `run(run_dir, out_dir, check=True) -> report`, the files
    the folder holds (for the "wrote DIR/ (...)" line) and `parity(report)`: the lines that say how
    close the export is to our model (none when the check was skipped)."""

    run: Callable[..., Any]
    files: str
    parity: Callable[[Any], list[str]] = field(default=lambda report: [])


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
    routes: tuple[str, ...]
    noun: str = ""  # how "... runs" names the task's runs ("translation runs"); default: its name

    def __post_init__(self):
        if not self.noun:
            object.__setattr__(self, "noun", self.name)

    def export(self, fmt: str, run_dir: str | Path) -> Export:
        """The export `fmt` of this task; a format the task lacks is one line naming the tasks
        that have it and what the others export."""
        if fmt in self.exports:
            return self.exports[fmt]
        able = [f.noun for f in faces().values() if fmt in f.exports]
        others: dict[tuple[str, ...], list[str]] = {}
        for f in faces().values():
            if f.exports and fmt not in f.exports:
                others.setdefault(tuple(f.exports), []).append(f.noun)
        elsewhere = "; ".join(f"{' and '.join(nouns)} runs: --format {' or '.join(fmts)}"
                              for fmts, nouns in others.items())
        raise UserError(f"{run_dir} holds a {self.name!r} run; --format {fmt} exports "
                        f"{' and '.join(able) or 'no'} runs ({elsewhere})")


def recipe_from(cls) -> Callable[..., Any]:
    """The `train_recipe` slot of a task whose train run starts from its defaults."""

    def train_recipe(config: str | None, sets: list[str], flags: dict | None = None):
        from .runs import resolve_recipe

        return resolve_recipe(cls, config, sets, flags)

    return train_recipe


# the task packages that declare a face (tasks/<package>/face.py holds FACE): the one list of tasks
_PACKAGES = ("classify", "translate", "lm", "mlm", "embed")
_faces: dict[str, Face] | None = None


def faces() -> dict[str, Face]:
    """Every task's face, by name (imported once, on first use)."""
    global _faces
    if _faces is None:
        from .classify.face import FACE as classify
        from .embed.face import FACE as embed
        from .lm.face import FACE as lm
        from .mlm.face import FACE as mlm
        from .translate.face import FACE as translate

        found = (classify, translate, lm, mlm, embed)
        assert tuple(f.name for f in found) == _PACKAGES, "a face is named after its package"
        _faces = {f.name: f for f in found}
    return _faces


def face(name: str) -> Face:
    """The face of the task `name` (a run's config.json "task", or a verb's task word)."""
    known = faces()
    if name not in known:
        raise UserError(f"no task is named {name!r}; the tasks are {', '.join(known)}")
    return known[name]


def task_of(run_dir: str | Path) -> Face:
    """The face of the run in `run_dir`, by its config.json "task"; a task no face declares is
    a one-line error naming the run."""
    from .runs import RunDir

    name = RunDir(Path(run_dir)).task_name()
    known = faces()
    if name not in known:
        raise UserError(f"{run_dir} holds a {name!r} run, which this version does not know "
                        f"(it knows {', '.join(known)} runs)")
    return known[name]


def words(name: str) -> str:
    """How a sentence names a model of task `name` ("a classifier"); an unknown name as itself."""
    known = faces()
    return known[name].words if name in known else name
