"""The ASGI app of `scratchformer serve`: routes over the backends (backends.py), the batching
queue (batching.py), admission control, input limits, errors, metrics, auth, reloads and the
page (site.py).

Why FastAPI (over bare Starlette, which it is built on): the request bodies are declared once
as pydantic models, which gives the type checks of every field (with the field named in the
error) and the OpenAPI schema at /docs from the same declaration; everything else here (the
body-size limit and read timeout, metrics, errors) is plain ASGI/Starlette.

What clients send and the error contract (`{"error": {...}}`, never a traceback) are in protocol.py.

Which routes are open: the probes (/health, /ready, /metrics), the page (/), the API docs
(/docs, /openapi.json, their assets) and the favicon. Every other route needs the key when the
server has one (`OPEN_PATHS`; a test walks the app's routes against it).
"""
from __future__ import annotations

import asyncio
import base64
import hmac
import json
import logging
import struct
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import UserError
from ..tasks.faces import words
from .backends import CLASSIFY, COMPLETIONS, EMBEDDINGS, TRANSLATE, Served
from .batching import Batcher, Overloaded
from .metrics import Metrics
from .middleware import BodyLimit, RecordMetrics
from .protocol import (ApiError, AttentionRequest, ClassifyRequest, CompletionsRequest, EmbeddingsRequest,
                       TranslateRequest, Texts, error_response, validation_message)
from .site import FontCutter, add_site_routes

