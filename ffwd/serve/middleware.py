"""The outermost layer of the app: API-key check, request counting, last-resort 500.

A plain ASGI middleware (not Starlette's `BaseHTTPMiddleware`, which hides a
client's disconnect from the handlers). It counts every response by its
status as sent, unknown paths under one label, and turns an exception that
escaped every handler into a counted 500 in the OpenAI error shape.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from ffwd.serve.errors import APIError, server_error
from ffwd.serve.metrics import Metrics

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

OPEN_PATHS = frozenset({"/health"})  # answered without an API key
log = logging.getLogger("ffwd.serve")


class Guard:
    """Wraps the FastAPI app (see the module docstring)."""

    def __init__(self, app: ASGIApp, metrics: Metrics, api_key: str | None) -> None:
        self.app = app
        self.metrics = metrics
        self.key = api_key.encode() if api_key else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        if self.key is not None and path not in OPEN_PATHS and not self._authorized(scope):
            err = APIError(401, "invalid or missing API key: send 'Authorization: Bearer KEY'",
                           code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
            await send_error(send, err)
            self.metrics.count_request(path, 401)
            return
        status: list[int] = []

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        except Exception as exc:
            log.exception("unhandled error on %s", path)
            if status:  # the response had begun (a stream): nothing more can be sent
                self.metrics.stream_errors.labels(endpoint=self.metrics.endpoint(path)).inc()
                return
            await send_error(send, server_error(f"internal error: {type(exc).__name__}"))
            status.append(500)
        self.metrics.count_request(path, status[0] if status else 500)

    def _authorized(self, scope: Scope) -> bool:
        assert self.key is not None
        raw = dict(scope.get("headers") or ()).get(b"authorization", b"")
        scheme, _, token = raw.partition(b" ")
        # The scheme is case-insensitive (RFC 7235); the key is compared in constant time.
        return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), self.key)


async def send_error(send: Send, err: APIError) -> None:
    body = json.dumps(err.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in (err.headers or {}).items()]
    await send({"type": "http.response.start", "status": err.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
