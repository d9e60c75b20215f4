"""Worker processes for prepared data: a run of tasks, results in task order, shared between
this process and a pool of spawned workers that the steps of a prepare share.

A prepare is several runs one after another (the row index, the vocabulary, the ids; per file),
each a few seconds of ~4 MiB tasks. Starting a spawned worker costs a Python start and its
imports (~0.5 s), and spawn also imports the parent's `__main__` module in every worker: a
script (or a benchmark) that imports torch made each worker import it too, seconds each. So:

  * `workers` counts this process: it runs tasks too, with a pool of `workers - 1` beside it;
  * the pool starts in the background, and gets tasks only once a worker is up: until then
    this process runs them, so no run waits for workers to start (a small file's index is
    often done before they are);
  * one pool serves every run and is closed after IDLE_S seconds without one (`close_workers()`
    closes it now): index, vocabulary and ids start workers once, not three times;
  * workers start without the parent's `__main__`: the tasks are functions of this package, so
    nothing they need lives there (`_without_main`).

With `workers` 1, or a single task, the tasks run in this process (no pool at all).
"""
from __future__ import annotations

import os
import sys
import threading
import types
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from multiprocessing import get_context
from typing import Callable, Iterator, Sequence

from ..errors import UserError

IDLE_S = 10.0  # an idle pool is kept this long for the next run of the same prepare

_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None
_pool_workers = 0
_started: list[Future] = []  # one trivial task per worker, sent at the start: done = a worker is up
_users = 0  # runs using the pool now: an idle close never closes it under one
_timer: threading.Timer | None = None  # the idle close, cancelled when a run takes the pool again


def run_tasks(fn: Callable, tasks: Sequence, workers: int) -> Iterator:
    """fn(task) for each task, results in task order, on `workers` processes: this one and a
    pool of workers - 1 (1: this one alone). The pool holds at most 2 tasks per worker and this
    process at most 2 x workers results ahead, so memory stays bounded by a few tasks. A
    task's UserError is raised here, in task order, with its message."""
    n = len(tasks)
    if workers <= 1 or n <= 1:
        for t in tasks:
            yield _unwrap(_guarded(fn, t))
        return
    ex = _acquire(workers - 1)
    done: dict[int, object] = {}  # task -> result, computed here or fetched, not yet yielded
    sent: dict[int, Future] = {}  # task -> its future in the pool
    nxt = want = 0  # the next task to hand out (tasks go out in order), the next result to yield
    try:
        while want < n:
            if any(f.done() for f in _started):  # a worker is up: keep the pool busy
                while nxt < n and len(sent) < 2 * (workers - 1):
                    sent[nxt] = ex.submit(_guarded, fn, tasks[nxt])
                    nxt += 1
            if want in done:
                yield _unwrap(done.pop(want))
                want += 1
                continue
            f = sent.get(want)
            if f is None or (not f.done() and nxt < n and len(done) < 2 * workers):
                done[nxt] = _guarded(fn, tasks[nxt])  # the next result is not ready: work here meanwhile
                nxt += 1
                continue
            done[want] = sent.pop(want).result()
    except BrokenProcessPool:  # a worker died (killed, out of memory): the next run starts a new pool
        _release(broken=True)
        ex = None
        raise
    finally:
        for f in sent.values():  # stopped early (an error): what has not started is dropped
            f.cancel()
        if ex is not None:
            _release()


def _guarded(fn, task):
    try:
        return fn(task)
    except UserError as e:
        return ("__error__", str(e))


def _unwrap(res):
    if isinstance(res, tuple) and len(res) == 2 and res[0] == "__error__":
        raise UserError(res[1])
    return res


def _acquire(workers: int) -> ProcessPoolExecutor:
    global _pool, _pool_workers, _users, _timer
    with _lock:
        if _timer is not None:
            _timer.cancel()
            _timer = None
        if _pool is not None and _pool_workers != workers and _users == 0:
            _pool.shutdown(wait=False, cancel_futures=True)
            _pool = None
        if _pool is None:
            _pool, _pool_workers = _start(workers), workers
        _users += 1  # (a pool of another size that a run is using serves this one too)
        return _pool


def _release(broken: bool = False) -> None:
    global _pool, _users, _timer
    with _lock:
        _users -= 1
        if broken and _pool is not None:
            _pool.shutdown(wait=False, cancel_futures=True)
            _pool = None
        if _pool is None or _users > 0:
            return
        _timer = threading.Timer(IDLE_S, _close_if_idle, args=(_pool,))
        _timer.daemon = True  # never keeps the interpreter alive; at exit concurrent.futures joins the workers
        _timer.start()


def _close_if_idle(pool) -> None:
    global _pool
    with _lock:
        if _pool is not pool or _users > 0:  # used again since, or replaced
            return
        _pool = None
    pool.shutdown(wait=True)


def close_workers() -> None:
    """Close the shared pool now and wait for its workers to exit (their CPU time then shows
    in `resource.getrusage(RUSAGE_CHILDREN)`)."""
    global _pool, _timer
    with _lock:
        if _timer is not None:
            _timer.cancel()
            _timer = None
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=True)


def _start(workers: int) -> ProcessPoolExecutor:
    """A spawn pool with all `workers` starting now (in the background), without the parent's
    __main__; `_started` tells when one is up."""
    ex = ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"))
    with _without_main():  # each submit starts a worker while none is idle (none is: they are starting)
        _started[:] = [ex.submit(os.getpid) for _ in range(workers)]
    return ex


@contextmanager
def _without_main():
    """Spawned workers first import the parent's `__main__` (for functions defined there);
    a module without a file or spec in its place is imported by nobody. Only while the workers
    start, in this thread."""
    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main
        else:
            del sys.modules["__main__"]


def _forget_in_child() -> None:
    """A forked child does not own its parent's pool (nor its lock's state)."""
    global _pool, _pool_workers, _users, _lock, _timer, _started
    _pool, _pool_workers, _users, _lock, _timer, _started = None, 0, 0, threading.Lock(), None, []


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
