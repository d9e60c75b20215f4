"""The registry of faces. A task's face is everything the house may ask of the task, declared
once in its package (`tasks/<task>/face.py`, a `Face` record of tasks/slots.py).

The rooms above `tasks/` (cli.py, commands, serve, diagnostics, experiments) never test a task's
name: they find a run's task with `task_of(run_dir)` (its config.json "task") or a verb's with
`face(name)`, and ask the face; every list of tasks they show (the `train` verbs, `--task`
choices, `evaluate`, `params`, `sweep`, `export --format`, `serve --backend`) is made from
`faces()`. So a new task is a new package with a `face.py`, one line in `_PACKAGES` below (or,
for a package outside scratchformer, one `register(FACE)` call), and nothing else changes; a new
export format is one entry of a face's `exports`.

    slot        what it is                                              who asks
    name        config.json "task"                                      everyone
    words       how a sentence names a model of the task ("a classifier")  serve's errors
    recipe      the recipe class (sections data / model / train)        train verbs, sweeps
    data_form   how --data names its files: "file", "pair" (SRC,TGT) or "list" (a,b,c)  the checks before --overwrite
    train       (recipe, out_dir, resume=False, log=print) -> summary   the task's train verb, Python users
    train_recipe (config, sets, flags) -> the recipe a train run starts from, before any data
                is read (the adaptive default of classify, for instance)  the checks before --overwrite
    load        (run_dir, **options) -> the inference object            Python users, serve, evaluate
    inspect     (run_dir) -> an Inspector (tasks/inspection.py)         attention, doctor, serve's page
    exports     format -> Export (run, files, parity, runtime, backend)  `export --format`, serve (`export_of`)
    cli         TaskCLI: `train <task>` flags and run, `evaluate` flags and run   cli.py
    params      (recipe dict) -> closed-form parameter count per component    `params`
    sweep       Sweep: data (and subsets) of a sweep, extra train arguments   `sweep`, `experiment`
    prepare     (config, sets, given, log) -> what was prepared         `prepare`
    noun        how "... runs" names its runs ("translation runs")      messages

Serve answers a task through its own table of backends, keyed by the face's name
(serve/backends.py): HTTP stays out of tasks/.

A slot a task cannot fill is filled with `Unavailable("why, and what to do instead")`: calling it
is a one-line UserError, and the registry test checks that every face fills every slot one way
or the other (tests/tasks/test_faces.py).
"""
from __future__ import annotations

from pathlib import Path

from ..errors import UserError
from .slots import DATA_FORMS, Export, Face, Sweep, TaskCLI, Unavailable, YoursVsOurs, add_flag  # noqa: F401  (the record, for callers)


# the task packages that declare a face (tasks/<package>/face.py holds FACE): the one list of tasks
_PACKAGES = ("classify", "translate", "lm", "mlm", "embed")
_faces: dict[str, Face] | None = None


def faces() -> dict[str, Face]:
    """Every task's face, by name (imported once, on first use), then the registered ones."""
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


def register(new: Face) -> Face:
    """Add a task's face from outside this package (a plugin, or a test's toy task): from then on
    the CLI, params, sweep, export and serve know it as they know ours. A name already taken is
    refused (a face is replaced by `unregister` first)."""
    if not isinstance(new, Face):
        raise TypeError(f"register takes a Face (tasks/slots.py), got {type(new).__name__}")
    known = faces()
    if new.name in known and known[new.name] is not new:
        raise UserError(f"a task named {new.name!r} is already registered")
    known[new.name] = new
    return new


def unregister(name: str) -> None:
    """Remove a face `register` added (the built-in tasks stay)."""
    if name in _PACKAGES:
        raise UserError(f"{name!r} is a built-in task; only registered faces can be removed")
    faces().pop(name, None)


def built_in(name: str) -> bool:
    """Whether task `name` is one of scratchformer's own (every process knows it), not one that
    `register` added to this process alone."""
    return name in _PACKAGES


def having(slot: str) -> list[str]:
    """The names of the tasks that fill `slot` (the choices a verb offers), in registry order."""
    return [name for name, f in faces().items() if getattr(f, slot)]


def export_formats() -> list[str]:
    """Every `export --format` some task has, in registry order."""
    return list(dict.fromkeys(fmt for f in faces().values() for fmt in f.exports))


def export_backends() -> list[str]:
    """Every engine an export runs under (`serve --backend`), in registry order."""
    return list(dict.fromkeys(e.backend for f in faces().values() for e in f.exports.values() if e.backend))


def exported_by(folder: str | Path) -> tuple[Face, str, Export]:
    """(face, format, Export) of an export folder, by its export.json "task" and "format"; an
    export this version cannot read is one line naming the folder."""
    import json

    folder = Path(folder)
    try:
        meta = json.loads((folder / "export.json").read_text(encoding="utf-8"))
        task, fmt = meta.get("task"), meta.get("format")
    except (OSError, ValueError, AttributeError):
        raise UserError(f"{folder}/export.json is not readable JSON; export the run again") from None
    known = faces()
    if task not in known:
        raise UserError(f"{folder} holds an export of a {task!r} run, which this version does not know "
                        f"(it knows {', '.join(known)})")
    f = known[task]
    if fmt not in f.exports:
        raise UserError(f"{folder} holds a {fmt!r} export of {f.words}, which this version does not know "
                        f"({f.noun} runs export to {', '.join(f.exports) or 'nothing'})")
    return f, fmt, f.exports[fmt]


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
    why_not = {name: e.refuses(run_dir) for name, e in face.exports.items()}  # this run's, not only its task's
    others: dict[tuple[str, ...], list[str]] = {}
    for f in faces().values():
        fmts = tuple(n for n in f.exports if f is not face or not why_not[n])
        if fmts and fmt not in f.exports:
            others.setdefault(fmts, []).append(f.noun)
    hints = [f"{' and '.join(nouns)} runs: --format {' or '.join(fmts)}" for fmts, nouns in others.items()]
    if face.exports and all(why_not.values()):  # its task has formats, and none takes this run
        hints.append(f"this run exports to no format: {'; '.join(dict.fromkeys(why_not.values()))}")
    raise UserError(f"{run_dir} holds a {face.name!r} run; --format {fmt} exports {' and '.join(able) or 'no'} runs "
                    f"({'; '.join(hints)})")
