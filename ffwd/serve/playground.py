"""The playground page, served at ``/`` and ``/playground`` by `ffwd serve` itself.

One HTML page with its stylesheet and script modules (`ffwd/serve/static/`), no
build step and nothing from elsewhere: the page talks to the server it came from
through the public API only (``/v1/models``, ``/v1/chat/completions`` with
``"ffwd": {"tokens": true}``, ``/metrics``), so it works the same behind
``--replicas``. The page asks for the API key itself, so its own GET paths
(`PAGE_PATHS`) answer without one; everything it then calls needs the key.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import cache
from importlib import resources

from fastapi import FastAPI
from fastapi.responses import Response

PAGE = "playground.html"
# The script is ES modules, no build step: playground.js, the entry, imports the others
# (the page preloads them all, so they load at once rather than one import at a time).
SCRIPTS = ("playground.js", "chat.js", "dom.js", "form.js", "live.js", "numbers.js",
           "request.js", "server.js", "state.js", "tokens.js")
ASSETS = {"playground.css": "text/css; charset=utf-8",
          **{name: "text/javascript; charset=utf-8" for name in SCRIPTS}}
PAGE_ROUTES = ("/", "/playground")
PAGE_PATHS = frozenset({*PAGE_ROUTES, *(f"/playground/{name}" for name in ASSETS)})
# Everything the page loads comes from this server; it calls only this server's API.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


@cache
def static_file(name: str) -> bytes:
    """One file of the page, read from the package once."""
    return (resources.files("ffwd") / "serve" / "static" / name).read_bytes()


def _response(name: str, media_type: str) -> Response:
    return Response(static_file(name), media_type=media_type, headers={
        "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff",
        # same-origin, not no-referrer: under no-referrer a browser sends the page's own
        # POSTs with "Origin: null", which the CORS check (`cors`) cannot tell apart.
        "Content-Security-Policy": CSP, "Referrer-Policy": "same-origin"})


def install_playground(app: FastAPI) -> None:
    """Add the page's routes to `app` (left out of the OpenAPI document: not API)."""
    page = _serve(PAGE, "text/html; charset=utf-8")
    for path in PAGE_ROUTES:
        app.add_api_route(path, page, methods=["GET"], include_in_schema=False)
    for name, media_type in ASSETS.items():
        app.add_api_route(f"/playground/{name}", _serve(name, media_type), methods=["GET"],
                          include_in_schema=False)


def _serve(name: str, media_type: str) -> Callable[[], Awaitable[Response]]:
    """The handler of one file (it takes no parameters: the file is fixed)."""

    async def handler() -> Response:
        return _response(name, media_type)

    return handler
