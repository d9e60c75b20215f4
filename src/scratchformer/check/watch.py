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

def _tensors(v):
    if isinstance(v, torch.Tensor):
        yield v
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from _tensors(x)


def _plain(v) -> bool:
    """A value a call can be given again as it was: a number, a switch, a word, None."""
    return v is None or isinstance(v, (bool, int, float, str))


class RunFacts:
    """The checks' questions, answered from one watched run (`Watch`); every answer is None where the run
    did not show it, and the checks then fall back to what they did before (names, probing)."""

    def __init__(self, watch: Watch | None):
        self.watch = watch
        self.seen = list(watch.instances.values()) if watch is not None else []
        self._causal: dict = {}
        self.inverted: dict = {}  # classes their model passed an additive mask that hides the words

    def __bool__(self) -> bool:
        return any(s.calls for s in self.seen) or bool(self.watch is not None and self.watch.functions)

    # which instance of a class stands for it: one that was called, a causal one first (the stronger check)
    def representative(self, cls) -> Seen | None:
        if self.watch is None or not isinstance(cls, type):
            return None
        called = self.watch.called(cls)
        if not called:
            built = self.watch.of_class(cls)
            return built[0] if built else None
        inside = [s for s in called if s.calls[0].parent is not None]  # as the model uses it, not a side demo
        # the configuration their model repeats most (its layers' attention, not the one cross-attention)
        def config(s):
            return tuple(sorted((k, v) for k, v in s.ctor.items() if _plain(v) and "drop" not in k.lower()))
        counts = {}
        for s in inside:
            counts[config(s)] = counts.get(config(s), 0) + 1
        inside.sort(key=lambda s: -counts[config(s)])
        called = inside + [s for s in called if s not in inside]
        for s in called:
            if self.causal_instance(s):
                return s
        return called[0]

    def ctor(self, cls) -> dict | None:
        """The arguments their program built `cls` with: the representative's, else another instance's (copies
        made with copy.deepcopy, as `clones()` makes them, never pass through __init__)."""
        s = self.representative(cls)
        if s is not None and s.ctor:
            return s.ctor
        if self.watch is None or not isinstance(cls, type):
            return None
        return next((x.ctor for x in self.watch.of_class(cls) if x.ctor), None)

    def call_args(self, cls) -> dict:
        s = self.representative(cls)
        return s.calls[0].args if s is not None and s.calls else {}

    def raised_in(self, name: str) -> str | None:
        w = self.watch
        return w.raised if w is not None and w.raised and w.raised_in == name else None

    # causality as used: does output i move when input j > i changes, on their own call?
    def causal_instance(self, s: Seen) -> bool | None:
        key = id(s.obj)
        if key not in self._causal:
            self._causal[key] = _reads_only_past(s)
        return self._causal[key]

    def causal_in_use(self, cls) -> bool | None:
        """True: some instance of it is causal where the program uses it; False: every use reads the future;
        None: not called, or not a sequence-to-sequence shape."""
        if self.watch is None or not isinstance(cls, type):
            return None
        got = [self.causal_instance(s) for s in self.watch.called(cls)]
        got = [g for g in got if g is not None]
        if not got:
            return None
        return any(got)

    def decoder_reads_future(self, source: str):
        """(True, the input changed) when their top model, on its own first call, moves an earlier output
        position as the last token of its decoder input changes, and the model is a decoder: two token
        sequences in (an encoder-decoder), or one with a causal intent in the file (a `tril`, `is_causal`,
        `generate`, ...). (False, name) when it does not; None when the run cannot tell."""
        import copy
        top = self.watch.top() if self.watch is not None else None
        if top is None or not top.calls:
            return None
        args = dict(top.calls[0].args)
        seqs = [n for n, v in args.items() if _token_ids(n, v)]
        if not seqs:
            return None
        if len(seqs) >= 2:  # an encoder-decoder: the target sequence is the decoder's input
            name = next((n for n in seqs if _TGT.search(n)), None)
            if name is None:
                return None
        else:
            if not causal_intent(source):
                return None
            name = seqs[0]
        ids = args[name]
        changed = dict(args)
        bumped = ids.clone()
        bumped[:, -1] = torch.where(bumped[:, -1] > 1, bumped[:, -1] - 1, bumped[:, -1] + 1)
        changed[name] = bumped
        for n, v in args.items():  # targets beside the ids (the loss): not the question here
            if n not in seqs and _TARGET.search(n) and isinstance(v, torch.Tensor) and not v.is_floating_point() \
                    and v.shape == ids.shape:
                changed[n] = args[n] = None
        try:
            mod = safe_copy(top.obj).eval()
            with torch.no_grad():
                a, b, a2 = recall(mod, args), recall(mod, changed), recall(mod, args)
        except Exception:
            return None
        if not _same_output(a, a2):
            return None  # not repeatable in eval (dropout left on): the property cannot be read
        a = a if isinstance(a, torch.Tensor) else next(_tensors(a), None)
        b = b if isinstance(b, torch.Tensor) else next(_tensors(b), None)
        if a is None or b is None or a.shape != b.shape or a.dim() < 3 or a.shape[:2] != ids.shape:
            return None
        moved = [t for t in range(ids.shape[1] - 1)
                 if not torch.allclose(a[:, t], b[:, t], rtol=1e-5, atol=1e-6, equal_nan=True)]
        if not moved:
            return False, name
        # how it reads the future says why: every earlier position (no causal mask), or the one just before
        # (a mask one ahead); other patterns (positions mixed by a head split, say) are not the mask's
        T = ids.shape[1]
        why = "all" if 0 in moved else "one ahead" if moved == [T - 2] else "other"  # the first position reads the last
        return True, name, why

    def ignores_its_input(self) -> str | None:
        """A one-input model whose output does not move when its input changes at all: the name of its
        cross-attention when it holds one (called without the input as its keys and values), '' otherwise,
        None when the run cannot tell."""
        top = self.watch.top() if self.watch is not None else None
        if top is None or not top.calls:
            return None
        args = dict(top.calls[0].args)
        xs = [n for n, v in args.items() if isinstance(v, torch.Tensor) and v.dim() >= 2 and "mask" not in n.lower()
              and not _TARGET.search(n)]
        if len(xs) != 1:
            return None
        x = args[xs[0]]
        changed = dict(args)
        if x.is_floating_point():
            changed[xs[0]] = x + 1.0 + x.abs()
        else:
            changed[xs[0]] = torch.where(x > 1, x - 1, x + 1)
        try:
            mod = safe_copy(top.obj).eval()
            with torch.no_grad():
                a, b, a2 = recall(mod, args), recall(mod, changed), recall(mod, args)
        except Exception:
            return None
        if not _same_output(a, a2) or not _same_output(a, b):
            return None
        cross = next((n for n, m in top.obj.named_modules() if re.search(r"cross|enc_?dec|src_attn", n.split(".")[-1], re.I)), None)
        return cross or ""

    def decoder_ignores_source(self) -> bool | None:
        """An encoder-decoder whose output does not move when its source changes (its cross-attention reads the
        decoder's own states, not the memory): True; False when it moves; None when the run cannot tell."""
        top = self.watch.top() if self.watch is not None else None
        if top is None or not top.calls:
            return None
        args = dict(top.calls[0].args)
        seqs = [n for n, v in args.items() if _token_ids(n, v)]
        tgt = next((n for n in seqs if _TGT.search(n)), None)
        if len(seqs) < 2 or tgt is None:
            return None
        src = next(n for n in seqs if n != tgt)
        changed = dict(args)
        bumped = args[src].clone()
        bumped[:, 0] = torch.where(bumped[:, 0] > 1, bumped[:, 0] - 1, bumped[:, 0] + 1)
        changed[src] = bumped
        try:
            import copy
            mod = safe_copy(top.obj).eval()
            with torch.no_grad():
                a, b, a2 = recall(mod, args), recall(mod, changed), recall(mod, args)
        except Exception:
            return None
        if not _same_output(a, a2):
            return None
        return _same_output(a, b)

    def top_reads_future(self) -> bool | None:
        """Their top model on its own first call, and again with the last token changed: True when an
        earlier position's output moved (it reads the future), False when none did, None when its call
        takes no token ids (B, T) or gives no (B, T, ...) output."""
        if "_top_future" in self._causal:
            return self._causal["_top_future"]
        import copy
        top = self.watch.top() if self.watch is not None else None
        out = None
        if top is not None and top.calls:
            args = dict(top.calls[0].args)
            name = next((n for n, v in args.items() if isinstance(v, torch.Tensor) and v.dim() == 2
                         and not v.is_floating_point() and v.dtype != torch.bool and v.shape[1] > 1), None)
            if name is not None:
                ids = args[name]
                changed = dict(args)
                bumped = ids.clone()
                bumped[:, -1] = torch.where(bumped[:, -1] > 1, bumped[:, -1] - 1, bumped[:, -1] + 1)
                changed[name] = bumped
                for n, v in args.items():  # targets given beside the ids: the loss is not the question
                    if n != name and _TARGET.search(n) and isinstance(v, torch.Tensor) and not v.is_floating_point() \
                            and v.shape == ids.shape:
                        changed[n] = args[n] = None
                try:
                    mod = safe_copy(top.obj).eval()
                    with torch.no_grad():
                        a, b = recall(mod, args), recall(mod, changed)
                    a = a if isinstance(a, torch.Tensor) else next(_tensors(a), None)
                    b = b if isinstance(b, torch.Tensor) else next(_tensors(b), None)
                    if a is not None and b is not None and a.shape == b.shape and a.dim() >= 2 \
                            and a.shape[:2] == ids.shape:
                        out = not torch.allclose(a[:, :-1], b[:, :-1], rtol=1e-5, atol=1e-6, equal_nan=True)
                except Exception:
                    out = None
        self._causal["_top_future"] = out
        return out

    # the mask convention, read from the masks their model built for their own padded input
    def mask_form(self, cls=None):
        """The convention of the masks their model passed (to `cls` only, when given; else to the innermost
        component that got one) for their own padded input: "keep", "pad" or "add", with dtype and rank."""
        from .masks import MaskForm, _dtype_of
        top = self.watch.top() if self.watch is not None else None
        if top is None or not top.calls:
            return None
        ids = next((t for t in _tensors(list(top.calls[0].args.values()))
                    if t.dim() == 2 and not t.is_floating_point() and t.dtype != torch.bool), None)
        if ids is None:
            return None
        depth = {id(s.obj): sum(id(m) in self.watch.instances for m in s.obj.modules()) for s in self.seen}
        pool = [s for s in self.seen if cls is None or type(s.obj) is cls]
        for pad in self._pad_ids(top):
            P = ids == pad
            if not P.any() or P.all() or not (~P).any(dim=1).all():
                continue
            B, S = ids.shape
            for s in sorted(pool, key=lambda s: (depth[id(s.obj)], s.calls[0].order if s.calls else 1 << 30)):
                for c in s.calls[:1]:
                    for name, v in c.args.items():
                        if not isinstance(v, torch.Tensor) or "mask" not in name.lower() or "key_padding" in name.lower():
                            continue
                        form = _read_mask(v, P, B, S)
                        if form is not None:
                            kind, ndim = form
                            if kind == "add-inverted":
                                self.inverted.setdefault(type(s.obj).__name__, 1)
                                kind = "add"
                            who = type(s.obj).__name__
                            return MaskForm(kind, _dtype_of(v), ndim if ndim in (3, 4) else None,
                                            f"the mask your model passed to {who} for your own padded input",
                                            f"你的模型为你自己带 padding 的输入传给 {who} 的掩码")
        return None

    def inverted_masks(self) -> str | None:
        self.mask_form()
        for s in self.seen:
            self.mask_form(type(s.obj)) if s.calls else None
        return ", ".join(sorted(self.inverted)) or None

    def pad_ids(self, declared: bool = False) -> list[int]:
        """The padding ids their program names (a `pad` argument or config field, an embedding's padding_idx);
        0 last unless `declared` (then only what they named)."""
        top = self.watch.top() if self.watch is not None else None
        if top is None:
            return [] if declared else [0]
        return self._pad_ids(top, fallback=not declared)

    def _pad_ids(self, top: Seen, fallback: bool = True) -> list[int]:
        out = []
        for s in [top] + self.seen:
            for n, v in list(s.ctor.items()) + [kv for v in s.ctor.values() for kv in _fields(v).items()]:
                if isinstance(n, str) and "pad" in n.lower() and isinstance(v, int) and not isinstance(v, bool):
                    out.append(v)
        for m in top.obj.modules():
            if isinstance(m, nn.Embedding) and m.padding_idx is not None:
                out.append(int(m.padding_idx))
        out += _vocabulary_pads(getattr(self, "module", None))
        if fallback:
            out.append(0)
        return list(dict.fromkeys(out))

    # the sizes their own modules were built with
    def sizes_into(self, sizes, module) -> None:
        """Fill `sizes` from the run: the top model's constructor arguments and config first, then every
        other instance's, then live attributes and shapes (heads on an attention, the embedding's width).
        Sizes the learner gave with --size or `# check:` keep winning."""
        from .sizes import SIZE_NAMES
        if not self.seen:
            return
        fixed = {k for k, v in sizes.came_from.items() if "--size" in v or "# check:" in v}
        if self.watch.synthetic:  # our call was built from the sizes their file states: those keep their source
            fixed |= set(sizes.came_from)
        got: dict = {}

        def take(size, value, where):
            if size not in got and size not in fixed and isinstance(value, int) and not isinstance(value, bool) \
                    and value > 0:
                got[size] = (value, where)

        def read(mapping: dict, where: str):
            for size, names in SIZE_NAMES.items():
                for n, v in mapping.items():
                    if isinstance(n, str) and n.lower() in names:
                        take(size, v, f"{n}={v} {where}")

        top = self.watch.top()
        reps = {id(r.obj) for r in (self.representative(type(s.obj)) for s in self.seen) if r is not None}
        rest = [s for s in self.seen if s is not top]
        order = ([top] if top is not None else []) + [s for s in rest if id(s.obj) in reps] \
            + [s for s in rest if id(s.obj) not in reps]  # each class's representative before its odd instances
        config = None
        whose = "the check's call of your model" if self.watch.synthetic else "your run"
        for s in order:
            cname = type(s.obj).__name__
            read(s.ctor, f"in {whose}: {cname}(...)")
            for n, v in s.ctor.items():
                fields = _fields(v)
                if fields:
                    read(fields, f"in the {n} passed to {cname}(...) in {whose}")
                    if config is None and not isinstance(v, nn.Module):
                        config = v
        for s in order:  # live attributes: self.n_heads = n_heads
            attrs = {k: v for k, v in vars(s.obj).items() if not k.startswith("_")}
            read({k: v for k, v in attrs.items() if k.lower() in SIZE_NAMES["heads"] + SIZE_NAMES["kv_heads"]},
                 f"on your {type(s.obj).__name__}")
            for m in s.obj.modules():
                if isinstance(m, nn.MultiheadAttention):
                    take("heads", m.num_heads, f"num_heads={m.num_heads} of the nn.MultiheadAttention in your run")
                    take("d_model", m.embed_dim, f"embed_dim={m.embed_dim} of the nn.MultiheadAttention in your run")
        if top is not None and "d_model" not in got:
            embs = [m for m in top.obj.modules() if isinstance(m, nn.Embedding)]
            if embs:
                e = max(embs, key=lambda m: m.num_embeddings)
                take("d_model", e.embedding_dim, f"the width of your run's embedding ({e.embedding_dim})")
                take("vocab", e.num_embeddings, f"the rows of your run's embedding ({e.num_embeddings})")
        d, h = (got.get("d_model") or (sizes.d_model,))[0], (got.get("heads") or (sizes.heads,))[0]
        if d % h:
            got.pop("heads", None)
            got.pop("d_model", None)
        for size, (value, where) in got.items():
            setattr(sizes, size, value)
            sizes.came_from[size] = where
        if config is not None:
            sizes.config = _without_dropout(config)


