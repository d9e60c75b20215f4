"""The training process test_kill.py kills: the toy task, a checkpoint after every step.

`run_child` is the target of a forked process (multiprocessing's forkserver, which has already
imported torch, so a child starts in milliseconds); `make_trainer` builds the same run in the
test process for the reference.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "train"))

import torch  # noqa: E402
from train_toy import ToyTask, batch_fn, make_data  # noqa: E402

from scratchformer.train import TrainConfig, Trainer  # noqa: E402
from scratchformer.train import evaluation as evaluation_mod  # noqa: E402

STEPS = 60
X, Y = make_data(40, seed=1)


def make_trainer(run_dir, seed: int = 5) -> Trainer:
    """One thread and no curve plots are the caller's business: the child sets them for its
    whole life (`run_child`), the test process through the `quick_toy` fixture (restored after)."""
    cfg = TrainConfig(lr=0.02, accumulation=2, max_steps=STEPS, save_every=1, eval_every=5, seed=3,
                      schedule="cosine", warmup_steps=5, progress=False)
    return Trainer(ToyTask(seed=seed, dropout=0.2), batch_fn(X, Y, [7, 6, 9, 8, 10], seed=2),
                   lambda: [b for b in batch_fn(X, Y, [20, 20], shuffle=False)(0)], cfg, run_dir)


def run_child(run_dir: str, resume: bool, ready) -> None:
    import threading

    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())  # tqdm's default multiprocessing lock would leak when killed
    torch.set_num_threads(1)  # the same arithmetic as the reference run in the test process
    evaluation_mod.plot_curves = lambda *a, **k: None  # a plot per evaluation would dominate
    trainer = make_trainer(run_dir, seed=11 if resume else 5)  # resume must overwrite the init
    ready.send("ready")  # a pipe: a killed child leaves no semaphore behind
    trainer.fit(resume=resume, overwrite=not resume)  # killed before its first checkpoint: afresh
