"""A run folder never reaches outside itself: every write and delete of `scratchformer.fileio`
refuses a link (symbolic, dangling or not, or a second hard link where a file is changed in
place) with one line naming it, and leaves the file outside byte for byte as it was; names made
from user data stay one plain name below their folder. The commands' own cases (a linked report,
metrics.jsonl, .lock, checkpoints/, member, baseline/, doctor and attention output) are rows of
the bad-input table (test_bad_inputs.py); these are the helper's rules, the trainer's, and the
sweeps' and experiments' folders."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from train_toy import ToyTask, batch_fn, make_data

from scratchformer import fileio
from scratchformer.cli import main
from scratchformer.errors import UserError
from scratchformer.fileio import LinkRefused
from scratchformer.tasks.runs import RunDir
from scratchformer.train import TrainConfig, Trainer
from scratchformer.train.runfolder import clear_project_files, lock_run_folder

OUTSIDE = b"outside the run folder\n"


@pytest.fixture
def place(tmp_path):
    """A run folder `run/` and, beside it, `outside.txt` and a folder `elsewhere/` holding a file."""
    (tmp_path / "run").mkdir()
    (tmp_path / "outside.txt").write_bytes(OUTSIDE)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "theirs.txt").write_bytes(OUTSIDE)
    return tmp_path


def _outside_untouched(place: Path) -> None:
    assert (place / "outside.txt").read_bytes() == OUTSIDE
    assert sorted(p.name for p in (place / "elsewhere").iterdir()) == ["theirs.txt"]
    assert (place / "elsewhere" / "theirs.txt").read_bytes() == OUTSIDE


def _one_line_naming(e: pytest.ExceptionInfo, link: Path, what: str = "is a symbolic link") -> None:
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{link} {what}"), msg


# ---------------------------------------------------------------------------- the helper's writes
WRITERS = {
    "atomic_write_bytes": lambda p, root: fileio.atomic_write_bytes(p, b"new", root=root),
    "atomic_write_text": lambda p, root: fileio.atomic_write_text(p, "new", root=root),
    "append_text": lambda p, root: fileio.append_text(p, "new\n", root=root),
    "write_synced": lambda p, root: fileio.write_synced(p, b"new", root=root),
    "open_append": lambda p, root: fileio.open_append(p, root=root).close(),
    "remove": lambda p, root: fileio.remove(p, root=root),
}


@pytest.mark.parametrize("kind", ["to a file", "dangling"])
@pytest.mark.parametrize("writer", list(WRITERS))
def test_no_write_or_delete_follows_a_link_at_the_file(place, writer, kind):
    link = place / "run" / "metrics.jsonl"
    target = place / ("outside.txt" if kind == "to a file" else "missing.txt")
    link.symlink_to(target)
    with pytest.raises(LinkRefused) as e:
        WRITERS[writer](link, None)
    _one_line_naming(e, link)
    assert link.is_symlink() and os.readlink(link) == str(target)  # the link itself stays too
    assert not (place / "missing.txt").exists()
    _outside_untouched(place)


@pytest.mark.parametrize("writer", list(WRITERS) + ["make_dirs", "save_figure"])
def test_no_write_follows_a_linked_folder_on_the_way(place, writer):
    (place / "run" / "checkpoints").symlink_to(place / "elsewhere")
    path = place / "run" / "checkpoints" / "theirs.txt"
    with pytest.raises(LinkRefused) as e:
        if writer == "make_dirs":
            fileio.make_dirs(path, root=place / "run")
        elif writer == "save_figure":
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt

            fig = plt.figure(figsize=(1, 1))
            try:
                fileio.save_figure(fig, place / "run" / "checkpoints" / "curves.png", root=place / "run")
            finally:
                plt.close(fig)
        else:
            WRITERS[writer](path, place / "run")
    _one_line_naming(e, place / "run" / "checkpoints")
    _outside_untouched(place)
    assert not (place / "elsewhere" / "curves.png").exists()


def test_the_confined_folder_of_a_lock_is_the_root_of_every_write_inside(place):
    """Under `lock_run_folder` (what every command holds) no root= is needed: the walk starts at
    the run folder, so an ensemble member that is a link is refused like any other link."""
    (place / "run" / "member1").symlink_to(place / "elsewhere")
    with lock_run_folder(place / "run"):
        with pytest.raises(LinkRefused) as e:
            fileio.atomic_write_text(place / "run" / "member1" / "theirs.txt", "new")
        _one_line_naming(e, place / "run" / "member1")
        with pytest.raises(LinkRefused):
            with lock_run_folder(place / "run" / "member1"):  # the Trainer of that member
                pass
    _outside_untouched(place)


def test_a_hard_link_is_not_appended_to(place):
    os.link(place / "outside.txt", place / "run" / "metrics.jsonl")
    with pytest.raises(LinkRefused) as e:
        fileio.append_text(place / "run" / "metrics.jsonl", "new\n")
    _one_line_naming(e, place / "run" / "metrics.jsonl", "has another hard link")
    _outside_untouched(place)


def test_an_atomic_write_replaces_a_hard_link_without_changing_the_other_name(place):
    os.link(place / "outside.txt", place / "run" / "config.json")
    fileio.atomic_write_text(place / "run" / "config.json", "{}")
    assert (place / "run" / "config.json").read_text() == "{}"
    _outside_untouched(place)


def test_a_folder_is_removed_without_following_the_links_inside(place):
    d = place / "run" / "checkpoints" / "step-00000001"
    d.mkdir(parents=True)
    (d / "weights.safetensors").write_bytes(b"w")
    (d / "state.pt").symlink_to(place / "outside.txt")
    (d / "more").symlink_to(place / "elsewhere")
    assert fileio.remove(place / "run" / "checkpoints", root=place / "run")
    assert not (place / "run" / "checkpoints").exists()
    _outside_untouched(place)


def test_a_write_leaves_nothing_behind_and_needs_no_temp_name_outside(place):
    fileio.atomic_write_bytes(place / "run" / "deep" / "er" / "x.bin", b"abc", root=place / "run")
    assert (place / "run" / "deep" / "er" / "x.bin").read_bytes() == b"abc"
    assert sorted(p.name for p in (place / "run" / "deep" / "er").iterdir()) == ["x.bin"]
    assert (place / "run" / "deep" / "er" / "x.bin").stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize("name, why", [
    ("../../x", "path separator"), ("/etc/passwd", "path separator"), ("a/b", "path separator"),
    ("a\\b", "path separator"), ("..", "it is '..'"), (".", "it is '.'"), ("", "it is empty"),
    ("a\0b", "NUL character"),
])
def test_a_name_from_user_data_stays_one_plain_name(tmp_path, name, why):
    with pytest.raises(UserError) as e:
        fileio.inside(tmp_path, name, "member")
    assert "\n" not in str(e.value) and why in str(e.value) and "cannot name a folder or file" in str(e.value)
    assert fileio.inside(tmp_path, "member0") == tmp_path / "member0"


def test_a_path_that_climbs_out_of_its_root_is_refused(place):
    with pytest.raises(UserError, match="is outside"):
        fileio.atomic_write_text(place / "run" / "cells" / ".." / ".." / "x", "new", root=place / "run")
    assert not (place / "x").exists()


# ---------------------------------------------------------------------------- the trainer and the run folder
X, Y = make_data(40, seed=1)


def _trainer(run):
    cfg = TrainConfig(lr=0.02, max_steps=2, save_every=1, seed=3, progress=False)
    return Trainer(ToyTask(seed=5), batch_fn(X, Y, [7, 6, 9, 8, 10], seed=2), None, cfg, run)


@pytest.mark.usefixtures("quick_toy")
@pytest.mark.parametrize("name", ["checkpoints", "metrics.jsonl", "model.safetensors", "checkpoint.json"])
def test_resume_refuses_a_linked_file_of_the_run_before_training(place, name):
    run = place / "run"
    _trainer(run).fit()
    real = run / name
    if real.is_dir():
        for p in real.iterdir():  # the other folder holds a checkpoint of its own, and a file of theirs
            os.rename(p, place / "elsewhere" / p.name)
        real.rmdir()
        real.symlink_to(place / "elsewhere")
    else:
        os.rename(real, place / "outside.txt")
        real.symlink_to(place / "outside.txt")
    before = {p.name: p.read_bytes() for p in place.iterdir() if p.is_file()}
    held = sorted(p.name for p in (place / "elsewhere").iterdir())
    with pytest.raises(LinkRefused) as e:
        _trainer(run).fit(resume=True)
    _one_line_naming(e, real)
    assert {p.name: p.read_bytes() for p in place.iterdir() if p.is_file()} == before
    assert sorted(p.name for p in (place / "elsewhere").iterdir()) == held


def test_overwrite_refuses_before_it_deletes_anything(place):
    run = place / "run"
    (run / "config.json").write_text("{}")
    (run / "checkpoints").symlink_to(place / "elsewhere")
    with pytest.raises(LinkRefused) as e:
        clear_project_files(run)
    _one_line_naming(e, run / "checkpoints")
    assert (run / "config.json").read_text() == "{}"
    _outside_untouched(place)


def test_the_lock_note_never_truncates_a_linked_file(place):
    (place / "run" / ".lock").symlink_to(place / "outside.txt")
    with pytest.raises(LinkRefused) as e:
        with lock_run_folder(place / "run"):
            pass
    _one_line_naming(e, place / "run" / ".lock")
    _outside_untouched(place)


# ---------------------------------------------------------------------------- members.json
def test_members_json_is_written_atomically_and_never_through_a_link(place):
    run = RunDir(place / "run")
    run.record_members([{"dir": "member0", "seed": 0}])
    assert json.loads((place / "run" / "members.json").read_text()) == [{"dir": "member0", "seed": 0}]
    assert sorted(p.name for p in (place / "run").iterdir()) == ["members.json"]  # no temp file left
    (place / "run" / "members.json").unlink()
    (place / "run" / "members.json").symlink_to(place / "outside.txt")
    with pytest.raises(LinkRefused):
        run.record_members([])
    _outside_untouched(place)


@pytest.mark.parametrize("text, says", [
    ('[{"dir": "member0", "se', "is corrupt (JSONDecodeError)"), (b"\xff\xfe", "is corrupt (UnicodeDecodeError)"),
    ('{"dir": "member0"}', "must be a JSON list of members"), ('[{"dir": "/tmp/x"}]', "holds a path separator"),
])
def test_a_damaged_members_json_is_one_line_naming_it(tmp_path, text, says):
    f = tmp_path / "members.json"
    f.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(UserError) as e:
        RunDir(tmp_path).members_done()
    assert "\n" not in str(e.value) and str(f) in str(e.value) and says in str(e.value), str(e.value)


# ---------------------------------------------------------------------------- sweeps and experiments
def _spec(path: Path, grid: dict) -> Path:
    path.write_text(json.dumps({"name": "t", "claim": {"en": "x"}, "task": "translate", "data": "none",
                                "config": {}, "grid": grid, "checks": []}))
    return path


@pytest.mark.parametrize("grid, says", [
    ({"../../x": {"a": {}}}, "grid axis '../../x'"),
    ({"/tmp/x": {"a": {}}}, "grid axis '/tmp/x'"),
    ({"ablation": {"a\\b": {}}}, "value 'a\\\\b'"),
    ({"model.encoder.n_heads": ["a\0b"]}, "NUL"),
])
def test_an_experiment_grid_never_names_a_folder_outside_out(tmp_path, capsys, grid, says):
    spec = _spec(tmp_path / "spec.json", grid)
    before = sorted(p.name for p in tmp_path.iterdir())
    code = main(["experiment", str(spec), "--out", str(tmp_path / "out" / "ex"), "--in-process"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: ") and says in err[0], err
    assert "cannot name a folder or file inside OUT/cells" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # checked before anything is made


def test_a_value_with_a_slash_is_confined_to_one_cell_folder(tmp_path):
    from scratchformer.experiments.grid import axes_from
    from scratchformer.experiments.runner import SweepSpec, slots

    spec = SweepSpec(task="lm", out=tmp_path / "out", axes=axes_from({"ablation": {"../../x": {}}, "train.lr": ["/a"]}))
    [slot] = slots(spec)
    assert slot.folder == tmp_path / "out" / "cells" / "ablation=.._.._x,lr=_a"


def test_a_sweep_refuses_a_linked_cells_folder(place, capsys):
    (place / "text.txt").write_text("to be or not to be\n" * 50)
    (place / "run" / "cells").symlink_to(place / "elsewhere")
    code = main(["sweep", "--task", "lm", "--data", str(place / "text.txt"), "--grid", "train.lr=0.01",
                 "--out", str(place / "run"), "--in-process"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err[-1].startswith(f"error: {place / 'run' / 'cells'} is a symbolic link"), err
    _outside_untouched(place)


def test_a_staged_folder_appears_whole_or_not_at_all(place):
    """The cache's decoded models: filled in a temporary folder, renamed into place on success;
    a failure leaves neither the target nor the temporary folder; a linked target is refused
    (never removed through), and a finished copy of another process is kept."""
    target = place / "cache" / "model"
    with pytest.raises(RuntimeError):
        with fileio.staged_folder(target) as tmp:
            (tmp / "half.bin").write_bytes(b"x")
            raise RuntimeError("decoding failed")
    assert not target.exists() and list((place / "cache").iterdir()) == []

    with fileio.staged_folder(target) as tmp:
        (tmp / "weights.bin").write_bytes(b"ours")
    assert (target / "weights.bin").read_bytes() == b"ours"

    (target / ".complete").write_text("theirs\n")  # another process finished first
    with fileio.staged_folder(target) as tmp:
        (tmp / "weights.bin").write_bytes(b"late")
    assert (target / "weights.bin").read_bytes() == b"ours"
    with fileio.staged_folder(target, replace=True) as tmp:
        (tmp / "weights.bin").write_bytes(b"new")
    assert sorted(p.name for p in target.iterdir()) == ["weights.bin"]
    assert (target / "weights.bin").read_bytes() == b"new"
    assert [p.name for p in (place / "cache").iterdir()] == ["model"]

    linked = place / "cache" / "linked"
    linked.symlink_to(place / "elsewhere", target_is_directory=True)
    with pytest.raises(LinkRefused):
        with fileio.staged_folder(linked, replace=True) as tmp:
            (tmp / "weights.bin").write_bytes(b"x")
    _outside_untouched(place)
    assert [p.name for p in (place / "cache").iterdir() if p.name.startswith(".")] == []