def _fields(v) -> dict:
    if isinstance(v, dict):
        return {k: x for k, x in v.items() if isinstance(k, str)}
    if isinstance(v, (nn.Module, torch.Tensor, type)) or _plain(v) or callable(v):
        return {}
    try:
        return {k: x for k, x in vars(v).items() if not k.startswith("_")}
    except TypeError:
        return {}


def _without_dropout(cfg):
    import copy
    try:
        out = copy.deepcopy(cfg)
    except Exception:
        return cfg
    items = out.items() if isinstance(out, dict) else list(_fields(out).items())
    for k, v in list(items):
        if "drop" in k.lower() and isinstance(v, float):
            try:
                if isinstance(out, dict):
                    out[k] = 0.0
                else:
                    setattr(out, k, 0.0)
            except Exception:
                pass
    return out


def _read_mask(m: torch.Tensor, P: torch.Tensor, B: int, S: int):
    """("keep" | "pad" | "add", rank) when the mask `m` marks exactly the padding `P` (B, S) along its keys."""
    if m.dim() < 2 or m.shape[-1] != S or m.shape[0] != B:
        return None
    rows = m.reshape(B, -1, S)  # (B, R, S): every query row, every head
    if not torch.equal(rows.amin(1), rows.amax(1)):
        return None  # a causal triangle in it: not the padding alone
    r = rows[:, 0, :]
    if r.is_floating_point():
        at_pad, at_tok = r[P], r[~P]
        if (at_tok == 0).all() and (at_pad <= -1e4).all():
            return "add", m.dim()
        if (at_pad == 0).all() and (at_tok <= -1e4).all():
            return "add-inverted", m.dim()  # added to the scores, it hides the words: inverted wherever it is used
        if (at_tok == 0).all() and (at_pad == 1).all():
            return "pad", m.dim()
        if (at_tok == 1).all() and (at_pad == 0).all():
            return "keep", m.dim()
        return None
    b = r.bool()
    if b[P].all() and not b[~P].any():
        return "pad", m.dim()
    if not b[P].any() and b[~P].all():
        return "keep", m.dim()
    return None


