"""Watching the learner's own program run: what their modules are built with and called with, as their code does it.

看你自己的程序跑一遍：记录每个模块实例的构造参数、第一次被调用时的参数（形状、dtype、掩码，原样）和调用者。

The checks used to guess: sizes from names, a call from the forward's parameter names, the mask convention from
the tutorials' default, causality from the file's words. A learner's file usually answers all of it itself: a
`__main__` block, module-level code, a `main()` / `demo()`, notebook cells that build the model and call it on a
batch. `Watch` runs that code (in the child process, never in the checker) under a profile function that sees
only the frames of the learner's own file, and records, for every instance of their `nn.Module` classes:

- `ctor`: the arguments their code passed to `__init__` (sizes, switches such as `causal=True`, configs, parts);
- `calls`: its first calls, every argument by parameter name (tensors copied as they were: shapes, dtypes, the
  masks exactly as their model built them) and the instance that called it (`parent`);
and for their module-level functions (functional code: `ffn(params, x)`), the first calls the same way.

The program is stopped (`StopWatch`, a BaseException their `except Exception` cannot swallow) when a top-level
model is called a second time (a training or evaluation loop's second step), or after `budget_s`: training
loops never run to the end. An exception raised inside one of their forwards under their own inputs is kept
(`raised`): it is the one kind of error that is theirs for certain.
"""
from __future__ import annotations

import ast
import inspect
import re
import signal
import sys
import time
import traceback
from dataclasses import dataclass, field

import torch
from torch import nn

from .facts import _TGT


_CE_CODE = torch.nn.functional.cross_entropy.__code__
_FORK_HOOK = []


def _forget_in_forks() -> None:
    """A process their code forks is theirs alone: it runs without our profile function (nor its deadline)."""
    if not _FORK_HOOK:
        import os
        os.register_at_fork(after_in_child=lambda: sys.setprofile(None))
        _FORK_HOOK.append(True)


class StopWatch(BaseException):
    """Stops the learner's program: their first forward has been seen (or the watch's time is up)."""


@dataclass
class Call:
    args: dict                      # parameter name -> value as their code passed it (tensors copied)
    parent: int | None              # id() of the learner module whose forward made this call (None: top level)
    order: int                      # the n-th learner call of the run
    out_shape: tuple | None = None  # the first tensor it returned


@dataclass
class Seen:
    obj: nn.Module
    ctor: dict = field(default_factory=dict)
    calls: list = field(default_factory=list)

    @property
    def cls(self):
        return type(self.obj)


def _copy(v, depth: int = 0):
    if isinstance(v, torch.Tensor):
        return v.detach().clone()
    if depth < 2 and isinstance(v, (list, tuple)) and len(v) <= 16:
        out = [_copy(x, depth + 1) for x in v]
        return tuple(out) if isinstance(v, tuple) else out
    if depth < 3 and type(v) is dict and len(v) <= 64:  # a cache their call fills in place: as it was at the call
        return {k: _copy(x, depth + 1) for k, x in v.items()}
    return v


def _first_tensor_shape(v):
    if isinstance(v, torch.Tensor):
        return tuple(v.shape)
    if isinstance(v, (tuple, list)):
        for x in v:
            if isinstance(x, torch.Tensor):
                return tuple(x.shape)
    return None


def _arguments(code, loc: dict, skip_self: bool) -> dict:
    n = code.co_argcount + code.co_kwonlyargcount
    names = list(code.co_varnames[:n])
    if code.co_flags & inspect.CO_VARARGS:
        names.append(code.co_varnames[n])
        n += 1
    if code.co_flags & inspect.CO_VARKEYWORDS:
        names.append(code.co_varnames[n])
    if skip_self and names and names[0] == "self":
        names = names[1:]
    return {k: _copy(loc[k]) for k in names if k in loc}


