"""Run folders: a finished run or a user's own files are never replaced without --overwrite, and
--overwrite deletes only what we wrote; one command at a time holds a folder, and a killed
holder never blocks the next one."""
from __future__ import annotations

import contextlib
import os
import random
import signal

import pytest
from train_toy import ToyTask, batch_fn, make_data

from scratchformer.cli import main
from scratchformer.errors import UserError
from scratchformer.train import TrainConfig, Trainer
from scratchformer.train.runfolder import claim_run_folder, clear_project_files, lock_run_folder

pytestmark = pytest.mark.usefixtures("quick_toy")
X, Y = make_data(40, seed=1)


def _trainer(run):
    cfg = TrainConfig(lr=0.02, max_steps=2, seed=3, progress=False)
    return Trainer(ToyTask(seed=5), batch_fn(X, Y, [7, 6, 9, 8, 10], seed=2), None, cfg, run)


def _snapshot(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != ".lock"}


@contextlib.contextmanager
def held_elsewhere(path):
    """Another process (a fork) holding the lock of `path` until the block ends; yields its pid."""
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child only takes the lock and waits: no torch in here
        try:
            with lock_run_folder(path, "train"):
                os.write(ready_w, b"1")
                os.read(done_r, 1)
        finally:
            os._exit(0)
    assert os.read(ready_r, 1) == b"1"
    try:
        yield pid
    finally:
        os.write(done_w, b"1")
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        for fd in (ready_r, ready_w, done_r, done_w):
            os.close(fd)


# ---------------------------------------------------------------------------- protection
def test_a_finished_run_is_not_replaced_by_a_fresh_fit(tmp_path):
    run = tmp_path / "run"
    _trainer(run).fit()
    before = _snapshot(run)
    with pytest.raises(UserError) as e:
        _trainer(run).fit()
    msg = str(e.value)
    assert "\n" not in msg and "already holds a run" in msg and "overwrite" in msg
    assert _snapshot(run) == before


def test_a_users_own_files_are_not_touched(tmp_path):
    run = tmp_path / "mine"
    run.mkdir()
    (run / "config.json").write_text('{"mine": true}')
    (run / "model.safetensors").write_bytes(b"my weights")
    with pytest.raises(UserError, match="config.json, model.safetensors"):
        _trainer(run).fit()
    assert (run / "config.json").read_text() == '{"mine": true}'
    assert (run / "model.safetensors").read_bytes() == b"my weights"


def test_overwrite_deletes_only_what_we_wrote(tmp_path):
    run = tmp_path / "run"
    _trainer(run).fit()
    (run / "notes.txt").write_text("keep me")
    (run / "member0").mkdir()
    (run / "member0" / "metrics.jsonl").write_text("{}\n")
    (run / "member0" / "my.csv").write_text("keep me too")
    (run / "snapshots").mkdir()
    (run / "snapshots" / "step-00000010.safetensors").write_bytes(b"ours")
    (run / "snapshots" / "README").write_text("theirs")
    summary = _trainer(run).fit(overwrite=True)
    assert summary["step"] == 2
    assert (run / "notes.txt").read_text() == "keep me"
    assert (run / "member0" / "my.csv").exists() and not (run / "member0" / "metrics.jsonl").exists()
    assert sorted(p.name for p in (run / "snapshots").iterdir()) == ["README"]
    assert clear_project_files(tmp_path / "missing") == []


@pytest.mark.parametrize("flags, expected", [
    ((False, False), "is not empty: it holds a run"),
    ((True, True), "give one of them"),
])
def test_claim_of_a_non_empty_folder(tmp_path, flags, expected):
    run = tmp_path / "run"
    _trainer(run).fit()
    with pytest.raises(UserError, match=expected):
        claim_run_folder(run, *flags)


def test_claim_messages_for_resume(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        claim_run_folder(tmp_path / "nope", True, False)
    assert not (tmp_path / "nope").exists()
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="holds no run"):
        claim_run_folder(tmp_path / "empty", True, False)
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "data.tsv").write_text("x")
    with pytest.raises(UserError, match=r"is not empty: it holds 1 entries \(data.tsv\)"):
        claim_run_folder(tmp_path / "user", False, False)


# ---------------------------------------------------------------------------- the lock
def test_a_second_trainer_refuses_while_another_process_trains(tmp_path):
    run = tmp_path / "run"
    with held_elsewhere(run) as pid:
        with pytest.raises(UserError) as e:
            _trainer(run).fit()
        assert f"in use by another scratchformer command (pid {pid})" in str(e.value)
        assert not (run / "train_config.json").exists()
    assert _trainer(run).fit()["step"] == 2  # free again


