"""Experiments written as programs rather than as a spec of `train` runs: they train tiny models
of their own on synthetic data, in this process, in seconds to minutes.

    attention-scores   additive (Bahdanau) vs scaled dot-product scores (attention_scores.py)
    copy-task          The Annotated Transformer's copy check, healthy and with planted bugs (copy_task.py)
    transformer-vs-lstm  the tutorial's "> 3x faster, higher BLEU" on translation (transformer_vs_lstm.py)

Each is `run(out, seeds, quick, log, **options) -> report.md`.
"""
from __future__ import annotations

import importlib

PROGRAMS = {"attention-scores": "attention_scores", "copy-task": "copy_task",
            "transformer-vs-lstm": "transformer_vs_lstm"}


def program(name: str):
    """The `run` function of a programmed experiment, or None when `name` is not one."""
    module = PROGRAMS.get(name)
    return None if module is None else importlib.import_module(f".{module}", __package__).run
