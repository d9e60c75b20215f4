"""The one task-agnostic Trainer: any Task (docs/contracts.md) trains with the same loop.

    from scratchformer.train import TrainConfig, Trainer
    trainer = Trainer(task, train_batches, valid_batches, TrainConfig(lr=1e-3, max_steps=1000), "runs/x")
    summary = trainer.fit()            # or trainer.fit(resume=True) after an interruption

Modules: `config` (TrainConfig), `schedules` (learning-rate multipliers), `checkpoint`
(safetensors weights + trainer state), `checkpoint_store` (a checkpoint as one atomic unit: a
step directory named by a pointer file), `runfolder` (the run folder's lock, and protection of
what is in it), `trainer` (Trainer: the loop), `evaluation` (its validation pass, logs and
curves), `checkpointing` (its save and resume), `state` (TrainState), `device` (the device and
precision a run computes in), `optim` (AdamW parameter groups: weight decay and per-parameter
lr scales), `curves` (plot_curves).
"""

from scratchformer.train import schedules
from scratchformer.train.checkpoint import load_weights, save_weights
from scratchformer.train.config import TrainConfig
from scratchformer.train.curves import plot_curves
from scratchformer.train.trainer import Trainer, TrainingDiverged, TrainState

__all__ = [
    "TrainConfig",
    "Trainer",
    "TrainState",
    "TrainingDiverged",
    "schedules",
    "save_weights",
    "load_weights",
    "plot_curves",
]