def _reads_only_past(s: Seen) -> bool | None:
    """Their instance on their own first call, and again with the last position of its sequence input
    changed: True when no earlier position's output moved (causal), False when one did, None when the call
    has no (B, T, C) input or cannot be repeated."""
    import copy
    if not s.calls:
        return None
    args = dict(s.calls[0].args)
    first = next(((n, v) for n, v in args.items() if isinstance(v, torch.Tensor) and v.dim() == 3
                  and v.is_floating_point() and v.shape[1] > 1), None)
    if first is None:
        return None
    _, x = first
    T = x.shape[1]
    changed = dict(args)
    bump = torch.zeros_like(x)
    bump[:, -1] = 1.0 + x[:, -1].abs()
    for n, v in args.items():  # q, k, v given the same tensor: change it everywhere
        if isinstance(v, torch.Tensor) and v.shape == x.shape and torch.equal(v, x):
            changed[n] = v + bump
    others = [v for n, v in args.items() if isinstance(v, torch.Tensor) and v.dim() == 3 and v.is_floating_point()
              and v is not x and not (v.shape == x.shape and torch.equal(v, x))]
    if others:
        return None  # keys from another sequence (cross-attention, memory): not a question of causality
    try:
        mod = safe_copy(s.obj).eval()
        with torch.no_grad():
            a = recall(mod, args)
            b = recall(mod, changed)
            a2 = recall(mod, args)
    except Exception:
        return None
    if not _same_output(a, a2):
        return None  # not repeatable in eval (dropout left on): causality cannot be read
    a = next(_tensors(a), None) if not isinstance(a, torch.Tensor) else a
    b = next(_tensors(b), None) if not isinstance(b, torch.Tensor) else b
    if a is None or b is None or a.shape != b.shape or a.dim() < 2 or a.shape[1] != T:
        return None
    return bool(torch.allclose(a[:, :-1], b[:, :-1], rtol=1e-5, atol=1e-6, equal_nan=True))


