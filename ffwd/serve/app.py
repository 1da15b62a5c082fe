"""The HTTP layer: routes, errors, JSON and SSE delivery, cancellation.

It owns no decoding logic. An `execute.Executor` prepares a validated request
(template, tokens, fill plan; raising `APIError` for bad input) and runs it,
emitting `events.Event`s: by default a `LocalExecutor` over a `Service` on this
process's worker thread, under `ffwd.deploy` a Ray Serve replica. This module
moves those events to the client and counts them in the metrics. A client
that goes away (streaming or not) cancels its generation: the model stops
within one step. `create_app` is the one app factory for both.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ffwd.serve.body import DEFAULT_MAX_BYTES, read_json
from ffwd.serve.errors import APIError, as_api_error, from_validation_error, server_error
from ffwd.serve.events import ContentDelta, Finished, TokenLogprob, ToolCallDelta
from ffwd.serve.execute import Emit, Executor, Job, LocalExecutor, Service
from ffwd.serve.metrics import Metrics
from ffwd.serve.middleware import Guard
from ffwd.serve.openapi import GET_RESPONSES, METRICS_RESPONSE, POST_RESPONSES, install_openapi
from ffwd.serve.protocol import ChatCompletionRequest, CompletionRequest
from ffwd.serve.responses import Reply

_M = TypeVar("_M", bound=BaseModel)
__all__ = ["Emit", "Service", "create_app"]
_DONE = object()  # the generation's thread has finished
_GONE = object()  # the client disconnected


def create_app(
    service: Service | None = None,
    *,
    executor: Executor | None = None,
    api_key: str | None = None,
    max_queue: int = 16,
    max_body_bytes: int = DEFAULT_MAX_BYTES,
    metrics: Metrics | None = None,
) -> FastAPI:
    """The API over `service` on a local worker thread (`max_queue` waiting), or `executor`."""
    metrics = metrics or Metrics()
    if executor is None:
        if service is None:
            raise TypeError("create_app needs a service or an executor")
        executor = LocalExecutor(service, max_queue, on_depth=metrics.queue_depth.set)
    app = FastAPI(title="ffwd", docs_url=None, redoc_url=None)
    app.state.executor = executor
    app.state.metrics = metrics
    if executor.forward_calls() is not None:
        metrics.watch_forwards(lambda: executor.forward_calls() or 0)

    @app.exception_handler(APIError)
    async def on_api_error(request: Request, exc: APIError) -> Response:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> Response:
        code = {404: "unknown_url", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        msg = f"{request.method} {request.url.path}: {exc.detail}"
        err = APIError(exc.status_code, msg, code=code, headers=dict(exc.headers or {}))
        return JSONResponse(err.body(), status_code=err.status, headers=err.headers)

    @app.get("/health", responses=GET_RESPONSES)
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": executor.model_id, **executor.health()}

    @app.get("/v1/models", responses=GET_RESPONSES)
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": executor.model_id, "object": "model", "created": 0,
                      "owned_by": "ffwd"}],
        }

    @app.get("/metrics", response_class=PlainTextResponse, responses=METRICS_RESPONSE)
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=metrics.content_type)

    @app.post("/v1/chat/completions", responses=POST_RESPONSES)
    async def chat(request: Request) -> Response:
        req = await _parse(request, ChatCompletionRequest, max_body_bytes)
        _check_model(req.model, executor.model_id)
        req.check()
        reply = Reply("chat", req.model, logprobs=req.logprob_count is not None)
        return await _respond(request, req, reply)

    @app.post("/v1/completions", responses=POST_RESPONSES)
    async def completions(request: Request) -> Response:
        req = await _parse(request, CompletionRequest, max_body_bytes)
        _check_model(req.model, executor.model_id)
        req.check()
        reply = Reply("text", req.model, logprobs=req.logprob_count is not None,
                      echo=req.prompt_text if req.echo else "")
        return await _respond(request, req, reply)

    async def _respond(
        request: Request, req: ChatCompletionRequest | CompletionRequest, reply: Reply
    ) -> Response:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[object] = asyncio.Queue()
        left = _Leave(executor, metrics, request.url.path, req.stream)

        def put(item: object) -> None:
            if isinstance(item, Finished):  # counted here: cancelled runs have no reader
                metrics.observe_finished(item)
            loop.call_soon_threadsafe(events.put_nowait, item)

        def end() -> None:  # once, after the run's last event
            left.settle()
            put(_DONE)

        started = await executor.start(req, put, end)
        left.job = started.job
        if req.stream:
            return StreamingResponse(
                _sse(events, left, reply, req.include_usage, metrics),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no",
                         **started.headers},
            )
        return await _whole(request, events, left, reply, metrics, started.headers)

    app.state.metrics.endpoints = frozenset(r.path for r in app.routes if hasattr(r, "path"))
    install_openapi(app, {"/v1/chat/completions": ChatCompletionRequest,
                          "/v1/completions": CompletionRequest}, [executor.model_id, "default"])
    app.add_middleware(Guard, metrics=metrics, api_key=api_key)
    return app


async def _parse(request: Request, model: type[_M], max_bytes: int) -> _M:
    body = await read_json(request.stream(), request.headers.get("content-length"), max_bytes)
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise from_validation_error(exc) from None


def _check_model(requested: str, served: str) -> None:
    if requested not in (served, "default"):  # the document's enum says the same
        raise APIError(
            404,
            f"model {requested!r} does not exist: this server serves {served!r} "
            "(or say 'default')",
            type="invalid_request_error", param="model", code="model_not_found",
        )


class _Leave:
    """A request's job and what happens when its client goes away.

    `__call__` cancels the job and notes the model's forward count; `settle`
    (when the run ends) observes how many forwards ran after that: 0 or 1 for
    a plain decode step. Where the model runs in another process (a Ray
    replica), there is no live count here, and nothing is observed.
    """

    def __init__(self, executor: Executor, metrics: Metrics, endpoint: str, stream: bool) -> None:
        self.executor, self.metrics = executor, metrics
        self.endpoint, self.stream = endpoint, "true" if stream else "false"
        self.job: Job | None = None
        self.at: int | None = None

    def __call__(self) -> None:
        job = self.job
        if job is None or job.done.is_set() or job.cancelled:
            return
        self.at = self.executor.forward_calls()
        job.cancel()
        self.metrics.cancelled.labels(endpoint=self.endpoint, stream=self.stream).inc()

    def settle(self) -> None:
        now = self.executor.forward_calls()
        if self.at is not None and now is not None:
            self.metrics.forwards_after_cancel.observe(now - self.at)

    def done(self) -> None:
        """The response is complete (or failed): the job has nothing left to do."""
        if self.job is not None:
            self.job.cancel()  # no-op when it already finished


async def _watch_disconnect(request: Request, events: asyncio.Queue[object]) -> None:
    """Wait for the client to go away (the body is read: only a disconnect can come)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    events.put_nowait(_GONE)


