"""The HTTP layer: routes, auth, errors, JSON and SSE formatting.

It owns no decoding logic. A `Service` prepares a validated request (template,
tokens, fill plan; raising `APIError` for bad input) and runs it on the
scheduler's worker thread, emitting `events.Event`s; this module moves those
events to the client and counts them in the metrics.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from ffwd.serve.errors import APIError, bad_request, from_validation_error
from ffwd.serve.events import ContentDelta, Event, Finished, ToolCallDelta
from ffwd.serve.metrics import Metrics
from ffwd.serve.protocol import ChatCompletionRequest, CompletionRequest
from ffwd.serve.scheduler import Job, QueueFull, Scheduler

Emit = Callable[[Event], None]
_M = TypeVar("_M", bound=BaseModel)


class Service(Protocol):
    model_id: str

    # What prepare_* returns is opaque here: it only travels back into run().
    def prepare_chat(self, req: ChatCompletionRequest) -> Any: ...

    def prepare_completion(self, req: CompletionRequest) -> Any: ...

    def run(self, prepared: Any, emit: Emit, cancelled: Callable[[], bool]) -> None: ...

    def reset(self) -> None:
        """Forget any state a failed run may have left (e.g. the KV cache)."""
        ...


_DONE = object()


def create_app(
    service: Service,
    *,
    api_key: str | None = None,
    max_queue: int = 16,
    metrics: Metrics | None = None,
) -> FastAPI:
    metrics = metrics or Metrics()
    scheduler = Scheduler(
        max_queue,
        on_depth=metrics.queue_depth.set,
        on_error=lambda exc: service.reset(),
    )
    app = FastAPI(title="ffwd", docs_url=None, redoc_url=None)
    app.state.scheduler = scheduler
    app.state.metrics = metrics
    app.state.service = service
    expected = f"Bearer {api_key}".encode() if api_key else None

    @app.middleware("http")
    async def auth_and_count(request: Request, call_next: Any) -> Response:
        path = request.url.path
        if expected is not None and path != "/health":
            got = request.headers.get("authorization", "").encode()
            if not hmac.compare_digest(got, expected):
                resp: Response = _error_response(
                    APIError(401, "invalid or missing API key: send 'Authorization: Bearer KEY'",
                             code="invalid_api_key")
                )
                metrics.requests.labels(endpoint=path, status="401").inc()
                return resp
        resp = await call_next(request)
        if path.startswith("/v1/"):
            metrics.requests.labels(endpoint=path, status=str(resp.status_code)).inc()
        return resp

    @app.exception_handler(APIError)
    async def on_api_error(request: Request, exc: APIError) -> Response:
        return _error_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> Response:
        kind = "not_found" if exc.status_code == 404 else "invalid_request_error"
        msg = f"{request.method} {request.url.path}: {exc.detail}"
        return _error_response(APIError(exc.status_code, msg, type=kind))

    @app.exception_handler(Exception)
    async def on_crash(request: Request, exc: Exception) -> Response:
        return _error_response(
            APIError(500, f"internal error: {type(exc).__name__}: {exc}", type="server_error")
        )

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": service.model_id, "queue_depth": scheduler.depth}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": service.model_id, "object": "model", "created": 0,
                      "owned_by": "ffwd"}],
        }

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=metrics.content_type)

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        req = await _parse(request, ChatCompletionRequest)
        _check_model(req.model, service.model_id)
        req.check()
        prepared = await run_in_threadpool(service.prepare_chat, req)
        return await _respond(request, prepared, req.stream, req.include_usage, "chat", req.model)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        req = await _parse(request, CompletionRequest)
        _check_model(req.model, service.model_id)
        prepared = await run_in_threadpool(service.prepare_completion, req)
        return await _respond(request, prepared, req.stream, req.include_usage, "text", req.model)

    async def _respond(
        request: Request, prepared: Any, stream: bool, include_usage: bool,
        kind: str, model: str,
    ) -> Response:
        loop = asyncio.get_running_loop()
        events: asyncio.Queue[object] = asyncio.Queue()
        started = time.perf_counter()

        def put(item: object) -> None:
            loop.call_soon_threadsafe(events.put_nowait, item)

        def work(cancelled: Callable[[], bool]) -> None:
            try:
                service.run(prepared, put, cancelled)
            except BaseException as exc:
                put(exc)
                raise
            finally:
                put(_DONE)

        try:
            job = scheduler.submit(work)
        except QueueFull as exc:
            raise APIError(429, str(exc), type="rate_limit_error", code="queue_full",
                           headers={"Retry-After": "1"}) from None
        meta = _Meta(kind, model, started)
        if stream:
            return StreamingResponse(
                _sse(events, job, meta, include_usage, metrics),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        return await _whole(request, events, job, meta, metrics)

    return app


class _Meta:
    def __init__(self, kind: str, model: str, started: float) -> None:
        self.kind = kind
        self.model = model
        self.started = started
        self.id = ("chatcmpl-" if kind == "chat" else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.first_token_at: float | None = None

    def mark_token(self, metrics: Metrics) -> None:
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
            metrics.ttft.observe(self.first_token_at - self.started)


async def _parse(request: Request, model: type[_M]) -> _M:
    raw = await request.body()
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        msg = f"the request body is not valid JSON: {exc}"
        raise bad_request(msg, code="invalid_json") from None
    if not isinstance(body, dict):
        raise bad_request(f"the request body must be a JSON object, got {type(body).__name__}")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise from_validation_error(exc) from None


def _check_model(requested: str, served: str) -> None:
    if requested not in (served, "default"):
        raise APIError(
            404,
            f"model {requested!r} does not exist: this server serves {served!r} "
            "(or say 'default')",
            type="invalid_request_error", param="model", code="model_not_found",
        )


def _error_response(exc: APIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


def _as_api_error(exc: BaseException) -> APIError:
    """What a failed generation tells the client (a 500 unless it was an APIError)."""
    if isinstance(exc, APIError):
        return exc
    return APIError(500, f"generation failed: {type(exc).__name__}: {exc}", type="server_error")


async def _whole(
    request: Request, events: asyncio.Queue[object], job: Job, meta: _Meta, metrics: Metrics
) -> Response:
    finished: Finished | None = None
    try:
        while True:
            try:
                item = await asyncio.wait_for(events.get(), timeout=0.5)
            except TimeoutError:
                if await request.is_disconnected():
                    job.cancel()
                    return Response(status_code=499)
                continue
            if item is _DONE:
                break
            if isinstance(item, BaseException):
                raise _as_api_error(item)
            if isinstance(item, ContentDelta | ToolCallDelta):
                meta.mark_token(metrics)
            elif isinstance(item, Finished):
                finished = item
                metrics.observe_finished(item)
    finally:
        job.cancel()  # no-op when it already finished
    if finished is None:
        raise APIError(500, "generation ended without a result", type="server_error")
    metrics.latency.observe(time.perf_counter() - meta.started)
    return JSONResponse(_final_body(meta, finished))


def _final_body(meta: _Meta, fin: Finished) -> dict[str, Any]:
    if meta.kind == "chat":
        message: dict[str, Any] = {"role": "assistant", "content": fin.content}
        if fin.tool_calls:
            message["tool_calls"] = [c.as_openai() for c in fin.tool_calls]
        choice: dict[str, Any] = {"index": 0, "message": message, "logprobs": None,
                                  "finish_reason": fin.finish_reason}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": fin.content or "", "logprobs": None,
                  "finish_reason": fin.finish_reason}
        obj = "text_completion"
    return {
        "id": meta.id, "object": obj, "created": meta.created, "model": meta.model,
        "choices": [choice], "usage": fin.usage.as_openai(), "ffwd": fin.ffwd,
    }


def _chunk(meta: _Meta, delta: dict[str, Any] | None, finish: str | None = None,
           text: str | None = None) -> str:
    if meta.kind == "chat":
        choice: dict[str, Any] = {"index": 0, "delta": delta or {}, "logprobs": None,
                                  "finish_reason": finish}
    else:
        choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
    return _event(meta, choices=[choice])


def _event(meta: _Meta, **fields: Any) -> str:
    """One SSE event: the stream's common envelope plus `fields`."""
    obj = "chat.completion.chunk" if meta.kind == "chat" else "text_completion"
    body = {"id": meta.id, "object": obj, "created": meta.created, "model": meta.model, **fields}
    return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"


