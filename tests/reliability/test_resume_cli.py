"""Interrupt a `train` command, then `--resume` it: through the CLI, like a user would."""
from __future__ import annotations

import json
import random

import pytest
import torch
from safetensors.torch import load_file

from scratchformer.cli import main
from scratchformer.train import trainer as trainer_mod

TINY = ["--set", "model.encoder.d_model=16", "--set", "model.encoder.n_heads=2", "--set", "model.encoder.d_ff=32",
        "--set", "model.encoder.n_layers=1", "--set", "train.progress=false", "--set", "train.save_every=1"]


def _interrupt_at(monkeypatch, call: int) -> None:
    """Ctrl-C during the `call`-th optimizer step of this process (a kill would do the same: the
    checkpoint of the step before is complete)."""
    real = trainer_mod.Trainer._train_step
    seen = {"n": 0}

    def step(self, micro):
        seen["n"] += 1
        if seen["n"] == call:
            raise KeyboardInterrupt
        return real(self, micro)

    monkeypatch.setattr(trainer_mod.Trainer, "_train_step", step)


def _text(path):
    rng = random.Random(0)
    path.write_text("\n".join(" ".join(rng.choice(["to", "be", "or", "not"]) for _ in range(8)) for _ in range(200)))
    return path


def test_lm_interrupted_then_resumed_equals_an_uninterrupted_run(tmp_path, monkeypatch, capsys):
    data = _text(tmp_path / "t.txt")
    argv = ["train", "lm", "--data", str(data), "--set", "data.context=16", "--set", "train.max_steps=6"] + TINY
    assert main(argv + ["--out", str(tmp_path / "ref")]) == 0
    _interrupt_at(monkeypatch, 4)
    assert main(argv + ["--out", str(tmp_path / "run")]) == 130
    monkeypatch.undo()
    assert main(argv + ["--out", str(tmp_path / "run")]) == 2  # not without --resume
    assert "--resume" in capsys.readouterr().err.splitlines()[-1]
    assert main(argv + ["--out", str(tmp_path / "run"), "--resume"]) == 0
    ref, got = load_file(tmp_path / "ref" / "model.safetensors"), load_file(tmp_path / "run" / "model.safetensors")
    assert ref.keys() == got.keys() and all(torch.equal(ref[k], got[k]) for k in ref)


def test_an_interrupted_ensemble_resumes(tmp_path, monkeypatch):
    rng = random.Random(0)
    rows = ["text\tlabel"] + [f"{rng.choice(['good', 'bad'])} film\t{rng.choice(['pos', 'neg'])}" for _ in range(60)]
    (tmp_path / "d.tsv").write_text("\n".join(rows) + "\n")
    argv = ["train", "classify", "--data", str(tmp_path / "d.tsv"), "--out", str(tmp_path / "ens"),
            "--set", "data.tokenizer=word", "--set", "ensemble=2", "--set", "train.epochs=null",
            "--set", "train.max_steps=3"] + TINY
    _interrupt_at(monkeypatch, 5)  # member 0 takes steps 1-3; member 1 stops in its second step
    assert main(argv) == 130
    monkeypatch.undo()
    assert main(argv + ["--resume"]) == 0
    assert len(json.loads((tmp_path / "ens" / "members.json").read_text())) == 2
