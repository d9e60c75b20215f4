"""A `train` verb that torchrun restarted (`--max-restarts`, TORCHELASTIC_RESTART_COUNT > 0) on a folder holding
a checkpoint resumes it, so the same command line continues the job (commands/common.py `under_torchrun`).
The lines that did it once sat after a `raise` in the SIGTERM handler and never ran."""
import argparse
import signal

from scratchformer.commands.common import under_torchrun
from scratchformer.train.checkpoint_store import POINTER


def test_a_restarted_job_resumes_its_checkpoint(tmp_path, monkeypatch, capsys):
    (tmp_path / POINTER).write_text("{}")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    before = signal.getsignal(signal.SIGTERM)
    args = argparse.Namespace(claims_out=True, resume=False, overwrite=True, out=tmp_path)
    try:
        under_torchrun(args)
    finally:
        signal.signal(signal.SIGTERM, before)
    assert args.resume is True and args.overwrite is False
    assert "torchrun restarted the job: resuming from the checkpoint in" in capsys.readouterr().err


def test_a_first_start_does_not_resume(tmp_path, monkeypatch):
    (tmp_path / POINTER).write_text("{}")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    before = signal.getsignal(signal.SIGTERM)
    args = argparse.Namespace(claims_out=True, resume=False, overwrite=True, out=tmp_path)
    try:
        under_torchrun(args)
    finally:
        signal.signal(signal.SIGTERM, before)
    assert args.resume is False and args.overwrite is True