async def _sse(
    events: asyncio.Queue[object], job: Job, meta: _Meta, include_usage: bool, metrics: Metrics
) -> AsyncIterator[str]:
    try:
        if meta.kind == "chat":
            yield _chunk(meta, {"role": "assistant", "content": ""})
        while True:
            item = await events.get()
            if item is _DONE:
                break
            if isinstance(item, BaseException):
                yield f"data: {json.dumps(_as_api_error(item).body())}\n\n"
                break
            if isinstance(item, ContentDelta):
                meta.mark_token(metrics)
                yield _chunk(meta, {"content": item.text}, text=item.text)
            elif isinstance(item, ToolCallDelta):
                meta.mark_token(metrics)
                yield _chunk(meta, {"tool_calls": [_tool_delta(item)]})
            elif isinstance(item, Finished):
                metrics.observe_finished(item)
                yield _chunk(meta, {}, finish=item.finish_reason)
                if include_usage:
                    yield _event(meta, choices=[], usage=item.usage.as_openai(), ffwd=item.ffwd)
                metrics.latency.observe(time.perf_counter() - meta.started)
        yield "data: [DONE]\n\n"
    finally:
        # The client went away (or we are done): stop the generation within a step.
        job.cancel()


def _tool_delta(d: ToolCallDelta) -> dict[str, Any]:
    out: dict[str, Any] = {"index": d.index}
    if d.id is not None:
        out["id"] = d.id
        out["type"] = "function"
    fn: dict[str, Any] = {"arguments": d.arguments}
    if d.name is not None:
        fn["name"] = d.name
    out["function"] = fn
    return out