class Watch:
    """Record the learner's modules and calls while their own code runs (see the module docstring)."""

    MAX_CALLS = 2  # calls kept per instance

    def __init__(self, path: str, budget_s: float = 6.0):
        self.path = path
        self.budget_s = budget_s
        self.instances: dict[int, Seen] = {}
        self.functions: dict[str, list[Call]] = {}
        self.stack: list = []          # (id of the instance, its forward's frame) of the forwards running now
        self.top_calls: dict[int, int] = {}
        self.n = 0
        self.raised: str | None = None  # "ErrorType: message (at file:line: code)" from inside their forward
        self.stopped: str | None = None  # why the program was stopped ("a second call of GPT", "time")
        self.entries: list[str] = []     # what was run: "module-level code", "the __main__ block", "main()"
        self.raised_in: str | None = None  # the class whose forward raised it
        self.synthetic = False           # the run is a call of our making (their file never calls its model)
        self.errors: list[str] = []      # what their top-level code raised (a missing data file, ...)
        self.losses: list[dict] = []     # F.cross_entropy as their code called it (input, target, ignore_index)
        self._deadline = None

    # --- the profile function: only frames of the learner's own file are looked at ---------------------
    def _prof(self, frame, event, arg):
        if event != "call" and event != "return":
            return
        code = frame.f_code
        if code.co_filename != self.path:
            if code is _CE_CODE and event == "call" and len(self.losses) < 2:
                loc = frame.f_locals  # their loss, as their training step computes it
                self.losses.append({k: _copy(loc.get(k)) for k in ("input", "target", "ignore_index", "reduction")})
            return
        if self._deadline is not None and time.monotonic() > self._deadline:
            self.stopped = self.stopped or f"after {self.budget_s:g} s"
            raise StopWatch
        name = code.co_name
        if event == "return":
            if self.stack and self.stack[-1][1] is frame:
                key, _ = self.stack.pop()
                seen = self.instances.get(key)
                if seen is not None and seen.calls and seen.calls[-1].out_shape is None:
                    seen.calls[-1].out_shape = _first_tensor_shape(arg)
            return
        loc = frame.f_locals
        me = loc.get("self") if code.co_argcount else None
        if isinstance(me, nn.Module):
            key = id(me)
            if name == "__init__":
                if key not in self.instances:  # the most derived class's __init__ comes first
                    self.instances[key] = Seen(me, _arguments(code, loc, True))
                return
            if name != "forward":
                return
            seen = self.instances.setdefault(key, Seen(me))
            parent = self.stack[-1][0] if self.stack else None
            if parent is None:
                self.top_calls[key] = self.top_calls.get(key, 0) + 1
                if self.top_calls[key] > 1 and self._holds_parts(me):
                    self.stopped = f"at the second call of {type(me).__name__} (a loop: the first step was watched)"
                    raise StopWatch
            self.n += 1
            if len(seen.calls) < self.MAX_CALLS:
                seen.calls.append(Call(_arguments(code, loc, True), parent, self.n))
            self.stack.append((key, frame))
            return
        if "." not in code.co_qualname and name not in ("<module>", "<lambda>") and not name.startswith("<") \
                and getattr(frame.f_globals.get(name), "__code__", None) is code:  # one of their top-level functions
            calls = self.functions.setdefault(name, [])
            if len(calls) < self.MAX_CALLS:
                self.n += 1
                calls.append(Call(_arguments(code, loc, False), self.stack[-1][0] if self.stack else None, self.n))

    def mark(self):
        return ({k: len(s.calls) for k, s in self.instances.items()}, dict(self.top_calls),
                {k: len(v) for k, v in self.functions.items()}, self.n)

    def rollback(self, mark) -> None:
        """Forget what one failed call of our making recorded."""
        calls, tops, fns, n = mark
        self.instances = {k: s for k, s in self.instances.items() if k in calls}
        for k, s in self.instances.items():
            del s.calls[calls[k]:]
        self.top_calls = tops
        self.functions = {k: v[:fns[k]] for k, v in self.functions.items() if k in fns}
        self.n = n

    def _holds_parts(self, mod: nn.Module) -> bool:
        return any(id(m) in self.instances for m in mod.modules() if m is not mod)

    def _alarm(self, signum, frame):
        self.stopped = self.stopped or f"after {self.budget_s:g} s"
        raise StopWatch

    # --- running the learner's code under the watch --------------------------------------------------
    def __enter__(self):
        _forget_in_forks()
        if self._deadline is None:  # one budget for the whole run: import, cells, __main__, main()
            self._deadline = time.monotonic() + self.budget_s
        self._old_alarm = None
        left = max(0.05, self._deadline - time.monotonic())
        try:  # a long C-level loop of theirs never enters a frame of their file: the timer stops it too
            self._old_alarm = signal.signal(signal.SIGALRM, self._alarm)
            signal.setitimer(signal.ITIMER_REAL, left + 0.5)
        except (ValueError, OSError):  # not the main thread
            self._old_alarm = None
        sys.setprofile(self._prof)
        return self

    def __exit__(self, et, ev, tb):
        sys.setprofile(None)
        if self._old_alarm is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._old_alarm)
        self.stack.clear()
        if et is StopWatch:
            return True
        if et is not None and issubclass(et, Exception):
            self._their_error(ev)
            return True
        return False

    def _their_error(self, exc: BaseException) -> None:
        """Keep an exception raised inside one of their forwards (their own inputs): theirs for certain."""
        frames = traceback.extract_tb(exc.__traceback__)
        mine = [fr for fr in frames if fr.filename == self.path]
        if self.errors is not None:
            self.errors.append(f"{type(exc).__name__}: {exc}".splitlines()[0][:200] if str(exc) else type(exc).__name__)
        inside = [fr for fr in mine if fr.name == "forward"]
        if inside and self.raised is None:
            fr = mine[-1]
            self.raised = f"{type(exc).__name__}: {exc}".splitlines()[0][:240] + \
                f" (at line {fr.lineno}: {(fr.line or '').strip()[:120]})"
            tb, cls = exc.__traceback__, None
            while tb is not None:  # the innermost forward of theirs: whose class raised
                f = tb.tb_frame
                if f.f_code.co_filename == self.path and f.f_code.co_name == "forward" \
                        and isinstance(f.f_locals.get("self"), nn.Module):
                    cls = type(f.f_locals["self"]).__name__
                tb = tb.tb_next
            self.raised_in = cls

    def run_module(self, module, source: str, future_flags: int = 0) -> None:
        """Their file's top-level statements in order, under the watch (module-level code is part of their
        program). Once the program was stopped, the statements left run only if they define something
        (classes, functions, imports, constants): a second training loop never starts. A statement that
        raises is kept (`errors`) and the rest goes on the same way: the classes can still be checked."""
        tree = ast.parse(source, self.path)
        ns = vars(module)
        defining_only = False
        for node in tree.body:
            if _is_main_if(node):
                continue  # run_entries runs it, after every definition is in place
            if defining_only and not _defines(node):
                continue
            code = compile(ast.Module(body=[node], type_ignores=[]), self.path, "exec",
                           flags=future_flags, dont_inherit=True)
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                exec(code, ns)  # a package their file needs and this machine lacks: "could not be imported"
                if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                    import __future__
                    for a in node.names:
                        feat = getattr(__future__, a.name, None)
                        if feat is not None:
                            future_flags |= feat.compiler_flag
                continue
            before = (self.stopped, len(self.errors))
            with self:
                exec(code, ns)
            if self.stopped or len(self.errors) > before[1]:
                defining_only = True

    def run_entries(self, module, source: str) -> None:
        """After the top level: the `__main__` block, else a `main()` / `demo()` that takes no arguments,
        unless a model was already called."""
        if self.stopped:
            return
        blocks = main_blocks(source, self.path)
        for code in blocks:
            self.entries.append("the __main__ block")
            with self:
                exec(code, vars(module))
            if self.stopped:
                return
        if blocks or self.top_calls:
            return
        for name in ("main", "demo", "run_demo", "test", "example", "sanity_check", "quick_test", "run"):
            fn = vars(module).get(name)
            if inspect.isfunction(fn) and getattr(fn, "__module__", None) == module.__name__:
                try:
                    required = [p for p in inspect.signature(fn).parameters.values()
                                if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
                except (TypeError, ValueError):
                    continue
                if required:
                    continue
                self.entries.append(f"{name}()")
                with self:
                    fn()
                return

    # --- what was seen -------------------------------------------------------------------------------
    def of_class(self, cls) -> list[Seen]:
        """The instances of exactly this class that were built, called ones first."""
        out = [s for s in self.instances.values() if type(s.obj) is cls]
        return sorted(out, key=lambda s: (not s.calls, s.calls[0].order if s.calls else 0))

    def called(self, cls) -> list[Seen]:
        return [s for s in self.of_class(cls) if s.calls]

    def top(self) -> Seen | None:
        """The model their program called at the top level that holds the most of their modules."""
        tops = [self.instances[k] for k in self.top_calls if k in self.instances]
        if not tops:
            return None
        return max(tops, key=lambda s: sum(id(m) in self.instances for m in s.obj.modules()))

    def summary(self) -> str:
        """One line for the report: what of their program ran, what it called, where it was stopped ('' when
        nothing of theirs was called)."""
        called = sorted({type(s.obj).__name__ for s in self.instances.values() if s.calls})
        fns = sorted(self.functions)
        if not called and not fns:
            return ""
        what = ", ".join(self.entries) or "the module-level code"
        names = called + [f"{n}()" for n in fns if n not in called]
        line = f"watched {what}: {len(names)} of your classes and functions called ({', '.join(names[:6])}" \
               f"{', ...' if len(names) > 6 else ''})"
        if self.stopped:
            line += f"; stopped {self.stopped}"
        return line


def main_blocks(source: str, filename: str) -> list:
    """The bodies of `if __name__ == "__main__":` at the top level, compiled with their own line numbers."""
    try:
        tree = ast.parse(source, filename)
    except (SyntaxError, ValueError):
        return []
    out = []
    for node in tree.body:
        if _is_main_if(node):
            mod = ast.Module(body=node.body, type_ignores=[])
            out.append(compile(mod, filename, "exec"))
    return out


def _is_main_if(node) -> bool:
    return isinstance(node, ast.If) and _is_main_test(node.test)


def _defines(node) -> bool:
    """A statement that only defines: a class, a function, an import, a constant (no call in it)."""
    if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef, ast.Import, ast.ImportFrom)):
        return True
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        value = node.value
        return value is not None and not any(isinstance(n, (ast.Call, ast.Lambda)) for n in ast.walk(value)) \
            or value is not None and isinstance(value, ast.Lambda)
    return False


