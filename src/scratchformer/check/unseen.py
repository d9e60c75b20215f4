"""The learner's file runs as it would alone: what it can cheaply look at does not say "checked".

A file that could tell it is being checked could behave differently under the check (right there,
wrong everywhere else, or the reverse), and the verdict would be about another program. The cheap
tells were our modules in `sys.modules` (`scratchformer.check.run`, ...), `__main__` being our child,
the module name the child gave their file, and the environment variable `check()` set. While their
code may run (its import, its own program, and every call the checks make of it) `Unseen` shows
`sys.modules` without our modules and with their file as `__main__` (as `python their_file.py`
would), under the name `import` would give it; the child takes SCRATCHFORMER_CHECKING out of the
environment before their first line.

How our own modules stay usable meanwhile: CPython resolves an `import` of a module already loaded
through the interpreter's own table (the dict `sys.modules` named at start), and only a first import
goes through the `sys.modules` attribute. So the attribute is pointed at a filtered copy: our lazy
imports still find our modules (the same objects, never a second copy), while `"scratchformer.check.run"
in sys.modules` is False for their code. A module first imported meanwhile (by them, by torch) is
written through to both (`_View`): C code that reads the interpreter's table finds it, and it stays.
`_Ours` hands our hidden modules to the slow path (`importlib.import_module`) by name, so that it too
never builds a second copy of one.

What this does not hide (none of it cheap, or not without a second process): the command line of the
process (/proc/self/cmdline), the profile function and alarm of the watch while their program runs,
the call stack, the memory limit, and torch modules of a class of our guard (guard.py).
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import os
import pkgutil
import sys
from pathlib import Path

OURS = "scratchformer"


def ours(name: str) -> bool:
    return name == OURS or name.startswith(OURS + ".")


def module_name(path: str) -> str:
    """What `import` would call their file (its stem), unless that name is taken or not a name."""
    stem = Path(path).stem
    return stem if stem.isidentifier() and stem not in sys.modules and not ours(stem) else "learner_module"


def load_all_of_ours() -> None:
    """Every module of the checker loaded before the view starts, so that none of our lazy imports is a
    first import while their code may run (a first import would put it back into their view)."""
    import scratchformer.check as package

    running = getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", None)  # the child itself
    for info in pkgutil.iter_modules(package.__path__):
        if f"{package.__name__}.{info.name}" == running:
            continue
        try:
            importlib.import_module("." + info.name, package.__name__)  # a module of this package, by its own name
        except Exception:  # noqa: BLE001 - one that does not import is one we do not call
            pass


class _Ours(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Our modules, hidden from the view, handed back by name to an import that takes the slow path."""

    def __init__(self, hidden: dict) -> None:
        self.hidden = hidden

    def find_spec(self, name, path=None, target=None):
        if name in self.hidden:
            return importlib.machinery.ModuleSpec(name, self, is_package=hasattr(self.hidden[name], "__path__"))
        return None

    def create_module(self, spec):
        return self.hidden[spec.name]

    def exec_module(self, module) -> None:  # loaded already: nothing runs twice
        pass


class _View(dict):
    """Their `sys.modules`: a copy without ours whose writes also reach the interpreter's own table, where
    C code looks a module up (`from pkg import sub` inside a package's first import reads it there)."""

    def __init__(self, items, real: dict) -> None:
        super().__init__(items)
        self.real = real

    def __setitem__(self, name, module) -> None:
        super().__setitem__(name, module)
        self.real[name] = module

    def __delitem__(self, name) -> None:
        super().__delitem__(name)
        self.real.pop(name, None)

    def pop(self, name, *default):
        if name in self:
            self.real.pop(name, None)
        return super().pop(name, *default)


class Unseen:
    """`start(module)`: their view of the process, with `module` (their file) as `__main__`; `end()`:
    ours back, with whatever was first imported meanwhile. `end` is safe to call twice."""

    def __init__(self) -> None:
        self.real: dict | None = None

    def start(self, module) -> None:
        os.environ.pop("SCRATCHFORMER_CHECKING", None)
        load_all_of_ours()
        real = sys.modules
        self.main = real.get("__main__")
        hidden = {k: v for k, v in real.items() if ours(k)}
        view = _View(((k, v) for k, v in real.items() if not ours(k)), real)
        view[module.__name__] = view["__main__"] = module  # in both tables: C's `import __main__` reads the real one
        self.finder = _Ours(hidden)
        sys.meta_path.insert(0, self.finder)
        self.real, self.view = real, view
        sys.modules = view

    def end(self) -> None:
        if self.real is None:
            return
        real, view = self.real, self.view
        for k, v in list(dict.items(view)):  # what was first imported meanwhile stays imported (written through)
            real.setdefault(k, v)
        real["__main__"] = self.main
        sys.modules, self.real = real, None
        if self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)
