"""The registry of faces. A task's face is everything the house may ask of the task, declared
once in its package (`tasks/<task>/face.py`, a `Face` record of tasks/slots.py).

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
    exports     format -> Export                                        `export --format` (`export_of`)
    noun        how "... runs" names its runs ("translation runs")      messages
    routes      the HTTP routes a served run answers                   serve

A slot a task cannot fill is filled with `Unavailable("why, and what to do instead")`: calling it
is a one-line UserError, and the registry test checks that every face fills every slot one way
or the other (tests/tasks/test_faces.py).
"""
from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from .slots import DATA_FORMS, Export, Face, Unavailable  # noqa: F401  (the record, for callers of the registry)


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


def export_of(run_dir: str | Path, fmt: str) -> Export:
    """The export `fmt` of the run in `run_dir`; a format its task lacks is one line naming the
    tasks that have it and what the others export."""
    face = task_of(run_dir)
    if fmt in face.exports:
        return face.exports[fmt]
    able = [f.noun for f in faces().values() if fmt in f.exports]
    others: dict[tuple[str, ...], list[str]] = {}
    for f in faces().values():
        if f.exports and fmt not in f.exports:
            others.setdefault(tuple(f.exports), []).append(f.noun)
    elsewhere = "; ".join(f"{' and '.join(nouns)} runs: --format {' or '.join(fmts)}" for fmts, nouns in others.items())
    raise UserError(f"{run_dir} holds a {face.name!r} run; --format {fmt} exports {' and '.join(able) or 'no'} runs "
                    f"({elsewhere})")
