"""Sweep and experiment folders know what they hold: one sweep at a time holds `--out` (the
run-folder lock), and a rerun reuses a cell only when its recipe, data and `--quick` equal what
is asked now; otherwise it stops before anything is removed and names the setting, or with
`--retrain-changed` retrains those cells. One tiny sweep is trained per module; each test works
on its own copy."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from test_run_folder import held_elsewhere
from toy_data import write_reviews_tsv

from scratchformer.cli import main
from scratchformer.errors import UserError
from scratchformer.experiments.grid import Axis
from scratchformer.experiments import runner
from scratchformer.experiments.runner import SweepSpec, run_sweep
from scratchformer.train.runfolder import lock_run_folder

TINY = {"data": {"tokenizer": "word", "batch_size": 16},
        "model": {"encoder": {"d_model": 8, "n_heads": 2, "d_ff": 16, "n_layers": 1}},
        "train": {"max_steps": 2, "eval_every": 2, "log_every": 1, "metric": "accuracy", "metric_mode": "max"}}
CELL = "lr=0.003"


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    d = tmp_path_factory.mktemp("sweepid")
    for name, n, seed in (("train", 48, 0), ("valid", 16, 1), ("test", 16, 2), ("other", 48, 7)):
        write_reviews_tsv(d / f"{name}.tsv", n, seed, filler=("the", "movie"))
    (d / "base.json").write_text(json.dumps(TINY))
    assert _sweep(d, d / "sw") == 0
    return d


def _sweep(d: Path, out: Path, *extra: str, data: str = "train.tsv") -> int:
    return main(["sweep", "--config", str(d / "base.json"), "--data", str(d / data), "--valid", str(d / "valid.tsv"),
                 "--test", str(d / "test.tsv"), "--grid", "train.lr=0.003", "--out", str(out), "--in-process", *extra])


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".lock"}


@pytest.fixture
def sw(made, tmp_path):
    shutil.copytree(made / "sw", tmp_path / "sw")
    return tmp_path / "sw"


def test_each_cell_records_what_it_was_trained_with(made, sw):
    ident = json.loads((sw / "cells" / CELL / "identity.json").read_text())
    assert ident["recipe"]["train.lr"] == 0.003 and ident["recipe"]["train.max_steps"] == 2
    assert "train.seed" not in ident["recipe"] and ident["quick"] is False
    assert ident["data"]["data"]["file"] == str(made / "train.tsv") and len(ident["data"]["data"]["sha256"]) == 64


def test_an_identical_rerun_reuses_the_cell(made, sw, capsys):
    before = _snapshot(sw / "cells")
    assert _sweep(made, sw) == 0
    assert "finished before, skipped" in capsys.readouterr().err
    assert _snapshot(sw / "cells") == before


@pytest.mark.parametrize("change, says", [
    (["--set", "train.max_steps=3"], f"cell {CELL}: train.max_steps was 2, now 3; pass --retrain-changed"),
    (["--set", "model.encoder.d_ff=32", "--set", "data.lowercase=true"],
     f"cell {CELL}: data.lowercase was false, now true, model.encoder.d_ff was 16, now 32; pass --retrain-changed"),
    (["--time-budget", "5"], f"cell {CELL}: train.max_minutes was null, now 5.0; pass --retrain-changed"),
    ("other.tsv", "--data was "),
])
def test_a_rerun_with_other_settings_is_refused_and_changes_nothing(made, sw, capsys, change, says):
    before = _snapshot(sw)
    capsys.readouterr()
    if isinstance(change, str):  # other data
        rc = _sweep(made, sw, data=change)
    else:
        rc = _sweep(made, sw, *change)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: ") and says in err[0], err
    if isinstance(change, str):
        assert f"{made / 'train.tsv'} (sha256 " in err[0] and f"now {made / 'other.tsv'} (sha256 " in err[0]
    assert _snapshot(sw) == before


def test_the_same_file_with_other_contents_is_other_data(made, tmp_path, capsys):
    d = tmp_path / "d"
    shutil.copytree(made, d, ignore=shutil.ignore_patterns("sw"))
    shutil.copytree(made / "sw", d / "sw")
    ident = d / "sw" / "cells" / CELL / "identity.json"  # the copy's data sits at another path:
    ident.write_text(ident.read_text().replace(str(made), str(d)))  # recorded as if trained here
    (d / "train.tsv").write_text((made / "other.tsv").read_text())
    capsys.readouterr()
    assert _sweep(d, d / "sw") == 2
    err = capsys.readouterr().err
    assert f"--data was {d / 'train.tsv'} (sha256 " in err and f"now {d / 'train.tsv'} (sha256 " in err


def test_retrain_changed_retrains_those_cells_holding_the_folder(made, sw, capsys, monkeypatch):
    old = (sw / "cells" / CELL / "seed0.json").read_text()
    seen = {}
    real = runner.run_slot

    def probe(spec, slot):  # while a cell trains, another process cannot take the sweep folder
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                with lock_run_folder(spec.out):
                    os.write(w, b"acquired")
            except UserError as e:
                os.write(w, str(e).encode())
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        seen["msg"] = os.read(r, 4096).decode()
        os.close(r), os.close(w)
        return real(spec, slot)

    monkeypatch.setattr(runner, "run_slot", probe)
    assert _sweep(made, sw, "--set", "train.max_steps=3", "--retrain-changed") == 0
    assert f"in use by another scratchformer command (pid {os.getpid()})" in seen["msg"]
    assert f"{CELL}: train.max_steps was 2, now 3: retrained" in capsys.readouterr().err
    assert (sw / "cells" / CELL / "seed0.json").read_text() != old
    metrics = [json.loads(x) for x in (sw / "cells" / CELL / "seed0" / "metrics.jsonl").read_text().splitlines()]
    assert max(m["step"] for m in metrics) == 3
    assert json.loads((sw / "cells" / CELL / "identity.json").read_text())["recipe"]["train.max_steps"] == 3
    assert _sweep(made, sw, "--set", "train.max_steps=3") == 0  # and it is now what the cell holds
    assert "finished before, skipped" in capsys.readouterr().err


def test_without_quick_is_refused_naming_quick(made, sw):
    spec = SweepSpec(task="classify", out=sw, axes=[Axis.from_key("train.lr", [0.003])], config=str(made / "base.json"),
                     data=str(made / "train.tsv"), valid=str(made / "valid.tsv"), test=str(made / "test.tsv"),
                     isolate=False, quick=True)
    before = _snapshot(sw)
    with pytest.raises(UserError, match=rf"^cell {CELL}: --quick was off, now on; pass --retrain-changed"):
        run_sweep(spec, log=lambda m: None)
    assert _snapshot(sw) == before


def test_cells_of_an_older_version_are_not_taken_on_trust(made, sw, capsys):
    (sw / "cells" / CELL / "identity.json").unlink()
    before = _snapshot(sw)
    assert _sweep(made, sw) == 2
    assert "its runs record no settings (made by an older scratchformer); pass --retrain-changed" in capsys.readouterr().err
    assert _snapshot(sw) == before


def test_a_second_sweep_or_experiment_on_one_folder_stops_at_once(made, sw, capsys):
    before = _snapshot(sw)
    with held_elsewhere(sw) as pid:
        capsys.readouterr()
        assert _sweep(made, sw) == 2
        assert main(["experiment", "ablations", "--quick", "--out", str(sw)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(f"in use by another scratchformer command (pid {pid})" in line for line in err), err
    assert _snapshot(sw) == before
