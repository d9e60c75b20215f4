"""What a browser gets from `scratchformer serve`: the page at `/`, the API docs at `/docs` with
their assets from the package (an offline machine shows them too; nothing comes from a CDN),
a favicon, and `/font` (the CJK font cut to the characters on the page), cached and bounded.

Safety of the page: it puts everything it shows in as text (model ids come from folder names,
labels from users' data), and `/` carries a Content-Security-Policy as strict as the offline
attention page's (no source but itself; inline script and style only because the page and the
attention page it frames are single files).
"""
from __future__ import annotations

import asyncio
import collections
from concurrent.futures import ThreadPoolExecutor
from importlib import resources

from fastapi import Depends, FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse, Response

from .protocol import ApiError

# the attention page's policy (diagnostics/page/attention.html), plus what the page itself
# fetches from this server: the API (connect-src) and its favicon
PAGE_CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
            "img-src 'self' data:; font-src 'self' data:; base-uri 'none'; form-action 'none'; "
            "frame-ancestors 'none'")
DOCS_CSP = ("default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
            "connect-src 'self'; img-src 'self' data:; font-src 'self' data:; base-uri 'none'; "
            "form-action 'none'; frame-ancestors 'none'")
SAFE_HEADERS = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer"}
DOCS_ASSETS = {"swagger-ui-bundle.js": "text/javascript; charset=utf-8", "swagger-ui.css": "text/css; charset=utf-8"}
OPEN_PATHS = frozenset({"/", "/docs", "/openapi.json", "/favicon.ico", "/favicon.svg"}
                       | {f"/docs/assets/{n}" for n in DOCS_ASSETS})


def _asset(*parts: str) -> bytes:
    return resources.files(__package__).joinpath("page", *parts).read_bytes()


class FontCutter:
    """`/font`'s subset fonts: cached by character set (the last `items` sets), cut one at a
    time in a thread of their own, with at most `waiting` requests queued behind the one being
    cut (one more: 429), so a stream of distinct texts costs one CPU core at most."""

    def __init__(self, items: int = 64, waiting: int = 8, max_chars: int = 4000):
        self.items, self.waiting, self.max_chars = items, waiting, max_chars
        self.cache: collections.OrderedDict[str, bytes | None] = collections.OrderedDict()
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="font")
        self.queued = 0
        self.cuts = 0  # fonts actually cut (tests read it)

    def _cut(self, chars: str) -> bytes | None:
        from ..fonts import subset_font

        self.cuts += 1
        return subset_font(chars)

    async def get(self, text: str) -> bytes | None:
        chars = "".join(sorted(set(text)))
        if len(chars) > self.max_chars:
            raise ApiError(422, f"text: at most {self.max_chars} distinct characters per font request, got {len(chars)}")
        if chars in self.cache:
            self.cache.move_to_end(chars)
            return self.cache[chars]
        if self.queued > self.waiting:
            raise ApiError(429, f"the font cutter is busy ({self.queued} requests waiting); retry after 1 s",
                           "rate_limit_exceeded", {"Retry-After": "1"})
        self.queued += 1
        try:
            data = await asyncio.get_running_loop().run_in_executor(self.executor, self._cut, chars)
        finally:
            self.queued -= 1
        self.cache[chars] = data
        while len(self.cache) > self.items:
            self.cache.popitem(last=False)
        return data

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


def add_site_routes(app: FastAPI, auth, fonts: FontCutter) -> None:
    """The page, the docs and their assets, the favicon (open), and /font (guarded by `auth`:
    it is the one expensive helper)."""

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index():
        return HTMLResponse(_asset("index.html").decode("utf-8"),
                            headers={"Content-Security-Policy": PAGE_CSP, **SAFE_HEADERS})

    @app.get("/docs", response_class=HTMLResponse, include_in_schema=False)
    async def docs():
        page = get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title}: API docs",
                                   swagger_js_url="/docs/assets/swagger-ui-bundle.js",
                                   swagger_css_url="/docs/assets/swagger-ui.css", swagger_favicon_url="/favicon.svg",
                                   swagger_ui_parameters={"validatorUrl": None})  # no call to swagger.io
        return HTMLResponse(page.body, headers={"Content-Security-Policy": DOCS_CSP, **SAFE_HEADERS})

    @app.get("/docs/assets/{name}", include_in_schema=False)
    async def docs_asset(name: str):
        if name not in DOCS_ASSETS:  # a fixed list: no path reaches another file
            raise ApiError(404, f"no asset {name!r}", "not_found")
        return Response(_asset("docs", name), media_type=DOCS_ASSETS[name],
                        headers={"Cache-Control": "max-age=86400", **SAFE_HEADERS})

    @app.get("/favicon.svg", include_in_schema=False)
    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon():
        return Response(_asset("favicon.svg"), media_type="image/svg+xml",
                        headers={"Cache-Control": "max-age=86400", **SAFE_HEADERS})

    @app.get("/font", include_in_schema=False, dependencies=[Depends(auth)])
    async def font(text: str = ""):
        """The CJK font cut to the characters of `text` (the page shows typed Chinese with it on
        machines without a CJK font; the offline attention page inlines the same)."""
        data = await fonts.get(text)
        if data is None:
            raise ApiError(404, "no CJK font on the server", "not_found")
        return Response(data, media_type="font/otf", headers={"Cache-Control": "private, max-age=3600"})
