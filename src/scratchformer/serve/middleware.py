"""The ASGI layers around the app (serve/app.py adds them): `BodyLimit` bounds every request body
in size and time, and answers 503 for one still arriving when the server drains; `RecordMetrics`
counts requests by route and status and times them. They see raw ASGI messages, below FastAPI."""
from __future__ import annotations

import asyncio
import time
from typing import Callable

from .metrics import Metrics
from .protocol import error_response


class BodyLimit:
    """413 for a body over `limit` bytes: from Content-Length before reading, or while a body
    without one streams in (reading stops at the limit; at most `limit` bytes are held).
    408 for a body that does not arrive whole within `timeout` seconds (a client that sends
    half a body and waits holds nothing for ever); 503 at once for one still arriving when the
    server starts draining (`draining()`), so SIGTERM need not wait for it."""

    def __init__(self, app, limit: int, timeout: float = 30.0, draining: Callable[[], bool] = lambda: False):
        self.app, self.limit, self.timeout, self.draining = app, limit, timeout, draining

    def _too_big(self):
        return error_response(413, f"the request body is over the limit of {self.limit} bytes "
                                   "(the server's --max-body-bytes): send fewer or shorter inputs")

    async def _next(self, receive, deadline: float):
        """The next message, or None when the deadline passed or the server drains."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or self.draining():
                return None
            try:
                return await asyncio.wait_for(receive(), min(left, 0.25))
            except asyncio.TimeoutError:
                continue

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD"):
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            return await self._too_big()(scope, receive, send)
        body, more = [], True
        size, deadline = 0, time.monotonic() + self.timeout
        while more:  # read it all here (bounded in size and time), then hand it on in one message
            msg = await self._next(receive, deadline)
            if msg is None:
                if self.draining():
                    late = error_response(503, "the server is shutting down", "unavailable", {"Connection": "close"})
                else:
                    late = error_response(408, f"the request body did not arrive within {self.timeout:g} s "
                                               "(the server's --body-timeout)", "timeout", {"Connection": "close"})
                return await late(scope, receive, send)
            if msg["type"] == "http.disconnect":
                return
            body.append(msg.get("body", b""))
            size += len(body[-1])
            more = msg.get("more_body", False)
            if size > self.limit:
                return await self._too_big()(scope, receive, send)
        sent = False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": b"".join(body), "more_body": False}
            return await receive()  # after the body: wait for the disconnect, as the server would say it

        await self.app(scope, replay, send)


class RecordMetrics:
    """Requests by route and status, latency by route (streams: until the last byte)."""

    def __init__(self, app, metrics: Metrics, routes: set[str]):
        self.app, self.metrics, self.routes = app, metrics, routes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        route = scope["path"] if scope["path"] in self.routes else "other"  # bounded label values
        status, t0 = 500, time.perf_counter()

        async def watch(msg):
            nonlocal status
            if msg["type"] == "http.response.start":
                status = msg["status"]
            await send(msg)

        try:
            await self.app(scope, receive, watch)
        finally:
            self.metrics.requests.labels(route, str(status)).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - t0)
