"""What every task repeats, written once: the recipe base and its resolution, the run
directory, the ensemble driver, where data comes from, and evaluation mode.

A recipe goes through one path (`resolve_recipe`): defaults -> the saved recipe on `--resume`
-> `--config` -> `--set` (typed) -> command flags; the task's pipeline then adds the sizes it
derives from the data (vocabulary, classes) in one place and freezes it (`Recipe.resolved`).
The run directory keeps both: `recipe.json` as given, `config.json` as resolved (what the
inference API loads).
"""
from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from ..config import JsonConfig
from ..data.registry import DATASETS, DatasetInfo, get_dataset
from ..errors import UserError
from ..fileio import atomic_write_text, check_no_links, inside
from ..train.checkpoint_store import has_checkpoint
from ..train.runfolder import claim_run_folder
from ..train.run_files import read_train_status

CONFIG, GIVEN, LABELS, WEIGHTS, MEMBERS = "config.json", "recipe.json", "labels.json", "model.safetensors", "members.json"


# ----------------------------------------------------------------------------- recipes

@dataclass
class Recipe(JsonConfig):
    """Base of every task's recipe: `task` names the task; sections (`data`, `model`,
    `train`, ...) are the subclass's fields."""

    task: str = ""

    def resolved(self, derive: Callable[["Recipe"], None] | None = None) -> "Recipe":
        """A frozen copy, after `derive(copy)` filled in what comes from the data."""
        out = self.copy()
        if derive is not None:
            derive(out)
        return type(out).from_dict(out.to_dict()).freeze()  # re-validated with the derived sizes


def check_ensemble(n: Any, auto: bool = False) -> None:
    """`auto`: 0 is allowed too (the task chooses the number of members)."""
    low = 0 if auto else 1
    if isinstance(n, bool) or not isinstance(n, int) or n < low:
        raise UserError(f"ensemble must be a whole number >= {low}, got {n!r}"
                        + (" (0: as many members as the time budget fits)" if auto else ""))


def check_batching(batch_size: Any, max_tokens: Any, min_len: int = 1) -> None:
    """data.batch_size and data.max_tokens: None (where the other one rules) or a whole number
    >= 1 (a batch of 0 examples or a budget of 0 tokens would loop forever or divide by zero)."""
    for name, v in (("batch_size", batch_size), ("max_tokens", max_tokens)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < min_len):
            raise UserError(f"data.{name} must be a whole number >= {min_len} (or null), got {v!r}")


TOKENIZER_KINDS = ("char", "word", "bpe", "wordpiece")


def check_tokenizer(name: str, kind: Any, auto: bool = True) -> None:
    """A tokenizer kind of a recipe, checked when the recipe is resolved (not deep in training)."""
    kinds = TOKENIZER_KINDS + (("auto",) if auto else ())
    if kind not in kinds:
        raise UserError(f"{name} must be one of {', '.join(kinds)}, got {kind!r}")


def check_minutes(name: str, v: Any) -> None:
    """A time budget in minutes: None, or a finite number > 0 (inf, nan and negatives refused)."""
    if v is None:
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 < v < float("inf")):
        raise UserError(f"{name} must be a finite number of minutes > 0 (or null), got {v!r}")


SPEC_KEYS = {"claim", "checks", "grid"}  # what only an experiment spec holds
RECIPE_KEYS = {"data", "model", "train"}  # a recipe's sections


def json_kind(d: Any) -> str | None:
    """"experiment spec", "recipe" or "run config" for a loaded JSON object, when its keys say so."""
    if not isinstance(d, dict):
        return None
    if SPEC_KEYS <= set(d):
        return "experiment spec"
    if "task" in d and RECIPE_KEYS <= set(d):
        return "run config"
    if set(d) & RECIPE_KEYS and not set(d) & SPEC_KEYS:
        return "recipe"
    return None


def refuse_wrong_kind(d: Any, path: str | Path, want: str) -> None:
    """One line when `d` (loaded from `path`) is another kind of file than `want` ("recipe" or
    "experiment spec"), naming the verb that takes it, before its keys are read one by one."""
    kind = json_kind(d)
    if want == "recipe" and kind == "experiment spec":
        raise UserError(f"{path} is an experiment spec (it has a claim, a grid and checks), not a recipe: run it "
                        f"with `scratchformer experiment {path}`; --config takes a recipe (sections data, model, train)")
    if want == "experiment spec" and kind in ("recipe", "run config"):
        raise UserError(f"{path} is a {kind}, not an experiment spec: train it with `scratchformer train TASK "
                        f"--config {path}`, or sweep it with `scratchformer sweep --config {path} --grid ...`")


