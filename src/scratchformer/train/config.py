"""`TrainConfig`: every knob of the Trainer in one dataclass, with a JSON round trip.

Invalid values raise `scratchformer.errors.UserError` with a one-line message as soon as the
config is built (``TrainConfig(lr=-1)`` fails right there, not twenty minutes into a run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scratchformer.errors import UserError
from scratchformer.config import JsonConfig

SCHEDULES = ("cosine", "noam", "linear", "constant")
PRECISIONS = ("fp32", "bf16", "fp16", "auto")  # auto: bf16 where the hardware has it (train/device.py)
METRIC_MODES = ("min", "max")
STRATEGIES = ("ddp", "fsdp")  # under torchrun: whole model per process, or sharded (train/distributed.py)


@dataclass
class TrainConfig(JsonConfig):
    """Optimisation, schedule, precision, evaluation, checkpointing and logging settings.

    Stopping: ``max_steps`` (optimizer steps), ``epochs`` and ``max_minutes`` (wall-clock budget,
    summed over resumed runs); whichever is reached first stops the run. At least one is needed.

    Schedules (a multiplier on ``lr``, see `scratchformer.train.schedules`):
      - ``cosine``: linear warmup over ``warmup_steps``, then cosine down to ``min_lr_ratio * lr``.
      - ``linear``: linear warmup, then linear down to ``min_lr_ratio * lr``.
      - ``constant``: linear warmup, then ``lr``.
      - ``noam``: "Attention is all you need": warmup, then decay as step^-0.5. Normalised so
        the peak (at ``warmup_steps``) is ``lr``; if ``noam_d_model`` is set, ``lr`` is instead
        the paper's scale factor and the peak is ``lr * noam_d_model**-0.5 * warmup_steps**-0.5``.

    Precision: ``bf16`` runs forward passes under ``torch.autocast(bfloat16)`` (CPU or CUDA);
    ``fp16`` needs a GPU (cuda, mps, xpu) and uses a ``GradScaler``; ``auto`` is bf16 where the device computes in
    bf16 and fp32 elsewhere (`train/device.py`, which prints its choice). ``grad_clip`` <= 0 or
    None disables clipping.
    Evaluation: every ``eval_every`` steps (0 = at the end of each epoch) on the validation
    batches; ``metric`` (a key of ``task.evaluate``'s result) chooses the best checkpoint, with
    ``metric_mode`` 'min' or 'max'. ``early_stopping_patience``: stop after that many
    evaluations without improvement (None or 0 = never). ``save_every``: steps between resume
    checkpoints (0 = at each evaluation and each epoch end); one is always written at the end.
    ``progress``: show a tqdm bar (only when stderr is a terminal).
    Several processes (torchrun): ``strategy`` 'ddp' keeps the whole model in each process,
    'fsdp' shards weights, gradients and optimizer state across them (FSDP2); one process
    ignores it. See `scratchformer.train.distributed`.
    ``ema``: in (0, 1), evaluate and keep an exponential moving average of the weights with that
    decay (e.g. 0.999; `scratchformer.train.weight_average`); 0 = off, the raw weights.
    ``adversarial``: > 0, train on clean + adversarial inputs, each example's input embeddings
    moved by that L2 norm along its gradient (FGM; `scratchformer.train.adversarial`; 2-3x
    the step time); 0 = off. ``adversarial_steps``: K >= 1 ascent steps of that size, each
    projected back onto the norm ball, with every step's gradient kept at weight 1/K (K = 1 is
    FGM; each further step costs one more forward/backward).
    """

    # optimizer (AdamW)
    lr: float = 3e-4
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    # learning-rate schedule
    schedule: str = "cosine"
    warmup_steps: int = 0
    min_lr_ratio: float = 0.1
    noam_d_model: int | None = None
    # length of the run
    max_steps: int | None = None
    epochs: int | None = None
    max_minutes: float | None = None
    # step mechanics
    grad_clip: float | None = 1.0
    accumulation: int = 1
    precision: str = "fp32"
    grad_checkpointing: bool = False
    strategy: str = "ddp"
    ema: float = 0.0
    adversarial: float = 0.0
    adversarial_steps: int = 1
    # evaluation, checkpoints, early stopping
    eval_every: int = 0
    save_every: int = 0
    early_stopping_patience: int | None = None
    metric: str = "loss"
    metric_mode: str = "min"
    # misc
    seed: int = 0
    log_every: int = 10
    device: str = "cpu"
    progress: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.betas, list):
            self.betas = tuple(self.betas)
        self.validate()

    # ------------------------------------------------------------------ validation
    def validate(self) -> None:
        """Raise UserError (one line) for the first invalid value."""

        def bad(name: str, why: str) -> UserError:
            return UserError(f"invalid train config: {name}={getattr(self, name)!r} {why}")

        def number(name: str, *, integer: bool = False, optional: bool = False) -> None:
            v = getattr(self, name)
            if v is None and optional:
                return
            ok_types = (int,) if integer else (int, float)
            if isinstance(v, bool) or not isinstance(v, ok_types) or not math.isfinite(v):
                kind = "an integer" if integer else "a number"
                raise bad(name, f"must be {kind}" + (" or null" if optional else ""))

        for name in ("lr", "weight_decay", "eps", "min_lr_ratio", "ema", "adversarial"):
            number(name)
        for name in ("warmup_steps", "accumulation", "eval_every", "save_every", "seed", "log_every",
                     "adversarial_steps"):
            number(name, integer=True)
        for name in ("max_steps", "epochs", "early_stopping_patience", "noam_d_model"):
            number(name, integer=True, optional=True)
        for name in ("max_minutes", "grad_clip"):
            number(name, optional=True)

        if self.lr <= 0:
            raise bad("lr", "must be positive (e.g. 3e-4)")
        if self.weight_decay < 0:
            raise bad("weight_decay", "must be >= 0")
        if (
            not isinstance(self.betas, tuple)
            or len(self.betas) != 2
            or not all(isinstance(b, (int, float)) and 0 <= b < 1 for b in self.betas)
        ):
            raise bad("betas", "must be two numbers in [0, 1), e.g. [0.9, 0.999]")
        if self.eps <= 0:
            raise bad("eps", "must be positive (e.g. 1e-8)")
        if self.schedule not in SCHEDULES:
            raise bad("schedule", f"is unknown; use one of {', '.join(SCHEDULES)}")
        if self.warmup_steps < 0:
            raise bad("warmup_steps", "must be >= 0")
        if self.schedule == "noam" and self.warmup_steps < 1:
            raise bad("warmup_steps", "must be >= 1 for the 'noam' schedule (its peak is at warmup)")
        if not 0 <= self.min_lr_ratio <= 1:
            raise bad("min_lr_ratio", "must be in [0, 1]")
        if self.noam_d_model is not None and self.noam_d_model < 1:
            raise bad("noam_d_model", "must be a positive model width")
        for name in ("max_steps", "epochs"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise bad(name, "must be >= 1 (or null for no limit)")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise bad("max_minutes", "must be positive (or null for no time limit)")
        if self.grad_clip is not None and self.grad_clip < 0:
            raise bad("grad_clip", "must be >= 0 (0 or null disables clipping)")
        if not 0 <= self.ema < 1:
            raise bad("ema", "must be in [0, 1): the decay of the weight average (e.g. 0.999; 0 = off)")
        if not self.adversarial >= 0:
            raise bad("adversarial", "must be >= 0: the L2 norm of each example's embedding perturbation (0 = off)")
        if self.adversarial_steps < 1:
            raise bad("adversarial_steps", "must be >= 1: the ascent steps of the perturbation (1 = FGM)")
        if self.accumulation < 1:
            raise bad("accumulation", "must be >= 1")
        if self.precision not in PRECISIONS:
            raise bad("precision", f"is unknown; use one of {', '.join(PRECISIONS)}")
        if self.strategy not in STRATEGIES:
            raise bad("strategy", f"is unknown; use one of {', '.join(STRATEGIES)}")
        from .device import parse_device  # any device torch knows; whether it is here: at training

        parse_device(self.device, "train.device")
        if self.precision == "fp16" and self.device == "cpu":
            raise bad("precision", "needs a GPU (CUDA, MPS or XPU: device cuda, mps or xpu); on CPU use 'bf16' or 'fp32'")
        for name in ("eval_every", "save_every"):
            if getattr(self, name) < 0:
                raise bad(name, "must be >= 0 (0 = once per epoch)")
        if self.log_every < 1:
            raise bad("log_every", "must be >= 1")
        if self.early_stopping_patience is not None and self.early_stopping_patience < 0:
            raise bad("early_stopping_patience", "must be >= 0 (0 or null disables it)")
        if not isinstance(self.metric, str) or not self.metric:
            raise bad("metric", "must be the name of a value returned by task.evaluate")
        if self.metric_mode not in METRIC_MODES:
            raise bad("metric_mode", "must be 'min' or 'max'")
