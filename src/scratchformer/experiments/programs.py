"""Experiments written as programs rather than as a spec of `train` runs: they train tiny models
of their own on synthetic data, in this process, in seconds to minutes.

    attention-scores   additive (Bahdanau) vs scaled dot-product scores (attention_scores.py)
    copy-task          The Annotated Transformer's copy check, healthy and with planted bugs (copy_task.py)
    transformer-vs-lstm  the tutorial's "> 3x faster, higher BLEU" on translation (transformer_vs_lstm.py)
    yours-vs-ours      the learner's own model (--model FILE.py) beside ours on real data (yours_vs_ours.py)

Each is `run(out, seeds, quick, log, **options) -> report.md`.
"""
from __future__ import annotations



def _attention_scores():
    from .attention_scores import run

    return run


def _copy_task():
    from .copy_task import run

    return run


def _transformer_vs_lstm():
    from .transformer_vs_lstm import run

    return run


def _yours_vs_ours():
    from .yours_vs_ours import run

    return run


# name -> its `run`, imported on first use (a plain import each: the import graph sees them)
PROGRAMS = {"attention-scores": _attention_scores, "copy-task": _copy_task,
            "transformer-vs-lstm": _transformer_vs_lstm, "yours-vs-ours": _yours_vs_ours}


def program(name: str):
    """The `run` function of a programmed experiment, or None when `name` is not one."""
    find = PROGRAMS.get(name)
    return None if find is None else find()