async def _whole(
    request: Request, events: asyncio.Queue[object], left: _Leave, reply: Reply,
    metrics: Metrics, headers: dict[str, str],
) -> Response:
    finished: Finished | None = None
    watcher = asyncio.create_task(_watch_disconnect(request, events))
    try:
        while True:
            item = await events.get()
            if item is _GONE:
                left()
                return Response(status_code=499)  # nginx's "client closed request"
            if item is _DONE:
                break
            if isinstance(item, BaseException):
                raise as_api_error(item)
            if isinstance(item, TokenLogprob):
                reply.pending.append(item)
            elif isinstance(item, ContentDelta | ToolCallDelta):
                _mark_token(reply, metrics)
            elif isinstance(item, Finished):
                finished = item
    finally:
        watcher.cancel()
        left.done()
    if finished is None:
        raise server_error("generation ended without a result")
    metrics.latency.observe(time.perf_counter() - reply.started)
    return JSONResponse(reply.whole(finished), headers=headers)


def _mark_token(reply: Reply, metrics: Metrics) -> None:
    if reply.first_token_at is None:
        reply.first_token_at = time.perf_counter()
        metrics.ttft.observe(reply.first_token_at - reply.started)


async def _sse(
    events: asyncio.Queue[object], left: _Leave, reply: Reply, include_usage: bool,
    metrics: Metrics,
) -> AsyncIterator[str]:
    try:
        opening = reply.opening()
        if opening is not None:
            yield opening
        while True:
            item = await events.get()
            if item is _DONE:
                break
            if isinstance(item, BaseException):
                metrics.stream_errors.labels(endpoint=left.endpoint).inc()
                yield f"data: {json.dumps(as_api_error(item).body())}\n\n"
                break
            if isinstance(item, TokenLogprob):
                reply.pending.append(item)
            elif isinstance(item, ContentDelta):
                _mark_token(reply, metrics)
                yield reply.content(item.text)
            elif isinstance(item, ToolCallDelta):
                _mark_token(reply, metrics)
                yield reply.tool_call(item)
            elif isinstance(item, Finished):
                yield reply.finish(item.finish_reason)
                if include_usage:
                    yield reply.usage(item)
                metrics.latency.observe(time.perf_counter() - reply.started)
        yield "data: [DONE]\n\n"
    except (GeneratorExit, asyncio.CancelledError):
        left()  # the client went away: stop the generation within a step
        raise
    finally:
        left.done()
