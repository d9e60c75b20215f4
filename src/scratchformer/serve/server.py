"""Running the app under uvicorn, with the graceful shutdown the app expects.

On SIGTERM (or Ctrl-C): readiness fails at once (/ready -> 503, new inference requests on open
connections -> 503, a body still arriving -> 503), uvicorn stops accepting connections and waits
up to `drain_timeout` seconds for the requests in flight to finish, then the batchers stop and
generations still running stop at their next token.

Connections end: a request's headers must arrive within `header_timeout` seconds of its first
byte (or of the connection, for one that sends nothing), else the connection is closed with a
408 (`HeaderTimeoutProtocol`; uvicorn has no such timeout); its body within `body_timeout`
(serve/middleware.py's BodyLimit); an idle keep-alive connection closes after uvicorn's keep-alive timeout.
"""
from __future__ import annotations

import functools
import gc
import logging
import signal
import socket
from typing import Sequence

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ..errors import UserError
from .app import create_app
from .state import ServeConfig
from .backends import ModelSpec, load_backend

log = logging.getLogger("scratchformer.serve")


class DrainingServer(uvicorn.Server):
    """uvicorn's server, telling the app it drains before uvicorn stops accepting."""

    def __init__(self, config: uvicorn.Config, app):
        super().__init__(config)
        self.scratchformer_app = app

    def handle_exit(self, sig, frame) -> None:
        state = getattr(self.scratchformer_app.state, "serve", None)
        if state is not None:
            state.draining = True
        super().handle_exit(sig, frame)
        if sig == signal.SIGTERM and not self.force_exit:
            # uvicorn re-raises the signal once drained (exit status -15); a drain that finished
            # is a normal end: exit 0
            self._captured_signals[:] = [s for s in self._captured_signals if s != signal.SIGTERM]


class HeaderTimeoutProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline on each request's headers: armed when the
    connection opens and at each request's first byte, disarmed when its headers are complete.
    A client that sends half a request line and waits is answered 408 and closed."""

    def __init__(self, *args, header_timeout: float = 10.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.header_timeout, self._header_timer = header_timeout, None
        self._reading_headers = False  # a request has begun and its headers are not complete

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.header_timeout, self._headers_too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if self.transport.is_closing():
            return
        body = (b'{"error": {"message": "the request headers did not arrive within %d s (the server\'s '
                b'--header-timeout)", "type": "timeout", "code": 408}}' % round(self.header_timeout))
        self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                             b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        self.transport.close()

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._reading_headers = True
        self._arm()

    def on_headers_complete(self) -> None:
        self._reading_headers = False
        self._disarm()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self._reading_headers:  # between requests, uvicorn's keep-alive timeout holds
            self._disarm()

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)


def uvicorn_config(app, cfg: ServeConfig, host: str = "127.0.0.1", port: int = 8000,
                   log_level: str = "info") -> uvicorn.Config:
    """uvicorn's settings for the app: the header timeout, the drain timeout, lifespan on."""
    # uvloop's event loop and httptools' parser (both pinned dependencies): about twice the
    # requests/s of asyncio + h11 at one client (docs/serving.md)
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False, loop="uvloop",
                          http=functools.partial(HeaderTimeoutProtocol, header_timeout=cfg.header_timeout),
                          timeout_graceful_shutdown=cfg.drain_timeout, lifespan="on")


def make_server(specs: Sequence[ModelSpec], cfg: ServeConfig, host: str = "127.0.0.1", port: int = 8000,
                backend: str | None = None, log_level: str = "info", compute_type: str | None = None,
                device: str | None = None) -> DrainingServer:
    """The app over `specs` under uvicorn (not started). A model that fails to load stops it."""
    holder: list[DrainingServer] = []

    def stop(exc: BaseException) -> None:
        log.error("error: %s", exc)
        holder[0].should_exit = True

    app = create_app(lambda: [load_backend(s, backend, compute_type, device=device) for s in specs], cfg,
                     on_load_error=stop)
    holder.append(DrainingServer(uvicorn_config(app, cfg, host, port, log_level), app))
    return holder[0]


def serve(specs: Sequence[ModelSpec], cfg: ServeConfig, host: str = "127.0.0.1", port: int = 8000,
          backend: str | None = None, log_level: str = "info", compute_type: str | None = None,
          device: str | None = None) -> int:
    """Serve until SIGTERM/SIGINT. A model that fails to load stops the server with its one-line error."""
    server = make_server(specs, cfg, host, port, backend, log_level, compute_type, device)
    app = server.scratchformer_app
    try:
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as e:
        raise UserError(f"cannot listen on {host}:{port} ({e.strerror}); choose another --port") from None
    print(f"serving {', '.join(s.name for s in specs)} on http://{host}:{sock.getsockname()[1]} "
          f"(page: /, API docs: /docs; /ready says when the models are loaded)", flush=True)
    server.run(sockets=[sock])
    # the interpreter's last garbage collection walks every object the models made (seconds on
    # a loaded server); the process is ending, so spare it: SIGTERM exits within 2 s when idle
    gc.freeze()
    state = getattr(app.state, "serve", None)
    if state is not None and state.load_error is not None:
        e = state.load_error
        if isinstance(e, UserError):
            raise e
        raise UserError(f"a model failed to load: {type(e).__name__}: {e}") from None
    return 0
