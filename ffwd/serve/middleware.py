"""The outermost layer of the app: request id and log line, browser origins (CORS),
API-key check, HEAD, request counting, last-resort 500.

A plain ASGI middleware (not Starlette's `BaseHTTPMiddleware`, which hides a
client's disconnect from the handlers). It opens every request's `Access`
(`access.py`: its id, sent back on every response, and its log line, written
once the response has gone by the `AccessLog`, which folds a flood of one
client's 4xx into a count per interval; a timer writes the count when the flood
stops, the app's shutdown at the latest), counts every response by its status
as sent, unknown paths under one label, and turns an exception that escaped every
handler into a counted 500. Before the key is checked, a browser's
cross-origin request meets the `cors.CorsPolicy`: from an origin it does not
allow, a 403 without CORS headers; from one it allows, a preflight is
answered 204 here, and every reply (errors included, so that the page can read
them) carries the CORS headers. The key comes as ``Authorization:
Bearer KEY`` (OpenAI's clients) or ``x-api-key: KEY`` (Anthropic's); errors
have the shape of the API the path belongs to (`errors.error_body`). A HEAD
request is answered as its GET without the body (RFC 9110), so an agent's
``HEAD /`` probe gets the page's 200. Given the server's keep-alive (`keep_alive`,
seconds), every response on a connection that stays open says how long it will
(`keep_alive_header`), so that a client can let an idle connection go before the
server closes it.

`tenant` is the one place that decides whom a request belongs to: the API key
it presents, hashed, whether or not the server checks keys (with none, a
client's key still keeps its outputs and stored responses apart from other
keys'); a request without a key belongs to the anonymous tenant ``""``.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from ffwd.serve.access import Access, AccessLog
from ffwd.serve.cors import CorsPolicy, header, same_origin
from ffwd.serve.errors import APIError, error_body, is_anthropic_path, server_error
from ffwd.serve.metrics import Metrics
from ffwd.serve.playground import PAGE_PATHS

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Answered without an API key: health, and the page (so that it can ask for the key).
OPEN_PATHS = frozenset({"/health"}) | PAGE_PATHS
log = logging.getLogger("ffwd.serve")


class Guard:
    """Wraps the FastAPI app (see the module docstring)."""

    def __init__(self, app: ASGIApp, metrics: Metrics, api_key: str | None,
                 cors: CorsPolicy | None = None, keep_alive: int | None = None,
                 access_log: AccessLog | None = None) -> None:
        self.app = app
        self.metrics = metrics
        self.key = api_key.encode() if api_key else None
        self.cors = cors or CorsPolicy()
        self.keep_alive = keep_alive
        self.log = access_log or AccessLog()
        self._flushing: asyncio.TimerHandle | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, self._lifespan(send))
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        access = Access.open(scope)
        scope.setdefault("state", {})["access"] = access  # request.state.access
        extra = access.headers()
        origin = cross_origin(scope)
        if origin is not None and self.cors.allows(origin):
            extra += self.cors.response_headers(origin)

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                access.status = int(message["status"])
                headers = [*message.get("headers", ()), *extra]
                headers += keep_alive_header(scope, headers, self.keep_alive)
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self._guarded(scope, receive, sending, access, origin)
        finally:
            self.metrics.count_request(access.path, access.status or 500)
            self.log.write(access)
            if self.log.pending and self._flushing is None:
                self._flushing = asyncio.get_running_loop().call_later(
                    self.log.interval, self._flush)

    def _flush(self) -> None:
        """Write the floods' counts whose interval ended; again later while some remain."""
        self.log.flush(self.log.clock())
        self._flushing = None
        if self.log.pending:
            self._flushing = asyncio.get_running_loop().call_later(
                self.log.interval, self._flush)

    def _lifespan(self, send: Send) -> Send:
        """`send` for the app's lifespan: at shutdown, every count is written first."""
        async def sending(message: Message) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                if self._flushing is not None:
                    self._flushing.cancel()
                    self._flushing = None
                self.log.flush()
            await send(message)

        return sending

    async def _guarded(self, scope: Scope, receive: Receive, send: Send, access: Access,
                       origin: str | None) -> None:
        path = access.path
        if origin is not None and not self.cors.allows(origin):
            err = APIError(403, self.cors.refusal(origin), type="permission_error"
                           if is_anthropic_path(path) else "invalid_request_error",
                           code="origin_not_allowed")
            await send_error(send, err, path)
            return
        headers = scope.get("headers") or ()
        asked = header(headers, b"access-control-request-method")
        if origin is not None and scope["method"] == "OPTIONS" and asked is not None:
            requested = header(headers, b"access-control-request-headers")
            await send({"type": "http.response.start", "status": 204,
                        "headers": self.cors.preflight_headers(requested)})
            await send({"type": "http.response.body", "body": b""})
            return
        if self.key is not None and path not in OPEN_PATHS and not self._authorized(scope):
            how = "'x-api-key: KEY'" if is_anthropic_path(path) else "'Authorization: Bearer KEY'"
            err = APIError(401, f"invalid or missing API key: send {how}",
                           type="authentication_error" if is_anthropic_path(path)
                           else "invalid_request_error",
                           code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
            await send_error(send, err, path)
            return
        if scope["method"] == "HEAD":
            scope, send = head_as_get(scope, send)
        try:
            await self.app(scope, receive, send)
        except Exception as exc:
            log.exception("request %s: unhandled error on %s", access.request_id, path,
                          extra={"fields": {"request_id": access.request_id}})
            if access.status:  # the response had begun (a stream): nothing more can be sent
                self.metrics.stream_errors.labels(endpoint=self.metrics.endpoint(path)).inc()
                return
            await send_error(send, server_error(f"internal error: {type(exc).__name__}"), path)

    def _authorized(self, scope: Scope) -> bool:
        assert self.key is not None
        token = presented_key(scope.get("headers") or ())
        return token is not None and hmac.compare_digest(token, self.key)


def keep_alive_header(scope: Scope, response: Iterable[tuple[bytes, bytes]],
                      seconds: int | None) -> list[tuple[bytes, bytes]]:
    """``Keep-Alive: timeout=N`` when the connection stays open after this response:
    the server keeps idle connections (`seconds`), the request is HTTP/1.1 (HTTP/1.0
    closes, HTTP/2 forbids the header) and neither it nor the response says
    ``Connection: close``.

    >>> scope = {"http_version": "1.1", "headers": [(b"connection", b"keep-alive")]}
    >>> keep_alive_header(scope, [], 120)
    [(b'keep-alive', b'timeout=120')]
    >>> keep_alive_header({**scope, "http_version": "1.0"}, [], 120)
    []
    >>> keep_alive_header(scope, [(b"Connection", b"close")], 120)
    []
    """
    if seconds is None or scope.get("http_version", "1.1") != "1.1":
        return []
    for name, value in [*(scope.get("headers") or ()), *response]:
        if name.lower() == b"connection" and b"close" in [
                token.strip() for token in value.lower().split(b",")]:
            return []
    return [(b"keep-alive", f"timeout={seconds}".encode())]


def head_as_get(scope: Scope, send: Send) -> tuple[Scope, Send]:
    """A HEAD request as the GET it asks about, the answer's body dropped (its headers,
    Content-Length included, are the GET's): the routes are declared for GET."""

    async def headers_only(message: Message) -> None:
        if message["type"] == "http.response.body":
            message = {**message, "body": b""}
        await send(message)

    return {**scope, "method": "GET"}, headers_only


def cross_origin(scope: Scope) -> str | None:
    """The ``Origin`` of a browser's request from another origin (None: no Origin, or a
    page this server served)."""
    headers = scope.get("headers") or ()
    raw = header(headers, b"origin")
    if raw is None:
        return None
    origin = raw.decode("latin-1").strip()
    host = header(headers, b"host")
    site = header(headers, b"sec-fetch-site")
    if same_origin(origin, host.decode("latin-1") if host else None,
                   site.decode("latin-1") if site else None):
        return None
    return origin


def presented_key(headers: Iterable[tuple[bytes, bytes]]) -> bytes | None:
    """The API key a request presents: ``Authorization: Bearer KEY`` or ``x-api-key: KEY``.

    The scheme is case-insensitive (RFC 7235); the guard compares the key in constant time.
    """
    found = dict(headers)
    scheme, _, token = found.get(b"authorization", b"").partition(b" ")
    if scheme.lower() == b"bearer" and token.strip():
        return token.strip()
    key = found.get(b"x-api-key", b"").strip()
    return key or None


def tenant(headers: Iterable[tuple[bytes, bytes]]) -> str:
    """Whom a request belongs to (see the module docstring): a digest of its key, so the
    key itself is kept nowhere."""
    key = presented_key(headers)
    return hashlib.sha256(key).hexdigest()[:32] if key else ""


async def send_error(send: Send, err: APIError, path: str = "") -> None:
    body = json.dumps(error_body(err, path)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in (err.headers or {}).items()]
    await send({"type": "http.response.start", "status": err.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
