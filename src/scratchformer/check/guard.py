"""Torch as it was before the learner's file ran: their file may not replace what our reference calls.

A learner's file runs in the same process as the reference it is compared with, so a line such as
`torch.softmax = my_softmax` (or `F.layer_norm = ...`, `torch.Tensor.masked_fill = ...`) would change
the reference's numbers too, and a wrong attention would "match". Two layers:

* **Refused where it is attempted.** `torch`, `torch.nn`, `torch.nn.functional`, `torch.nn.init`, `torch.linalg`,
  `torch.special`, `torch._C._nn` and our own `scratchformer.*` modules get a module class whose
  `__setattr__`/`__delattr__` keep the original callable and record the attempt: the reference keeps
  computing with torch's own functions whatever their file does to these modules.
* **Compared after.** The identity of every callable in those modules, on `torch.Tensor` (its methods,
  inherited ones included) and on every `torch.nn` layer class (`forward` and the rest) is recorded
  before their import (`TorchGuard()`), and compared after the import and after the check
  (`replaced()`): a class attribute cannot be refused as a module's can, so a replaced Tensor method
  is found here, and the verdict is then "your file replaces torch.X" (exit 2), never "all match".

What this cannot rule out in one process: code that replaces a Tensor method and puts it back between
two of our calls. Running the reference in a second clean process would; the comparisons feed the
same weights and inputs to both sides many times over, which would cost more than a check may take.
"""
from __future__ import annotations

import os
import sys
import types

_MODULES = ("torch", "torch.nn", "torch.nn.functional", "torch.nn.init", "torch.linalg", "torch.special", "torch._C._nn")


def _guarded_modules() -> dict[str, types.ModuleType]:
    mods = {name: sys.modules[name] for name in _MODULES if name in sys.modules}
    mods.update({name: m for name, m in list(sys.modules.items())
                 if name.startswith("scratchformer.") and isinstance(m, types.ModuleType)})
    return mods


def _classes() -> dict[str, type]:
    import torch

    out = {"torch.Tensor": torch.Tensor}  # TensorBase's methods included
    for name, obj in vars(torch.nn).items():
        if isinstance(obj, type) and issubclass(obj, torch.nn.Module):
            out[f"torch.nn.{name}"] = obj
    out["torch.nn.Module"] = torch.nn.Module
    return out


def _namespace(ns) -> dict[str, object]:
    """A module's dict, or what a class resolves each name to (its own, else the first base's along the MRO)."""
    if not isinstance(ns, type):
        return dict(vars(ns))
    out: dict[str, object] = {}
    for k in reversed(ns.__mro__[:-1]):  # `object` left out
        out.update(vars(k))
    return out


def _snapshot(namespaces: dict[str, object]) -> dict[str, object]:
    snap = {}
    for prefix, ns in namespaces.items():
        for name, obj in _namespace(ns).items():
            if callable(obj) and not isinstance(obj, types.ModuleType) and not name.startswith("__"):
                snap[f"{prefix}.{name}"] = obj
    return snap


def _by_torch(frame) -> bool:
    import torch

    return frame is not None and frame.f_code.co_filename.startswith(os.path.dirname(torch.__file__) + os.sep)


class TorchGuard:
    """Record torch's callables now; refuse replacements of module functions; say what was replaced."""

    def __init__(self) -> None:
        self.attempts: list[str] = []
        self.swapped: dict[str, type] = {}
        self.modules = _guarded_modules()
        self.before = _snapshot({**self.modules, **_classes()})
        for name, mod in self.modules.items():
            self._lock(name, mod)

    def _lock(self, qual: str, mod: types.ModuleType) -> None:
        guard, before = self, self.before

        class Guarded(type(mod)):
            def __setattr__(self, name, value):
                key = f"{qual}.{name}"
                if key in before and _by_torch(sys._getframe(1)):  # torch itself (torch._dynamo wraps manual_seed)
                    before[key] = value
                elif key in before and value is not before[key]:
                    guard.attempts.append(key)
                    return  # the original stays: the reference computes with torch's own function
                super().__setattr__(name, value)

            def __delattr__(self, name):
                key = f"{qual}.{name}"
                if key in before:
                    guard.attempts.append(key)
                    return
                super().__delattr__(name)

        # named as the class it stands in for: `type(torch)` reads `<class 'module'>`, not our guard's name
        Guarded.__name__, Guarded.__qualname__ = type(mod).__name__, type(mod).__qualname__
        Guarded.__module__ = type(mod).__module__
        try:
            self.swapped[qual] = type(mod)
            mod.__class__ = Guarded
        except TypeError:  # a module type that cannot be swapped: the comparison after still sees it
            self.swapped.pop(qual)

    def release(self) -> None:
        """Give the modules their own class back (a child never needs to; a test in-process does)."""
        for qual, cls in self.swapped.items():
            self.modules[qual].__class__ = cls
        self.swapped.clear()

    def replaced(self) -> list[str]:
        """Names replaced so far (attempted on a module, or changed on a class), in order, once each."""
        now = _snapshot({**self.modules, **_classes()})
        changed = [k for k, v in self.before.items() if now.get(k) is not v]
        return list(dict.fromkeys(self.attempts + changed))