def recall(mod: nn.Module, args: dict):
    """Call `mod` again with the arguments a watched call recorded (by parameter name; *args and **kwargs
    as they were)."""
    import copy
    params = list(inspect.signature(mod.forward).parameters.values())
    has_var = any(p.kind == p.VAR_POSITIONAL for p in params)
    try:  # a cache dict or list their call filled in place: each call gets its own copy, as it was
        args = copy.deepcopy(args)
    except Exception:
        pass
    pos, kw = [], {}
    for p in params:
        if p.name not in args:
            continue
        v = args[p.name]
        if p.kind == p.VAR_POSITIONAL:
            pos.extend(v)
        elif p.kind == p.VAR_KEYWORD:
            kw.update(v)
        elif p.kind == p.POSITIONAL_ONLY or has_var and p.kind == p.POSITIONAL_OR_KEYWORD:
            pos.append(v)
        else:
            kw[p.name] = v
    return mod(*pos, **kw)


# --- a run of our making, for a file that never calls its own model ----------------------------------

_TGT = re.compile(r"tgt|trg|target_in|dec|decoder|^y$|output_ids|labels_in", re.I)
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


def _same_output(a, b) -> bool:
    a = a if isinstance(a, torch.Tensor) else next(_tensors(a), None)
    b = b if isinstance(b, torch.Tensor) else next(_tensors(b), None)
    return a is not None and b is not None and a.shape == b.shape and torch.allclose(a, b, rtol=1e-6, atol=1e-7, equal_nan=True)