log = logging.getLogger("scratchformer.serve")
API_KEY_ENV = "SCRATCHFORMER_API_KEY"
RELOAD = "/v1/reload"
OPEN_PATHS = frozenset({"/health", "/ready", "/metrics"})  # and site.OPEN_PATHS: the page, docs, favicon
_KEY_SPACES = " \t\r\n"  # what is stripped around a key, on both sides (ASCII only: bytes of UTF-8 stay)


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

    def check(self) -> None:
        for name in ("max_batch_tokens", "max_queue", "max_body_bytes", "max_items", "max_input_tokens",
                     "max_new_tokens", "max_streams"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be >= 1, got {getattr(self, name)}")
        if self.max_wait_ms < 0 or self.drain_timeout < 0:
            raise UserError("--max-wait-ms and --drain-timeout must be >= 0")
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
        tokens = m.count_tokens(texts)
        for i, n in enumerate(tokens):
            if n > cfg.max_input_tokens:
                if not truncate:
                    raise ApiError(422, f"input {i} has {n} tokens; the limit is {cfg.max_input_tokens} tokens "
                                        "per input (the server's --max-input-tokens): shorten it, or send "
                                        "\"truncate\": true to cut it")
                texts[i] = m.truncate(texts[i], cfg.max_input_tokens)
                tokens[i] = m.count_tokens([texts[i]])[0]
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


# ----------------------------------------------------------------------------- the app

def _b64(vec: list[float]) -> str:
    return base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode("ascii")


class _Stopped(Exception):
    """Raised inside a generation thread when its client went away (or the server stops)."""


def create_app(loader: Callable[[], Sequence[Served]], cfg: ServeConfig | None = None,
               on_load_error: Callable[[BaseException], None] | None = None) -> FastAPI:
    """The app; `loader()` builds the backends in a background thread at startup (so /health
    answers at once and /ready says 503 until it returns). `on_load_error(exc)`: called when
    it raises (the runner stops the server)."""
    cfg = cfg or ServeConfig()
    cfg.check()
    holder: dict[str, ServerState] = {}

    async def lifespan(app):
        state = holder["state"] = ServerState(loader, cfg)
        state.on_load_error = on_load_error
        app.state.serve = state
        threading.Thread(target=state.load, name="load-models", daemon=True).start()
        if cfg.reload_on_change:
            state._spawn(_watch_when_ready(state))
        yield
        state.draining = True
        await state.close()

    app = FastAPI(title="scratchformer serve", version="1", lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Classify, translate, embed and complete with models trained by scratchformer.")
    auth = _auth_dependency(cfg.api_key)
    guarded = [Depends(auth)]
    inference = [Depends(auth), Depends(_json_only)]
    _add_error_handlers(app)
    _add_probe_routes(app, guarded)
    _add_inference_routes(app, cfg, inference)
    _add_completions_route(app, cfg, inference)
    _add_reload_route(app, guarded)
    add_site_routes(app, auth, _LazyFonts(app))

    routes = {"/", "/font", "/health", "/ready", "/metrics", "/v1/models", "/v1/attention", CLASSIFY, TRANSLATE,
              EMBEDDINGS, COMPLETIONS, RELOAD, "/docs", "/openapi.json"}
    state_of = lambda: holder.get("state")  # noqa: E731
    app.add_middleware(BodyLimit, limit=cfg.max_body_bytes, timeout=cfg.body_timeout,
                       draining=lambda: state_of() is not None and state_of().draining)
    app.add_middleware(RecordMetrics, metrics=_LazyMetrics(app), routes=routes)  # outermost: counts 413s too
    return app


async def _watch_when_ready(state: ServerState) -> None:
    while not state.ready.is_set() and state.load_error is None:
        await asyncio.sleep(0.05)
    if state.load_error is None:
        await state.watch()


def _auth_dependency(key: str | None):
    """The check of `Authorization: Bearer KEY`: the token's bytes as the client sent them
    (headers arrive as latin-1) against the key's UTF-8 bytes, in constant time."""
    want = key.encode("utf-8") if key is not None else None

    # async, though it awaits nothing: FastAPI runs a plain `def` dependency in its thread pool,
    # a thread hand-off per request that, next to the model's thread, cost more CPU than the route
    async def auth(request: Request) -> None:
        if want is None:
            return
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        got = token.strip(_KEY_SPACES).encode("latin-1")
        if scheme.lower() != "bearer" or not hmac.compare_digest(got, want):
            raise ApiError(401, "missing or wrong API key: send the header 'Authorization: Bearer <key>'",
                           "authentication_error", {"WWW-Authenticate": "Bearer"})

    return auth


async def _json_only(request: Request) -> None:
    """Inference bodies are JSON, said so: a cross-site form can post text/plain or a form
    encoding without asking first, never application/json."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/json":
        shown = f"Content-Type {ctype!r}" if ctype else "no Content-Type"
        raise ApiError(415, f"the request body must be sent as JSON with the header 'Content-Type: "
                            f"application/json' (got {shown})", "invalid_request_error")


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request, exc: ApiError):
        return error_response(exc.status, exc.message, exc.kind, exc.headers)

    @app.exception_handler(UserError)
    async def _user_error(request, exc: UserError):
        return error_response(422, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(request, exc: RequestValidationError):
        status, message = validation_message(exc)
        return error_response(status, message)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request, exc: StarletteHTTPException):
        message = {404: f"no route {request.url.path}; see /docs", 405: f"{request.method} is not allowed on "
                   f"{request.url.path}; see /docs"}.get(exc.status_code, str(exc.detail))
        return error_response(exc.status_code, message, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _internal(request, exc: Exception):
        log.exception("internal error on %s", request.url.path)  # the traceback stays in the server's log
        return error_response(500, "internal error (the server's log has the details)", "server_error")


def _add_probe_routes(app: FastAPI, guarded: list) -> None:
    @app.get("/health", tags=["probes"], summary="alive (200 as long as the process serves)")
    async def health():
        return {"status": "ok"}

    @app.get("/ready", tags=["probes"], summary="200 once every model is loaded; 503 while loading or draining")
    async def ready(request: Request):
        st: ServerState = request.app.state.serve
        if st.draining:
            return JSONResponse({"status": "draining"}, 503)
        if not st.ready.is_set():
            return JSONResponse({"status": "failed" if st.load_error else "loading"}, 503)
        return {"status": "ready", "models": list(st.models)}

    @app.get("/metrics", tags=["probes"], summary="Prometheus metrics")
    async def metrics(request: Request):
        body, ctype = request.app.state.serve.metrics.render()
        return Response(body, media_type=ctype)

    @app.get("/v1/models", tags=["models"], dependencies=guarded,
             summary="the served models, their tasks and the weights each serves (step, time, digest)")
    async def models(request: Request):
        st: ServerState = request.app.state.serve
        return {"object": "list", "data": [m.describe() for m in st.models.values()]}


def _add_inference_routes(app: FastAPI, cfg: ServeConfig, guarded: list) -> None:
    @app.post(CLASSIFY, tags=["inference"], dependencies=guarded,
              summary="labels and probabilities (the run's blend with TF-IDF when it has one)")
    async def classify(body: ClassifyRequest, request: Request):
        st: ServerState = request.app.state.serve
        m = st.pick(body.model, CLASSIFY)
        texts, tokens = st.limit(m, body.input, body.truncate)
        rows = await st.run(m, CLASSIFY, texts, tokens)
        return {"object": "list", "model": m.name,
                "data": [{"index": i, **row} for i, row in enumerate(rows)]}

    @app.post(TRANSLATE, tags=["inference"], dependencies=guarded, summary="translations")
    async def translate(body: TranslateRequest, request: Request):
        st: ServerState = request.app.state.serve
        m = st.pick(body.model, TRANSLATE)
        texts, tokens = st.limit(m, body.input, body.truncate)
        key = m.decode_key(body.beam, body.max_length)
        out = await st.run(m, TRANSLATE, texts, tokens, key)
        return {"object": "list", "model": m.name, "beam": key[0],
                "data": [{"index": i, "translation": t} for i, t in enumerate(out)]}

    @app.post(EMBEDDINGS, tags=["inference"], dependencies=guarded, summary="embeddings (OpenAI shape)")
    async def embeddings(body: EmbeddingsRequest, request: Request):
        st: ServerState = request.app.state.serve
        m = st.pick(body.model, EMBEDDINGS)
        if body.dimensions is not None:
            raise ApiError(422, "dimensions: this model's vectors have a fixed size; leave 'dimensions' out")
        texts, tokens = st.limit(m, body.input, body.truncate)
        vectors = await st.run(m, EMBEDDINGS, texts, tokens)
        enc = _b64 if body.encoding_format == "base64" else (lambda v: v)
        return {"object": "list", "model": m.name,
                "data": [{"object": "embedding", "index": i, "embedding": enc(v)} for i, v in enumerate(vectors)],
                "usage": {"prompt_tokens": sum(tokens), "total_tokens": sum(tokens)}}

    @app.post("/v1/attention", tags=["inference"], dependencies=guarded, response_class=HTMLResponse,
              summary="the attention page (diagnostics' offline page) of one input, as HTML")
    async def attention(body: AttentionRequest, request: Request):
        st: ServerState = request.app.state.serve
        st.admit()
        able = [m for m in st.models.values() if type(m).attention_page is not Served.attention_page]
        m = st.models.get(body.model) if body.model else (able[0] if len(able) == 1 else None)
        if m is None or m not in able:
            raise ApiError(400, f"attention pages come from classify or translate runs served with torch; "
                                f"name one in \"model\" ({', '.join(x.name for x in able) or 'none served'})")
        texts, _ = st.limit(m, body.input, True)
        html = await asyncio.get_running_loop().run_in_executor(None, m.attention_page, texts[0])
        return HTMLResponse(html)


def _add_completions_route(app: FastAPI, cfg: ServeConfig, guarded: list) -> None:
    @app.post(COMPLETIONS, tags=["inference"], dependencies=guarded,
              summary="text completions (OpenAI shape; stream: true = server-sent events)")
    async def completions(body: CompletionsRequest, request: Request):
        st: ServerState = request.app.state.serve
        m = st.pick(body.model, COMPLETIONS)
        prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
        if len(prompts) != 1 or body.n != 1:
            raise ApiError(422, "prompt: one prompt and n=1 per request (send several requests: they run concurrently)")
        if body.stop is not None or body.echo:
            raise ApiError(422, "stop and echo are not supported; leave them out")
        if body.max_tokens > cfg.max_new_tokens:
            raise ApiError(422, f"max_tokens is {body.max_tokens}; the limit is {cfg.max_new_tokens} "
                                "(the server's --max-new-tokens)")
        texts, tokens = st.limit(m, prompts, body.truncate)
        prompt = texts[0]
        # every sampler value, in the float32 the sampler computes with (UserError -> 422), before
        # a stream starts: a 200 stream is never cut by a value the request could be refused for
        m.check(prompt, body.temperature, body.top_k, body.top_p, body.max_tokens, body.seed)
        if st.gen_slots.locked() and st.gen_waiting >= cfg.max_queue:
            st.metrics.rejected.labels(m.name).inc()
            raise ApiError(429, f"the server is at capacity ({st.gen_waiting} generations waiting); retry after 1 s",
                           "rate_limit_exceeded", {"Retry-After": "1"})
        return await _generate(st, m, body, prompt, tokens[0])


async def _generate(st: ServerState, m: Served, body: CompletionsRequest, prompt: str, n_prompt: int):
    """One generation in a worker thread: the whole text, or its pieces as server-sent events.
    A generation that fails after the stream started sends an error event in the shape OpenAI's
    clients read (`data: {"error": {...}}`) before the stream closes; a client that leaves
    stops the generation at its next token, quietly."""
    loop = asyncio.get_running_loop()
    pieces: asyncio.Queue = asyncio.Queue()
    stopped = threading.Event()
    done = object()
    cid, created = f"cmpl-{uuid.uuid4().hex[:24]}", int(time.time())

    def on_piece(piece: str) -> None:
        if stopped.is_set() or st.stopping.is_set():
            raise _Stopped
        loop.call_soon_threadsafe(pieces.put_nowait, piece)

    def work() -> str:
        try:
            return m.generate(prompt, body.max_tokens, body.temperature, body.top_k, body.top_p, body.seed, on_piece)
        finally:
            if not loop.is_closed():
                loop.call_soon_threadsafe(pieces.put_nowait, done)

    def chunk(text: str, finish: str | None) -> dict:
        return {"id": cid, "object": "text_completion", "created": created, "model": m.name,
                "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": finish}]}

    def usage(text: str) -> dict:
        n_out = m.count_tokens([text])[0] if text else 0
        st.metrics.tokens.labels(m.name, "output").inc(n_out)
        return {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out}

    st.gen_waiting += 1
    try:
        await st.gen_slots.acquire()
    finally:
        st.gen_waiting -= 1
    st.metrics.streams.labels(m.name).inc()
    try:
        future = loop.run_in_executor(st.gen_executor, work)
    except BaseException:
        st.gen_slots.release()
        st.metrics.streams.labels(m.name).dec()
        raise

    def finished(f: asyncio.Future) -> None:  # runs in the loop
        st.gen_slots.release()
        st.metrics.streams.labels(m.name).dec()
        if not f.cancelled():
            f.exception()  # retrieved here: a stream its client left ends in _Stopped, never logged

    future.add_done_callback(finished)

    if not body.stream:
        try:
            text = await future
        except _Stopped:  # the server stops
            raise ApiError(503, "the server is shutting down", "unavailable", {"Connection": "close"}) from None
        return {**chunk(text, "length"), "usage": usage(text)}

    async def events():
        text = []
        try:
            while True:
                piece = await pieces.get()
                if piece is done:
                    break
                text.append(piece)
                yield f"data: {json.dumps(chunk(piece, None), ensure_ascii=False)}\n\n"
            try:
                await future
            except Exception as e:  # noqa: BLE001 - told to the client as an error event, then the stream ends
                yield _error_event(e)
                return
            final = {**chunk("", "length"), "usage": usage("".join(text))}
            yield f"data: {json.dumps(final, ensure_ascii=False)}\n\n"
            yield "data: [DONE]\n\n"
        finally:
            stopped.set()  # the client left (or we are done): stop the thread at its next token

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _error_event(e: BaseException) -> str:
    """The server-sent event of a generation that failed mid-stream: `{"error": {...}}`, which
    OpenAI's clients raise as an APIError with our message."""
    if isinstance(e, _Stopped):
        status, message, kind = 503, "the server is shutting down", "unavailable"
    elif isinstance(e, (UserError, ApiError)):
        status, message, kind = getattr(e, "status", 422), str(e), "invalid_request_error"
    else:
        log.error("generation failed mid-stream", exc_info=e)  # the traceback stays in the server's log
        status, message, kind = 500, "internal error during generation (the server's log has the details)", \
            "server_error"
    return f"data: {json.dumps({'error': {'message': message, 'type': kind, 'code': status}})}\n\n"


def _add_reload_route(app: FastAPI, guarded: list) -> None:
    @app.post(RELOAD, tags=["models"], dependencies=guarded,
              summary="load the served folders again; a name whose folder holds a newer finished model is "
                      "swapped to it at once (requests in flight finish on the old one)")
    async def reload(request: Request, model: str | None = None):
        st: ServerState = request.app.state.serve
        st.admit()
        names = [model] if model is not None else list(st.models)
        return {"object": "list", "data": [await st.reload(n) for n in names]}


class _LazyMetrics:
    """The state's Metrics, looked up per request (the state is made at startup, after the
    middleware stack is built)."""

    def __init__(self, app):
        self.app = app

    def __getattr__(self, name):
        return getattr(self.app.state.serve.metrics, name)


class _LazyFonts(_LazyMetrics):
    """The state's FontCutter, looked up per request (as _LazyMetrics)."""

    def __getattr__(self, name):
        return getattr(self.app.state.serve.fonts, name)
