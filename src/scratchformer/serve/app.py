"""The ASGI app of `scratchformer serve`: routes over the backends (backends.py), the batching
queue (batching.py), admission control, input limits, errors, metrics, auth, reloads and the
page (site.py).

Why FastAPI (over bare Starlette, which it is built on): the request bodies are declared once
as pydantic models, which gives the type checks of every field (with the field named in the
error) and the OpenAPI schema at /docs from the same declaration; everything else here (the
body-size limit and read timeout, metrics, errors) is plain ASGI/Starlette.

The server's settings and its state (models, batchers, readiness, reloads, draining) are state.py.

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
from typing import Callable, Sequence

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..errors import UserError
from .backends import CLASSIFY, COMPLETIONS, EMBEDDINGS, TRANSLATE, Served
from .middleware import BodyLimit, RecordMetrics
from .protocol import (ApiError, AttentionRequest, ClassifyRequest, CompletionsRequest, EmbeddingsRequest,
                       TranslateRequest, error_response, validation_message)
from .site import add_site_routes
from .state import _KEY_SPACES, ServeConfig, ServerState

log = logging.getLogger("scratchformer.serve")
RELOAD = "/v1/reload"
OPEN_PATHS = frozenset({"/health", "/ready", "/metrics"})  # and site.OPEN_PATHS: the page, docs, favicon


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

    @app.get("/ready", tags=["probes"], summary="200 once every model is loaded (and its decoding step compiled); "
                                                 "503 while loading, compiling or draining")
    async def ready(request: Request):
        st: ServerState = request.app.state.serve
        if st.draining:
            return JSONResponse({"status": "draining"}, 503)
        if not st.ready.is_set():
            return JSONResponse({"status": "failed" if st.load_error else st.phase}, 503)
        return {"status": "ready", "models": list(st.models)}

    @app.get("/metrics", tags=["probes"], summary="Prometheus metrics")
    async def metrics(request: Request):
        body, ctype = request.app.state.serve.metrics.render()
        return Response(body, media_type=ctype)

    @app.get("/v1/models", tags=["models"], dependencies=guarded,
             summary="the served models, their tasks, the weights each serves (step, time, digest) and, for a "
                     "translator, its decoding path and what its compute type resolved to")
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
        able = [m for m in st.models.values() if m.has_attention_page]
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
