"""`train.ema`: an exponential moving average of the weights, the model a run evaluates and keeps.

After every optimizer step, ``avg = ema * avg + (1 - ema) * w`` (the first step copies ``w``);
torch's own `AveragedModel` with `get_ema_multi_avg_fn` keeps it. Evaluations, the best
``model.safetensors`` and everything tested afterwards use the average; training itself goes on
from the raw weights, and a resume checkpoint holds both, so a resumed run continues exactly.

Why: late in a run the weights wander around a minimum with the noise of each batch; their
average sits nearer its middle (Polyak averaging; "SWA" and EMA in the literature), a cheap
stand-in for averaging the predictions of several snapshots. Only parameters are averaged;
buffers (position tables, none of them learned) stay the model's own.
"""
from __future__ import annotations

import contextlib

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn


class WeightAverage:
    """The moving average of ``model``'s parameters with decay ``ema`` in (0, 1)."""

    def __init__(self, model: torch.nn.Module, ema: float) -> None:
        self.averaged = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(ema), use_buffers=False)

    def update(self, model: torch.nn.Module) -> None:
        """Fold the weights after an optimizer step into the average."""
        self.averaged.update_parameters(model)

    @contextlib.contextmanager
    def swapped_into(self, model: torch.nn.Module):
        """Inside the block ``model`` holds the averaged weights; after it, its own again (copied
        in place, so optimizer state and any cache keyed on the parameters stay valid)."""
        params = dict(model.named_parameters())
        averaged = dict(self.averaged.module.named_parameters())
        raw = {n: p.detach().clone() for n, p in params.items()}
        with torch.no_grad():
            for n, p in params.items():
                p.copy_(averaged[n])
        try:
            yield
        finally:
            with torch.no_grad():
                for n, p in params.items():
                    p.copy_(raw[n])

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().cpu() for k, v in self.averaged.state_dict().items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.averaged.load_state_dict(state)