_TARGET = re.compile(r"target|label|^y(b|s|_true)?$|loss|gold|answer|dec_out|tgt_out|output_ids", re.I)


def _token_ids(name: str, v) -> bool:
    """A (B, T) tensor of token ids given as an input: not a mask (its name says mask, or it holds only 0 and 1),
    not the targets given beside the inputs."""
    if not isinstance(v, torch.Tensor) or v.dim() != 2 or v.shape[1] < 2 or v.is_floating_point() or v.dtype == torch.bool:
        return False
    if "mask" in name.lower() or _TARGET.search(name):
        return False
    return not bool(((v == 0) | (v == 1)).all())


def padding_value(seqs) -> int | None:
    """The id their data pads with, read from their own batches: a value that fills only a suffix of every row
    it is in, in every batch, and that is absent from some row or fills suffixes of different lengths (so a
    sentence-final '.' in every row, always one long, is not taken)."""
    seqs = [t for t in seqs if t is not None and t.dim() == 2 and t.shape[1] >= 2]
    if not seqs:
        return None
    ends = torch.unique(torch.cat([t[:, -1] for t in seqs])).tolist()
    for v in ends:
        ok, lengths, absent = True, set(), False
        for t in seqs:
            hit = t == v
            if not bool((hit[:, 1:] >= hit[:, :-1]).all()):  # once v starts in a row, it never stops
                ok = False
                break
            lengths.update(hit.sum(1).tolist())
            absent = absent or not bool(hit.any(1).all())
        # padding as data is padded: id 0 (the tutorials' and the tokenizers' habit), a run of two or more in
        # some row, and a row without it; a random batch whose row happens to end in a lone token is not padding
        if ok and int(v) == 0 and max(lengths) >= 2 and absent:
            return int(v)
    return None


