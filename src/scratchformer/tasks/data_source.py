"""Where a task's examples come from: a registered data set or the user's own files."""
from __future__ import annotations

from pathlib import Path

from ..data.datasets import ClassificationData
from ..data.readers import read_labeled_file, seeded_split
from ..data.registry import DATASETS, load_dataset
from ..errors import UserError


def looks_like_path(name: str) -> bool:
    return Path(name).exists() or any(c in name for c in "/\\") or Path(name).suffix != ""


def user_splits(read, train_file: str, dc) -> tuple[list, list, list | None]:
    """train/valid/test from the user's files (`dc.valid_file`, `dc.test_file`); the splits
    not given come from the seeded rule: 80/10/10 of the training file, or 90/10 when only
    the test file is given."""
    train = read(train_file)
    valid = read(dc.valid_file) if dc.valid_file else None
    test = read(dc.test_file) if dc.test_file else None
    if valid is None and test is None:
        train, valid, test = seeded_split(train, 0, (0.8, 0.1, 0.1))
    elif valid is None:
        train, valid = seeded_split(train, 0, (0.9, 0.1))
    return train, valid, test


def load_run_recipe(run_dir: Path, recipe_cls, task: str, files: tuple[str, ...], what: str):
    """The recipe of a finished run directory, with one-line errors for missing files and for
    a run of another task."""
    for name in ("config.json",) + files:
        if not (run_dir / name).exists():
            raise UserError(f"{run_dir} is not a finished {what} run: {name} is missing")
    recipe = recipe_cls.load_json(run_dir / "config.json")
    if recipe.task != task:
        raise UserError(f"{run_dir} holds a {recipe.task!r} run, not a {what} run")
    return recipe


def load_classification(dc) -> ClassificationData:
    """`dc` is a `ClassifyDataConfig`: a registered name, or files with an optional split."""
    name = dc.dataset
    if name.lower().replace("_", "-") in DATASETS or not looks_like_path(name):
        data = load_dataset(name, **dc.dataset_options)
        if not isinstance(data, ClassificationData):
            raise UserError(f"dataset {name!r} is not a classification data set")
        return data
    if not Path(name).exists():
        raise UserError(f"training file {name} does not exist")
    train, valid, test = user_splits(lambda p: read_labeled_file(p, dc.text_col, dc.label_col), name, dc)
    labels = sorted({lab for _, lab in train})
    if len(labels) < 2:
        raise UserError(f"{name} has {len(labels)} distinct label(s); a classifier needs at least 2")
    for split_name, split, path in (("valid", valid, dc.valid_file), ("test", test, dc.test_file)):
        unknown = sorted({lab for _, lab in split or []} - set(labels))
        if unknown:
            raise UserError(f"{path or split_name} has labels not in the training data: {unknown[:5]}; "
                            "every label must occur in training")
    return ClassificationData(train, valid or [], test or [], labels,
                              {"name": Path(name).name, "source": str(name)})
