"""Dynamic batching across requests, with a bounded queue in front of it.

Requests that arrive within `max_wait` seconds of the first one waiting are run as one batch,
as long as the batch's padded size (inputs x the longest input, in tokens) stays within
`max_tokens`, and only requests with the same `key` (for translation: the same beam and length
settings) share a batch. A request larger than the budget runs alone. With `enabled=False`
every request runs alone (the "batching off" of the load benchmark).

Admission control: at most `max_queue` requests wait; one more is refused at once (`Overloaded`,
which the app turns into 429 with Retry-After) instead of waiting ever longer.

Isolation: the batch function gets every input of the batch; if it raises, each request of the
batch is run again on its own, so only the request whose input is at fault gets the error and
its batch-mates get their normal answers.

The model runs in one worker thread per batcher (torch releases the GIL inside its ops, so the
event loop keeps accepting and answering other routes meanwhile).
"""
from __future__ import annotations

import asyncio
import collections
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Sequence


class Overloaded(Exception):
    """The queue is full; `retry_after` (whole seconds) is an estimate of when it drains."""

    def __init__(self, retry_after: int, depth: int):
        super().__init__(f"the server is at capacity ({depth} requests waiting); retry after {retry_after} s")
        self.retry_after, self.depth = retry_after, depth


@dataclass
class _Pending:
    items: list[Any]
    tokens: list[int]
    key: Hashable
    future: asyncio.Future
    arrived: float = field(default_factory=time.perf_counter)


class Batcher:
    """`await batcher.submit(items, tokens, key)` -> one result per item, computed in a batch
    with other requests' items by `fn(items, key) -> results` (same order)."""

    def __init__(self, name: str, fn: Callable[[list[Any], Hashable], Sequence[Any]], max_tokens: int = 4096,
                 max_wait: float = 0.005, max_queue: int = 256, enabled: bool = True,
                 on_batch: Callable[[int, int, int, float], None] | None = None):
        self.name, self.fn = name, fn
        self.max_tokens, self.max_wait, self.max_queue, self.enabled = max_tokens, max_wait, max_queue, enabled
        self.on_batch = on_batch  # (requests, items, tokens, seconds) after every batch: metrics
        self._queue: collections.deque[_Pending] = collections.deque()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"batch-{name}")
        self._seconds_per_request = 0.01  # running estimate, for Retry-After
        self.batches: list[int] = []  # requests per batch, most recent last (bounded): tests and benchmarks read it
        self.owner: Any = None  # what the app made it for (the model it runs), and the route
        self.route: str | None = None
        self._busy = False  # a batch taken from the queue and not yet answered

    @property
    def idle(self) -> bool:
        """Nothing waiting and nothing running: stopping now drops no request."""
        return not self._queue and not self._busy

    @property
    def depth(self) -> int:
        return len(self._queue)

    def start(self) -> None:
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        self._executor.shutdown(wait=True)

    async def submit(self, items: list[Any], tokens: list[int], key: Hashable = None) -> list[Any]:
        if len(self._queue) >= self.max_queue:
            retry = max(1, math.ceil(len(self._queue) * self._seconds_per_request))
            raise Overloaded(retry, len(self._queue))
        self.start()
        fut = asyncio.get_running_loop().create_future()
        self._queue.append(_Pending(list(items), list(tokens), key, fut))
        self._wake.set()
        return await fut

    # ------------------------------------------------------------------ the worker

    def _cost(self, batch: list[_Pending], extra: _Pending | None = None) -> int:
        reqs = batch + ([extra] if extra is not None else [])
        n = sum(len(r.items) for r in reqs)
        longest = max((t for r in reqs for t in r.tokens), default=0)
        return n * max(longest, 1)  # (inputs, longest) is what a padded batch computes

    def _take(self, batch: list[_Pending]) -> bool:
        """Move the first waiting request that fits `batch` into it; False when none fits."""
        for i, r in enumerate(self._queue):
            if r.key == batch[0].key:
                if self._cost(batch, r) > self.max_tokens:
                    return False  # keep arrival order within a key: no overtaking
                del self._queue[i]
                batch.append(r)
                return True
        return False

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            while not self._queue:
                self._wake.clear()
                await self._wake.wait()
            batch = [self._queue.popleft()]
            self._busy = True
            try:
                await self._answer(batch, loop)
            finally:
                self._busy = False

    async def _answer(self, batch: list[_Pending], loop) -> None:
        """Gather company for `batch` (within `max_wait`), run it, set every request's result."""
        if self.enabled:
            deadline = batch[0].arrived + self.max_wait
            while True:
                while self._take(batch):
                    pass
                left = deadline - time.perf_counter()
                if left <= 0 or self._cost(batch) >= self.max_tokens:
                    break
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), left)
                except asyncio.TimeoutError:
                    while self._take(batch):
                        pass
                    break
        batch = [r for r in batch if not r.future.done()]  # a client that went away
        if not batch:
            return
        t0 = time.perf_counter()
        outcomes = await loop.run_in_executor(self._executor, self._run, batch)
        seconds = time.perf_counter() - t0
        self._seconds_per_request = 0.8 * self._seconds_per_request + 0.2 * seconds / len(batch)
        self.batches = (self.batches + [len(batch)])[-1000:]
        if self.on_batch is not None:
            self.on_batch(len(batch), sum(len(r.items) for r in batch), sum(sum(r.tokens) for r in batch), seconds)
        for r, out in zip(batch, outcomes):
            if r.future.done():
                continue
            if isinstance(out, BaseException):
                r.future.set_exception(out)
            else:
                r.future.set_result(out)

    def _run(self, batch: list[_Pending]) -> list[Any]:
        """Results (or the exception) per request. One call for the whole batch; when it
        fails, each request alone, so that a bad input fails only its own request."""
        items = [x for r in batch for x in r.items]
        try:
            results = list(self.fn(items, batch[0].key))
            if len(results) != len(items):
                raise RuntimeError(f"{self.name}: {len(results)} results for {len(items)} inputs")
        except Exception as e:  # noqa: BLE001 - isolated below, reported per request
            if len(batch) == 1:
                return [e]
            return [self._run([r])[0] for r in batch]
        out, i = [], 0
        for r in batch:
            out.append(results[i : i + len(r.items)])
            i += len(r.items)
        return out
