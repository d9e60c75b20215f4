"""The training process of test_torchrun.py's restart test, launched by torchrun (2 processes).

The toy task with dropout (each process draws its own masks), a checkpoint after every step;
a run folder that holds a checkpoint is resumed, so a job torchrun restarts continues from it.
The fault hook: with SCRATCHFORMER_TEST_KILL_AT_STEP=N, rank 1 of the first attempt
(TORCHELASTIC_RESTART_COUNT 0) SIGKILLs itself as step N begins, as a lost machine would.
"""
from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
from train_toy import ToyTask, batch_fn, make_data  # noqa: E402

from scratchformer.train import TrainConfig, Trainer  # noqa: E402
from scratchformer.train import evaluation as evaluation_mod  # noqa: E402

STEPS = 10


def main(run_dir: str) -> None:
    torch.set_num_threads(1)
    evaluation_mod.plot_curves = lambda *a, **k: None
    x, y = make_data(64, seed=1)
    cfg = TrainConfig(lr=0.02, max_steps=STEPS, save_every=1, seed=3, schedule="cosine", warmup_steps=2,
                      log_every=1, progress=False, strategy=os.environ.get("STRATEGY", "ddp"))
    trainer = Trainer(ToyTask(seed=5, dropout=0.3), batch_fn(x, y, [4] * 16, seed=2), None, cfg, run_dir)
    kill_at = int(os.environ.get("SCRATCHFORMER_TEST_KILL_AT_STEP", "0"))
    if kill_at and trainer.dist.rank == 1 and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
        step = trainer._train_step

        def dying_step(micro, pad=0):
            if trainer.state.step + 1 == kill_at:
                Path(run_dir, "killed-at").write_text(str(kill_at))
                os.kill(os.getpid(), signal.SIGKILL)
            step(micro, pad)
        trainer._train_step = dying_step
    trainer.fit(resume=(Path(run_dir) / "checkpoint.json").exists())


if __name__ == "__main__":
    main(sys.argv[1])