def _is_main_test(test) -> bool:
    if not isinstance(test, ast.Compare) or len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    return any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides) \
        and any(isinstance(s, ast.Constant) and s.value == "__main__" for s in sides)


_PAD_NAME = re.compile(r"pad", re.I)


# --- what the run tells the checks ------------------------------------------------------------------


# --- a run of our making, for a file that never calls its own model ----------------------------------

_IDS = re.compile(r"src|^x$|ids|idx|tok|input|seq|text|sent|enc|^inp|^batch$|词|输入", re.I)
_NOT_INPUT = re.compile(r"target|label|^y_true$|loss", re.I)


def top_classes(module, source: str) -> list:
    """Their nn.Module classes that hold others and that no other class of theirs builds: the models, the
    one holding the most parts first."""
    classes = {n: o for n, o in vars(module).items() if inspect.isclass(o) and issubclass(o, nn.Module)
               and getattr(o, "__module__", None) == module.__name__}
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    builds: dict = {n: set() for n in classes}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name in classes:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in classes \
                        and sub.func.id != node.name:
                    builds[node.name].add(sub.func.id)
    built_by_others = set().union(*builds.values()) if builds else set()

    def reach(n, seen=None):
        seen = seen if seen is not None else set()
        for m in builds.get(n, ()):
            if m not in seen:
                seen.add(m)
                reach(m, seen)
        return seen
    tops = [n for n in classes if builds[n] and n not in built_by_others]
    return [classes[n] for n in sorted(tops, key=lambda n: -len(reach(n)))]


