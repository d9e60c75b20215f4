"""The server's settings (`ServeConfig`, the `serve` command's flags) and the state of one app
(`ServerState`): the models it serves, a batcher per model and route, readiness, admission,
input limits, reloads (on request or on a changed folder) and draining at shutdown.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..errors import UserError
from ..tasks.faces import words
from .backends import CLASSIFY, EMBEDDINGS, TRANSLATE, Served
from .batching import Batcher, Overloaded
from .metrics import Metrics
from .protocol import ApiError, Texts
from .site import FontCutter

log = logging.getLogger("scratchformer.serve")
API_KEY_ENV = "SCRATCHFORMER_API_KEY"
_KEY_SPACES = " \t\r\n"  # what is stripped around a key, on both sides (ASCII only: bytes of UTF-8 stay)
DECODE_PATHS = ("auto", "static", "lean")  # ServeConfig.decode


@dataclass
class ServeConfig:
    """The server's settings (the `serve` command's flags)."""

    api_key: str | None = None
    batching: bool = True
    max_batch_tokens: int = 8192  # padded tokens (inputs x longest) per batch
    max_wait_ms: float = 5.0  # how long the first request of a batch waits for company
    max_queue: int = 256  # requests waiting per model and route; beyond: 429
    max_body_bytes: int = 1_000_000  # beyond: 413
    max_items: int = 64  # inputs per request; beyond: 422
    max_input_tokens: int = 512  # tokens per input; beyond: 422 (or truncated on request)
    max_new_tokens: int = 512  # completions: max_tokens cap
    max_streams: int = 4  # generations running at once (each in its own thread)
    drain_timeout: float = 30.0  # SIGTERM: seconds in-flight requests get to finish
    header_timeout: float = 10.0  # a request's headers must arrive within it (else the connection closes)
    body_timeout: float = 30.0  # a request's body must arrive within it (else 408)
    reload_on_change: bool = False  # poll the served folders and swap in a newer finished model
    reload_interval: float = 2.0  # seconds between polls
    # translation's decoding path: "auto" = the static compiled step where it can run (else the
    # lean step, and /v1/models says why), "static" = the same, but a model that cannot run it is
    # refused at start, "lean" = never compiled. A long-lived server amortises the compile.
    decode: str = "auto"
    compile_tokens: int = 32  # buckets compiled before ready: sources of 1 .. this many tokens
    compile_beams: tuple[int, ...] | None = None  # beams compiled before ready (None: greedy and the run's beam)
    compile_sentences: tuple[int, ...] = (1,)  # batch sizes (sentences) compiled before ready

    def check(self) -> None:
        for name in ("max_batch_tokens", "max_queue", "max_body_bytes", "max_items", "max_input_tokens",
                     "max_new_tokens", "max_streams"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.max_wait_ms < 0 or self.drain_timeout < 0:
            raise UserError("--max-wait-ms and --drain-timeout must be >= 0")
        if self.decode not in DECODE_PATHS:
            raise UserError(f"--decode must be one of {', '.join(DECODE_PATHS)}, got {self.decode!r}")
        if self.compile_tokens < 0:
            raise UserError(f"--compile-tokens must be >= 0, got {self.compile_tokens}")
        if self.compile_beams is not None and (not self.compile_beams or min(self.compile_beams) < 1):
            raise UserError(f"--compile-beams must list beams >= 1 (e.g. 1,5), got {self.compile_beams}")
        if not self.compile_sentences or min(self.compile_sentences) < 1:
            raise UserError(f"--compile-sentences must list batch sizes >= 1 (e.g. 1,2,4), got {self.compile_sentences}")
        for name in ("header_timeout", "body_timeout", "reload_interval"):
            if not getattr(self, name) > 0:
                raise UserError(f"--{name.replace('_', '-')} must be > 0 seconds, got {getattr(self, name)}")
        self.api_key = check_api_key(self.api_key)


def check_api_key(key: str | None, where: str = "the API key") -> str | None:
    """Secrets fail closed: a key given but empty or only spaces (`--api-key "$KEY"` with KEY
    unset) is refused, never taken as "no key"; spaces around a key are stripped (the header's
    token is stripped the same way), so a key pasted with a newline still works."""
    if key is None:
        return None
    if not isinstance(key, str) or not key.strip():
        raise UserError(f"{where} is empty (or only spaces): give a real key, or leave out both --api-key and "
                        f"{API_KEY_ENV} to serve without one")
    return key.strip(_KEY_SPACES)


# ----------------------------------------------------------------------------- the state

class ServerState:
    """Models, batchers, readiness, reloads and draining of one app."""

    def __init__(self, loader: Callable[[], Sequence[Served]], cfg: ServeConfig):
        self.loader, self.cfg, self.metrics = loader, cfg, Metrics()
        self.models: dict[str, Served] = {}
        self.batchers: dict[tuple[str, str], Batcher] = {}  # of the models served now
        self.retired: list[Batcher] = []  # of models replaced by a reload, until their queues drain
        self.ready = threading.Event()
        self.phase = "loading"  # then "compiling" (the static decoding step, before ready), then ready
        self.draining = False
        self.stopping = threading.Event()  # set at shutdown: generations stop at their next token
        self.load_error: BaseException | None = None
        self.gen_executor = ThreadPoolExecutor(max_workers=cfg.max_streams, thread_name_prefix="generate")
        self.load_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="reload")
        self.gen_slots = asyncio.Semaphore(cfg.max_streams)
        self.gen_waiting = 0
        self.reload_lock = asyncio.Lock()
        self.fonts = FontCutter()
        self.on_load_error: Callable[[BaseException], None] | None = None
        self._tasks: set[asyncio.Task] = set()

    def load(self) -> None:
        try:
            models = list(self.loader())
            # compiled before ready, in this thread, with no request running: a first request
            # pays no compile, and torch.compile (not thread-safe) never runs beside a request
            self.phase = "compiling"
            for m in models:
                m.prepare(self.cfg)
            self.models = {m.name: m for m in models}
            self.ready.set()
            log.info("ready: %s", ", ".join(f"{m.name} ({m.task})" for m in models))
        except BaseException as e:  # noqa: BLE001 - reported by the runner (one line) and the server stops
            self.load_error = e
            if self.on_load_error is not None:
                self.on_load_error(e)

    def admit(self) -> None:
        if self.draining:
            raise ApiError(503, "the server is shutting down", "unavailable", {"Connection": "close"})
        if not self.ready.is_set():
            raise ApiError(503, "the models are still loading; retry shortly (see /ready)", "unavailable",
                           {"Retry-After": "1"})

    def pick(self, name: str | None, route: str) -> Served:
        self.admit()
        if name is None:
            able = [m for m in self.models.values() if route in m.routes]
            if len(able) == 1:
                return able[0]
            if not able:
                raise ApiError(400, f"no served model answers {route}; served: {self._listing()}")
            raise ApiError(400, f"several served models answer {route}: name one in \"model\" "
                                f"({', '.join(m.name for m in able)})")
        m = self.models.get(name)
        if m is None:
            raise ApiError(404, f"model {name!r} is not served here; served: {self._listing()}", "model_not_found")
        if route not in m.routes:
            raise ApiError(400, f"model {name!r} is {words(m.task)} ({m.task} run): it answers "
                                f"{', '.join(m.routes)}, not {route}")
        return m

    def _listing(self) -> str:
        return ", ".join(f"{m.name} ({m.task})" for m in self.models.values()) or "none"

    def limit(self, m: Served, texts: Texts, truncate: bool) -> tuple[list[str], list[int]]:
        """The inputs as a list and their token counts, after the item and token limits."""
        texts = [texts] if isinstance(texts, str) else list(texts)
        cfg = self.cfg
        if not texts:
            raise ApiError(422, "input is empty: give a text or a list of texts")
        if len(texts) > cfg.max_items:
            raise ApiError(422, f"input has {len(texts)} items; the limit is {cfg.max_items} per request "
                                "(the server's --max-items): split the request")
        for i, t in enumerate(texts):
            if not t.strip():
                raise ApiError(422, f"input {i} is empty (or only spaces): there is nothing to read")
            try:
                t.encode("utf-8")
            except UnicodeEncodeError as e:  # JSON can carry a lone surrogate ("\\udcff"); text cannot
                raise ApiError(422, f"input {i} is not valid Unicode text (a lone surrogate at character "
                                    f"{e.start})") from None
        texts, tokens = m.tokenize(texts)  # the texts carry their ids to the batch where the model can
        texts = list(texts)
        for i, n in enumerate(tokens):
            if n > cfg.max_input_tokens:
                if not truncate:
                    raise ApiError(422, f"input {i} has {n} tokens; the limit is {cfg.max_input_tokens} tokens "
                                        "per input (the server's --max-input-tokens): shorten it, or send "
                                        "\"truncate\": true to cut it")
                cut, counted = m.tokenize([m.truncate(texts[i], cfg.max_input_tokens)])
                texts[i], tokens[i] = cut[0], counted[0]
        return texts, tokens

    def batcher(self, m: Served, route: str) -> Batcher:
        """The batcher of model `m` (this very load of it) on `route`. After a reload, requests
        that picked the old model before the swap still run on the old model's batcher."""
        key = (m.name, route)
        b = self.batchers.get(key)
        if b is not None and b.owner is m:
            return b
        for r in self.retired:
            if r.owner is m and r.route == route:
                return r
        fn = {CLASSIFY: m.classify, EMBEDDINGS: m.embed, TRANSLATE: m.translate}[route]
        cfg = self.cfg
        b = Batcher(f"{m.name}{route.replace('/', '-')}", fn, cfg.max_batch_tokens, cfg.max_wait_ms / 1000,
                    cfg.max_queue, cfg.batching, self.metrics.on_batch(m.name, route))
        b.owner, b.route = m, route
        if self.models.get(m.name) is m:
            if key in self.batchers:
                self._retire(self.batchers[key])
            self.batchers[key] = b
        else:
            self._retire(b)
        return b

    def _retire(self, b: Batcher) -> None:
        self.retired.append(b)
        self._spawn(self._stop_when_idle(b))

    async def _stop_when_idle(self, b: Batcher) -> None:
        while not b.idle:  # bounded by the requests already queued on it (none join it after the swap)
            await asyncio.sleep(0.05)
        self.retired.remove(b)
        await b.stop()

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def run(self, m: Served, route: str, texts: list[str], tokens: list[int], key=None) -> list[Any]:
        b = self.batcher(m, route)
        gauge = self.metrics.queue_depth.labels(m.name, route)
        try:
            gauge.set(b.depth + 1)
            return await b.submit(texts, tokens, key)
        except Overloaded as e:
            self.metrics.rejected.labels(m.name).inc()
            raise ApiError(429, str(e), "rate_limit_exceeded", {"Retry-After": str(e.retry_after)}) from None
        finally:
            gauge.set(b.depth)

    # ------------------------------------------------------------------ reloads

    async def reload(self, name: str) -> dict[str, Any]:
        """Load `name`'s source again and swap it in when it holds other weights. The swap is
        one assignment of `models` in the event loop: a request picks either the old model or
        the new one, whole, and the old one finishes what it was given."""
        async with self.reload_lock:
            old = self.models.get(name)
            if old is None:
                raise ApiError(404, f"model {name!r} is not served here; served: {self._listing()}",
                               "model_not_found")
            if old.reopen is None:
                raise ApiError(409, f"model {name!r} was not loaded from a folder this server can read again "
                                    "(started from Python with a ready backend)", "conflict")
            try:
                new = await asyncio.get_running_loop().run_in_executor(self.load_executor, old.reopen)
            except UserError as e:
                raise ApiError(409, f"kept serving the loaded weights of {name!r}: {e}", "conflict") from None
            except Exception as e:  # noqa: BLE001 - the old model keeps serving; the log has the traceback
                log.exception("reloading %s failed", name)
                raise ApiError(409, f"kept serving the loaded weights of {name!r}: the new ones failed to load "
                                    f"({type(e).__name__}: {e})", "conflict") from None
            if new.weights == old.weights:
                return {"id": name, "reloaded": False, "weights": old.weights}
            # nothing compiled now: requests run beside this thread, and torch.compile is not thread-safe
            new.prepare(self.cfg, compile=False)
            self.models = {**self.models, name: new}
            key_routes = [k for k in self.batchers if k[0] == name]
            for k in key_routes:
                self._retire(self.batchers.pop(k))
            log.info("reloaded %s: step %s, %s", name, (new.weights or {}).get("step"),
                     (new.weights or {}).get("digest"))
            return {"id": name, "reloaded": True, "weights": new.weights, "previous": old.weights}

    async def watch(self) -> None:
        """--reload-on-change: poll the served folders' fingerprints; a change is reloaded (a
        folder still training is refused by the load, and tried again at the next change)."""
        from .weights import fingerprint

        loop = asyncio.get_running_loop()
        seen = {n: fingerprint(m.source) for n, m in self.models.items() if m.reopen is not None}
        while not self.draining:
            await asyncio.sleep(self.cfg.reload_interval)
            for name in list(seen):
                now = await loop.run_in_executor(self.load_executor, fingerprint, self.models[name].source)
                if now == seen[name] or self.draining:
                    continue
                seen[name] = now
                try:
                    done = await self.reload(name)
                except ApiError as e:
                    log.warning("%s changed on disk; %s", name, e.message)
                    continue
                if done["reloaded"]:
                    log.info("%s changed on disk: now serving step %s", name, (done["weights"] or {}).get("step"))

    async def close(self) -> None:
        self.stopping.set()
        for t in list(self._tasks):
            t.cancel()
        for b in list(self.batchers.values()) + self.retired:
            await b.stop()
        self.gen_executor.shutdown(wait=False, cancel_futures=True)
        self.load_executor.shutdown(wait=False, cancel_futures=True)
        self.fonts.close()
