"""The record a task's face is (the registry that finds faces: tasks/faces.py): its slots, the
serve routes a face may name, and the two helpers faces are written with. Each task package's
`face.py` imports this module, and only the registry imports those: no circle."""
from __future__ import annotations

from dataclasses import dataclass, field
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
    # `prepare(config, sets, given, log) -> dict`: build the prepared (memory-mapped) data the
    # task's train would read, and say what was built (data/prepared.py; `scratchformer prepare`)
    prepare: Callable[..., Any] | Unavailable = Unavailable(
        "this task reads its data in memory: `scratchformer prepare` is for classify and lm")
    noun: str = ""  # how "... runs" names the task's runs ("translation runs"); default: its name

    def __post_init__(self):
        if not self.noun:
            object.__setattr__(self, "noun", self.name)


def recipe_from(cls) -> Callable[..., Any]:
    """The `train_recipe` slot of a task whose train run starts from its defaults."""

    def train_recipe(config: str | None, sets: list[str], flags: dict | None = None):
        from .runs import resolve_recipe

        return resolve_recipe(cls, config, sets, flags)

    return train_recipe