def resolve_recipe(cls: type[Recipe], config: str | None = None, sets: list[str] = (),
                   flags: dict[str, Any] | None = None, base: Recipe | None = None) -> Recipe:
    """defaults (or `base`) -> `config` file -> `sets` ("key=value", typed) -> `flags`
    (dotted key -> Python value, e.g. {"data.dataset": "my.tsv"}; None values are skipped)."""
    recipe = base.copy() if base is not None else cls()
    if config:
        try:
            override = json.loads(Path(config).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UserError(f"config file {config} does not exist") from None
        except json.JSONDecodeError as e:
            raise UserError(f"{config}:{e.lineno}: not valid JSON ({e.msg})") from None
        refuse_wrong_kind(override, config, "recipe")
        d = recipe.to_dict()
        _merge(d, override, config, cls)
        recipe = cls.from_dict(d)
    for item in sets or ():
        if "=" not in item:
            raise UserError(f"--set expects key=value, got {item!r}")
        key, raw = item.split("=", 1)
        recipe.set_path(key.strip(), raw)
    for key, value in (flags or {}).items():
        if value is not None:
            recipe.set_value(key, value)
    return cls.from_dict(recipe.to_dict())  # one last validation of the whole


def _merge(base: dict, override: dict, where: str, cls) -> None:
    if not isinstance(override, dict):
        raise UserError(f"{where}: expected a JSON object of recipe sections")
    hints = cls.hints() if isinstance(cls, type) and issubclass(cls, JsonConfig) else {}
    for k, v in override.items():
        k = cls.RENAMED.get(k, k) if hints else k
        if k not in base:
            raise UserError(f"{where}: unknown option {k!r}; known: {', '.join(sorted(base))}")
        sub = hints.get(k)
        sub = next((a for a in getattr(sub, "__args__", (sub,)) if isinstance(a, type) and issubclass(a, JsonConfig)), None)
        if isinstance(v, dict) and isinstance(base[k], dict) and sub is not None:
            _merge(base[k], v, f"{where}:{k}", sub)
        else:
            base[k] = v


# ----------------------------------------------------------------------------- run directory

class RunDir:
    """A run directory: the files a task writes and the inference API reads back."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __truediv__(self, name: str) -> Path:
        return self.path / name

    def save_recipe(self, recipe: Recipe, given: Recipe | None = None) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        recipe.save_json(self.path / CONFIG)
        if given is not None:
            given.save_json(self.path / GIVEN)

    def task_name(self) -> str:
        cfg = self.path / CONFIG
        if not cfg.is_file():
            raise UserError(f"{self.path} is not a run directory (no {CONFIG}); pass the --out of a training run")
        try:
            return json.loads(cfg.read_text(encoding="utf-8"))["task"]
        except (ValueError, KeyError, TypeError):  # ValueError covers JSON and UTF-8 errors
            raise UserError(f"{cfg} is not a scratchformer run config (no 'task' field, or not JSON)") from None

    def load_recipe(self, cls: type[Recipe], task: str, files: tuple[str, ...], what: str) -> Recipe:
        """The resolved recipe of a finished run, with one-line errors for missing files and
        for a run of another task."""
        found = self.task_name()  # first: a run of another task says so, whatever it lacks
        if found != task:
            raise UserError(f"{self.path} holds a {found!r} run, not a {what} run")
        require_finished(self.path)
        for name in files:
            if not (self.path / name).exists():
                raise UserError(f"{self.path} is not a finished {what} run: {name} is missing")
        return cls.load_json(self.path / CONFIG).freeze()

    def save_labels(self, labels: list[str]) -> None:
        atomic_write_text(self.path / LABELS, json.dumps(labels, ensure_ascii=False, indent=1))

    def load_labels(self) -> list[str]:
        try:
            labels = json.loads((self.path / LABELS).read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise UserError(f"{self.path / LABELS} is corrupt ({type(e).__name__}); retrain or restore it") from None
        if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
            raise UserError(f"{self.path / LABELS} must be a JSON list of label strings")
        from ..data.readers import check_label

        for i, label in enumerate(labels, 1):
            check_label(label, f"{self.path / LABELS}, label {i}")
        return labels

    # ensembles: member<i>/ are ordinary runs, listed in members.json
    @property
    def is_ensemble(self) -> bool:
        return (self.path / MEMBERS).exists() and (self.path / CONFIG).exists()

    def member(self, i: int) -> "RunDir":
        return RunDir(self.path / f"member{i}")

    def members_done(self) -> list[dict[str, Any]]:
        """The finished members, from members.json (written atomically, so a cut-off file was
        damaged after the fact: a one-line error, not a guess at which members finished)."""
        f = self.path / MEMBERS
        if not f.exists():
            return []
        try:
            done = json.loads(f.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise UserError(f"{f} is corrupt ({type(e).__name__}): it lists the finished ensemble members; "
                            "restore it, or train the ensemble again with --overwrite") from None
        if not isinstance(done, list) or not all(isinstance(m, dict) and isinstance(m.get("dir"), str) for m in done):
            raise UserError(f"{f} must be a JSON list of members ({{\"dir\": \"member0\", ...}}); "
                            "restore it, or train the ensemble again with --overwrite")
        for m in done:
            inside(self.path, m["dir"], f"{f}: member")
        return done

    def record_members(self, done: list[dict[str, Any]]) -> None:
        atomic_write_text(self.path / MEMBERS, json.dumps(done, indent=1) + "\n")


def _planned_members(run: Path) -> int:
    """How many members the run's config.json plans (1: not an ensemble)."""
    try:
        n = json.loads((run / CONFIG).read_text(encoding="utf-8")).get("ensemble", 1)
    except (OSError, ValueError, AttributeError):
        return 1  # the loader that reads config.json next says what is wrong with it
    return n if isinstance(n, int) and not isinstance(n, bool) else 1


def require_finished(run_dir: str | Path) -> None:
    """Refuse (one line that says `--resume` finishes it) a run whose training did not end:
    the Trainer's `train_status.json` says it has not finished (a kill, a crash, a diverged
    run), or an ensemble lists fewer finished members in members.json than config.json plans
    (killed while a member trained), or one of its members is unfinished. Every way into a
    trained run (predict, evaluate, translate, generate, serve, the Python loaders) calls it.
    A run of a version that wrote no `train_status.json` counts as finished."""
    run = Path(run_dir)
    try:
        task = json.loads((run / CONFIG).read_text(encoding="utf-8")).get("task") or "TASK"
    except (OSError, ValueError, AttributeError):
        task = "TASK"
    hint = f"`scratchformer train {task} ... --out {run} --resume` finishes it"
    planned = _planned_members(run)
    if planned > 1 or (run / MEMBERS).exists():
        members = run / MEMBERS
        try:
            done = json.loads(members.read_text(encoding="utf-8")) if members.exists() else []
        except (OSError, ValueError):
            raise UserError(f"{members} is damaged (not JSON); {hint}, or restore the file") from None
        if not isinstance(done, list):
            raise UserError(f"{members} is not a list of members; {hint}, or restore the file")
        if len(done) < planned:
            raise UserError(f"{run} is an unfinished ensemble: {len(done)} of its {planned} members "
                            f"finished training; {hint}")
        for i in range(planned):
            _require_trained(run / f"member{i}", hint)
        return
    _require_trained(run, hint)


def _require_trained(run: Path, hint: str) -> None:
    status = read_train_status(run)
    if status is not None and not status.get("finished"):
        raise UserError(f"{run} is an unfinished run: its training did not end; {hint}")


def one_process_ensemble(members: int) -> None:
    """An ensemble trains its members one after another in one process: under torchrun (where
    rank 0 alone writes the run folder) a one-line refusal, before anything is read or written."""
    from ..train.distributed import world_size

    if world_size() > 1:
        raise UserError(f"an ensemble ({members} members) trains its members one after another in one "
                        "process; under torchrun train one run (--set ensemble=1) or launch one job per member")


def train_members(recipe: Recipe, out_dir: Path, resume: bool, train_one: Callable[..., dict],
                  summarize: Callable[[dict], dict[str, Any]], log=print,
                  another: Callable[[list], bool] | None = None) -> list[dict[str, Any]]:
    """The ensemble driver: `recipe.ensemble` ordinary runs in `out_dir/member<i>` with seeds
    `train.seed + i`, listed in `members.json`; `train_one(member_recipe, member_dir,
    resume=..., log=...)` trains one run and `summarize(result)` gives what members.json keeps.
    With `resume`, finished members are kept and an interrupted one continues. The task's
    loader combines the members at prediction time. `another(done)`, asked when the planned
    members are done: True adds one more (`recipe.ensemble` grows, saved before it trains)."""
    one_process_ensemble(recipe.ensemble)
    run = RunDir(out_dir)
    done = run.members_done() if resume else []  # first: a damaged members.json changes nothing
    run.save_recipe(recipe)  # the whole recipe, so that --resume finds it

    def grow() -> bool:
        recipe.ensemble += 1
        run.save_recipe(recipe)  # before the member trains: a --resume knows it was planned
        return True

    i = len(done)
    while i < recipe.ensemble or (another is not None and another(done) and grow()):
        member = recipe.copy()
        member.ensemble, member.train.seed = 1, recipe.train.seed + i
        mdir = check_no_links(run.member(i).path, root=out_dir)  # a member linked to another run: refused
        log(f"ensemble member {i + 1}/{recipe.ensemble} (seed {member.train.seed}) -> {mdir}")
        again = resume and has_checkpoint(mdir)
        if again:  # its own saved recipe holds what it derived from the data (vocabulary, classes)
            member = type(recipe).load_json(mdir / CONFIG)
        elif mdir.exists():  # an earlier attempt that never saved a checkpoint: start over
            claim_run_folder(mdir, resume=False, overwrite=True)
        result = train_one(member, mdir, resume=again, log=log)
        done.append({"dir": mdir.name, "seed": member.train.seed, **summarize(result)})
        run.record_members(done)
        i += 1
    return done


# ----------------------------------------------------------------------------- data source

def looks_like_path(name: str) -> bool:
    return Path(name).exists() or any(c in name for c in "/\\") or Path(name).suffix != ""


def registered(name: str, path_hint: bool = False) -> DatasetInfo | None:
    """The registered data set `name` names, or None when `name` is the user's file. A name
    that is neither a registered data set nor looks like a path raises "unknown dataset ...
    did you mean" (from the registry)."""
    if name.strip().lower().replace("_", "-") in DATASETS or not (looks_like_path(name) or path_hint):
        return get_dataset(name)
    return None


def user_splits(read, train_file: str, dc) -> tuple[list, list, list | None]:
    """train/valid/test from the user's files (`dc.valid_file`, `dc.test_file`); the splits
    not given come from the seeded rule: 80/10/10 of the training file, or 90/10 when only
    the test file is given."""
    from ..data.readers import seeded_split

    train = read(train_file)
    valid = read(dc.valid_file) if dc.valid_file else None
    test = read(dc.test_file) if dc.test_file else None
    if valid is None and test is None:
        train, valid, test = seeded_split(train, 0, (0.8, 0.1, 0.1))
    elif valid is None:
        train, valid = seeded_split(train, 0, (0.9, 0.1))
    return train, valid, test


def split_of(data: Any, split: str, run_dir: str | Path, verb: str | None = None) -> list:
    """The `split` part of a run's loaded data, or one line saying it has none and how to give
    one (a run trained with `--valid FILE` and no `--test` has no test split: `data.test` is
    empty, and the reports below it would fail on nothing to concatenate)."""
    pairs = getattr(data, split, None)
    if not pairs:
        others = [s for s in ("valid", "test") if s != split and getattr(data, s, None)]
        alt = f", or `--split {others[0]}`" if others else ""
        given = " (it was trained with --valid and no --test)" if split == "test" else ""
        how = f"{verb} {run_dir} --data FILE" if verb else "--data FILE"
        raise UserError(f"{run_dir} has no {split} split{given}: give a file of the training data's form "
                        f"with `{how}`{alt}; a new run takes one with `--test FILE`")
    return pairs


def same_source(a: Any, b: Any) -> bool:
    """Whether two data settings name the same thing: the same file by identity, not by spelling
    (`./data/x.tsv` is `data/x.tsv`, and a link is its target), else equal values."""
    if a == b:
        return True
    if isinstance(a, str) and isinstance(b, str) and a and b:
        try:
            return os.path.samefile(a, b)
        except OSError:  # one of them is not a file here: a registered name, or gone
            return os.path.normpath(a) == os.path.normpath(b)
    return False


def file_report_name(path: str | Path) -> str:
    """The report name of `evaluate --data FILE`: `file_<stem>`, never a split's own name (a file
    called test.tsv would otherwise replace the training-time test report, which belongs to the
    run's own test split)."""
    return f"file_{Path(str(path).split(',')[0]).stem}"


# ----------------------------------------------------------------------------- evaluation

@contextlib.contextmanager
def eval_mode(model: torch.nn.Module) -> Iterator[torch.nn.Module]:
    """`model.eval()` and no gradients inside; the previous mode is restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was_training)


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