def synthesize(watch: Watch, module, source: str, found: dict, sizes) -> str | None:
    """Build their top model from their own sizes and call it with token ids (a second, shorter sequence for
    an encoder-decoder) under the watch; what it records is a call of our making, so an exception in it is
    never theirs. Returns what was run, or None."""
    from .discover import Found, build
    saved = watch.raised, watch.raised_in, list(watch.errors)
    watch.stopped = None
    watch._deadline = time.monotonic() + 3.0
    try:
        for cls in top_classes(module, source)[:2]:
            for args in _inputs_for(cls, sizes):
                mark = watch.mark()
                ok = False
                with watch:
                    torch.manual_seed(0)
                    mod = build(Found("model", cls.__name__, cls, "run"), sizes, found).eval()
                    with torch.no_grad():
                        mod(**args)
                    ok = True
                if ok and watch.top() is not None and watch.top().calls:
                    watch.synthetic = True
                    shown = ", ".join(f"{n} {tuple(v.shape)}" for n, v in args.items())
                    line = f"{cls.__name__}({shown}) called by the check (your file never calls its model)"
                    watch.entries.append(line)
                    return line
                # the calls it made before it failed stay (a component called as its caller calls it);
                # the failed top-level call does not stand for a run
                watch.top_calls = mark[1]
                watch.raised, watch.raised_in, watch.errors = saved[0], saved[1], list(saved[2])
    except Exception:
        return None
    finally:
        watch.raised, watch.raised_in, watch.errors = saved[0], saved[1], list(saved[2])
    return None


def _inputs_for(cls, sizes):
    try:
        params = [p for p in inspect.signature(cls.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"]
    except (TypeError, ValueError):
        return
    vocab, pad = sizes.vocab, 0
    g = torch.Generator().manual_seed(0)

    def ids(T):
        t = torch.randint(1, max(2, vocab), (2, T), generator=g)
        t[t == pad] = (pad + 1) % max(2, vocab)
        t[1, T - 2:] = pad  # the second row ends in padding: the masks their model builds show their convention
        return t
    T = max(3, min(6, sizes.max_len))
    args, seqs = {}, 0
    for p in params:
        n = p.name
        if re.fullmatch(r"attention_mask|input_mask|attn_mask_ids", n) and seqs == 1:
            first = next(iter(args.values()))
            args[n] = (first != pad).long()  # Hugging Face's convention for this name: 1 = a real token
            continue
        if _NOT_INPUT.search(n) or p.default is not p.empty and seqs >= 1:
            if p.default is p.empty:
                return
            continue
        if seqs >= 2 or not (_IDS.search(n) or _TGT.search(n) or seqs == 0):
            if p.default is p.empty:
                return
            continue
        args[n] = ids(T - 1 if seqs == 1 else T)
        seqs += 1
    if args:
        yield args
    if params and params[0].default is params[0].empty:  # a model that takes embeddings: (B, T, d)
        yield {params[0].name: torch.randn(2, T, sizes.d_model, generator=g)}


