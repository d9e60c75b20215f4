"""Running the app under uvicorn, with the graceful shutdown the app expects.

On SIGTERM (or Ctrl-C): readiness fails at once (/ready -> 503, new inference requests on open
connections -> 503), uvicorn stops accepting connections and waits up to `drain_timeout`
seconds for the requests in flight to finish, then the batchers stop.
"""
from __future__ import annotations

import logging
import signal
import socket
from typing import Sequence

import uvicorn

from ..errors import UserError
from .app import ServeConfig, create_app
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


def make_server(specs: Sequence[ModelSpec], cfg: ServeConfig, host: str = "127.0.0.1", port: int = 8000,
                backend: str = "torch", log_level: str = "info", compute_type: str | None = None) -> DrainingServer:
    """The app over `specs` under uvicorn (not started). A model that fails to load stops it."""
    holder: list[DrainingServer] = []

    def stop(exc: BaseException) -> None:
        log.error("error: %s", exc)
        holder[0].should_exit = True

    app = create_app(lambda: [load_backend(s, backend, compute_type) for s in specs], cfg, on_load_error=stop)
    # uvloop's event loop and httptools' parser (both pinned dependencies): about twice the
    # requests/s of asyncio + h11 at one client (docs/serving.md)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False, loop="uvloop",
                            http="httptools",
                            timeout_graceful_shutdown=cfg.drain_timeout, lifespan="on")
    holder.append(DrainingServer(config, app))
    return holder[0]


def serve(specs: Sequence[ModelSpec], cfg: ServeConfig, host: str = "127.0.0.1", port: int = 8000,
          backend: str = "torch", log_level: str = "info", compute_type: str | None = None) -> int:
    """Serve until SIGTERM/SIGINT. A model that fails to load stops the server with its one-line error."""
    server = make_server(specs, cfg, host, port, backend, log_level, compute_type)
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
    state = getattr(app.state, "serve", None)
    if state is not None and state.load_error is not None:
        e = state.load_error
        if isinstance(e, UserError):
            raise e
        raise UserError(f"a model failed to load: {type(e).__name__}: {e}") from None
    return 0