def test_another_process_refuses_while_we_hold_the_folder(tmp_path):
    run = tmp_path / "run"
    with lock_run_folder(run, "train"):
        with lock_run_folder(run):  # re-entrant in this process
            pass
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                with lock_run_folder(run):
                    os.write(w, b"acquired")
            except UserError as e:
                os.write(w, str(e).encode())
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        msg = os.read(r, 4096).decode()
        os.close(r), os.close(w)
    assert f"in use by another scratchformer command (pid {os.getpid()})" in msg


def test_a_lock_left_by_a_killed_process_does_not_block(tmp_path):
    run = tmp_path / "run"
    with held_elsewhere(run) as pid:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        assert (run / ".lock").read_text().startswith(f"{pid} ")  # its note is still there
        assert _trainer(run).fit()["step"] == 2  # but the kernel released its lock


def _cli_train(out, *extra):
    data = out.parent / "plays.txt"
    rng = random.Random(0)
    data.write_text("\n".join(" ".join(rng.choice(["to", "be", "or", "not"]) for _ in range(8))
                              for _ in range(200)))
    tiny = ["--set", "model.encoder.d_model=16", "--set", "model.encoder.n_heads=2", "--set",
            "model.encoder.d_ff=32", "--set", "model.encoder.n_layers=1", "--set", "data.context=16",
            "--set", "train.max_steps=2", "--set", "train.progress=false"]
    return main(["train", "lm", "--data", str(data), "--out", str(out)] + tiny + list(extra))


@pytest.mark.parametrize("order", ["cli_second", "cli_first"])
def test_two_commands_on_one_folder_both_orders(tmp_path, capsys, order):
    out = tmp_path / "run"
    if order == "cli_second":  # another train holds the folder; the CLI refuses in one line
        with held_elsewhere(out) as pid:
            assert _cli_train(out) == 2
            for verb in (["evaluate", str(out)], ["doctor", str(out)], ["attention", str(out), "to be"],
                         ["blend", str(out)]):
                assert main(verb) == 2  # each writes into the folder: it waits for no one
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 5 and all(line.startswith("error: ") for line in err)
        assert all(f"in use by another scratchformer command (pid {pid})" in line for line in err)
        assert not (out / "config.json").exists()
    else:  # the CLI holds it (its lock, for the whole command); another process refuses
        seen = {}
        import scratchformer.train.trainer as trainer_mod

        real_fit = trainer_mod.Trainer._fit

        def fit_and_probe(self, resume, overwrite):
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:
                try:
                    with lock_run_folder(out):
                        os.write(w, b"acquired")
                except UserError as e:
                    os.write(w, str(e).encode())
                finally:
                    os._exit(0)
            os.waitpid(pid, 0)
            seen["msg"] = os.read(r, 4096).decode()
            os.close(r), os.close(w)
            return real_fit(self, resume, overwrite)

        trainer_mod.Trainer._fit = fit_and_probe
        try:
            rc = _cli_train(out)
        finally:
            trainer_mod.Trainer._fit = real_fit
        assert rc == 0, capsys.readouterr().err
        assert f"(pid {os.getpid()})" in seen["msg"]


def test_cli_refuses_a_non_empty_out_and_overwrite_keeps_other_files(tmp_path, capsys):
    out = tmp_path / "run"
    assert _cli_train(out) == 0
    capsys.readouterr()
    (out / "notes.txt").write_text("mine")
    before = _snapshot(out)
    assert _cli_train(out) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --out") and "--overwrite" in err and "\n" not in err
    assert _snapshot(out) == before
    assert _cli_train(out, "--overwrite") == 0
    assert (out / "notes.txt").read_text() == "mine" and (out / "model.safetensors").exists()


# ---------------------------------------------------------------------------- the machine's errors
@pytest.mark.parametrize("exc, expected", [
    (OSError(28, "No space left on device", "/data/run/test_metrics.json"),
     "error: no space left on the device writing /data/run/test_metrics.json: it needs more space"),
    (PermissionError(13, "Permission denied", "/data/run/model.safetensors"),
     "error: /data/run/model.safetensors: Permission denied"),
])
def test_an_os_error_from_any_command_is_one_line(monkeypatch, capsys, exc, expected):
    import scratchformer.data.registry as registry

    def broken():
        raise exc

    monkeypatch.setattr(registry, "format_table", broken)
    assert main(["datasets"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(expected) and err.count("\n") == 1, err