_PAD_TOKEN = re.compile(r"<pad>|\[pad\]|pad|<p>|p|<blank>|填充", re.I)
_ONE_LETTER = re.compile(r"p", re.I)  # 'P' is padding only at id 0 (a character vocabulary has its own 'P')


def _vocabulary_pads(module) -> list[int]:
    """The padding id their vocabulary names: a dict {'P': 0, ...} / {'<pad>': 0} or a list ['<pad>', ...] at the
    top of their file."""
    out = []
    if module is None:
        return out
    for v in vars(module).values():
        if isinstance(v, dict) and 2 <= len(v) <= 100000:
            for k, i in v.items():
                if isinstance(k, str) and isinstance(i, int) and not isinstance(i, bool) and _PAD_TOKEN.fullmatch(k.strip()) \
                        and (i == 0 or not _ONE_LETTER.fullmatch(k.strip())):
                    out.append(i)
                    break
        elif isinstance(v, list) and 2 <= len(v) <= 100000 and isinstance(v[0], str):
            hit = next((i for i, k in enumerate(v[:4]) if isinstance(k, str) and _PAD_TOKEN.fullmatch(k.strip())
                        and (i == 0 or not _ONE_LETTER.fullmatch(k.strip()))), None)
            if hit is not None:
                out.append(hit)
    return out


def causal_intent(source: str) -> bool:
    """Does their file mean a model that predicts the next token (a `tril`, `is_causal`, `generate`, a GPT), and
    not a masked language model or an encoder?"""
    intent = re.search(r"\btril\b|\btriu\b|causal|generate|multinomial|subsequent|look_?ahead|因果|自回归|"
                       r"语言模型|gpt|lm_?head|causal_?lm|language_?model|next[ _]token", source, re.I)
    masked_lm = re.search(r"mlm|masked_?lm|mask_token|\bbert\b", source, re.I)
    return bool(intent) and not masked_lm


def safe_copy(obj):
    """copy.deepcopy of their module, after their own non-leaf tensors kept as plain attributes (a `last_loss`
    from the training step, which deepcopy refuses) are detached."""
    import copy
    try:
        return copy.deepcopy(obj)
    except RuntimeError:
        mods = obj.modules() if isinstance(obj, nn.Module) else []
        for m in mods:
            for k, v in list(vars(m).items()):
                if isinstance(v, torch.Tensor) and v.grad_fn is not None:
                    setattr(m, k, v.detach())
        return copy.deepcopy(obj)
