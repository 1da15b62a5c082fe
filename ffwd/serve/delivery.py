"""Moving a generation's events to its client: one JSON body, or server-sent events.

`respond` starts a validated `GenerationRequest` on the executor and hands
every event to the request's `Reply` (the dialect's writer), as a whole body
or as a stream. A client that goes away, streaming or not, cancels its
generation (`ClientWatch`): the model stops within a step. A failed run is a
counted server error: a 5xx body, or an error event once a stream has begun.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any, Protocol

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ffwd.engine.events import TokenEvent
from ffwd.engine.generate import GenerationResult
from ffwd.serve.dialects.store import key_namespace
from ffwd.serve.errors import APIError, as_api_error, server_error
from ffwd.serve.execute import Executor, Job
from ffwd.serve.metrics import Metrics
from ffwd.serve.middleware import presented_key
from ffwd.serve.request import GenerationRequest

_DONE = object()  # the generation's thread has finished
_GONE = object()  # the client disconnected


class Reply(Protocol):
    """A dialect's writer for one response (`ffwd.serve.dialects`)."""

    def collect(self, event: TokenEvent) -> None:
        """A token of a whole response (kept for what the body reports per token)."""
        ...

    def whole(self, res: GenerationResult) -> dict[str, Any]: ...

    def opening(self) -> list[str]:
        """The SSE events before the first token."""
        ...

    def event(self, event: TokenEvent) -> list[str]: ...

    def closing(self, res: GenerationResult) -> list[str]:
        """The SSE events after the last token (the stream's end included)."""
        ...

    def error_event(self, err: APIError) -> str:
        """The SSE event of a failure after the stream began."""
        ...


class ClientWatch:
    """A request's job and what happens when its client goes away.

    Calling it cancels the job and notes the model's forward count; `settle`
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


async def respond(
    request: Request, executor: Executor, metrics: Metrics, req: GenerationRequest, reply: Reply
) -> Response:
    """Run `req` and answer with `reply`'s body or stream (see the module docstring).
    The request belongs to the API key it presents (earlier outputs stay per key)."""
    req = replace(req, tenant=key_namespace(presented_key(request.headers.raw)))
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[object] = asyncio.Queue()
    watch = ClientWatch(executor, metrics, request.url.path, req.stream)

    def put(item: object) -> None:
        if isinstance(item, GenerationResult):  # counted here: cancelled runs have no reader
            metrics.observe_finished(item)
        elif isinstance(item, BaseException) and as_api_error(item).status >= 500:
            metrics.generation_errors.labels(endpoint=metrics.endpoint(request.url.path)).inc()
        loop.call_soon_threadsafe(events.put_nowait, item)

    def end() -> None:  # once, after the run's last event
        watch.settle()
        put(_DONE)

    started = await executor.start(req, put, end)
    watch.job = started.job
    if req.stream:
        return StreamingResponse(
            _sse(events, watch, reply, metrics, time.perf_counter()),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **started.headers},
        )
    return await _whole(request, events, watch, reply, metrics, started.headers)


async def _watch_disconnect(request: Request, events: asyncio.Queue[object]) -> None:
    """Wait for the client to go away (the body is read: only a disconnect can come)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    events.put_nowait(_GONE)


class _Clock:
    """When a response began and when its first token left (time to first token)."""

    def __init__(self, metrics: Metrics, started: float) -> None:
        self.metrics, self.started, self.first = metrics, started, False

    def token(self) -> None:
        if not self.first:
            self.first = True
            self.metrics.ttft.observe(time.perf_counter() - self.started)

    def done(self) -> None:
        self.metrics.latency.observe(time.perf_counter() - self.started)


async def _whole(
    request: Request, events: asyncio.Queue[object], watch: ClientWatch, reply: Reply,
    metrics: Metrics, headers: dict[str, str],
) -> Response:
    clock = _Clock(metrics, time.perf_counter())
    result: GenerationResult | None = None
    watcher = asyncio.create_task(_watch_disconnect(request, events))
    try:
        while (item := await events.get()) is not _DONE:
            if item is _GONE:
                watch()
                return Response(status_code=499)  # nginx's "client closed request"
            if isinstance(item, BaseException):
                raise as_api_error(item)
            if isinstance(item, TokenEvent):
                clock.token()
                reply.collect(item)
            elif isinstance(item, GenerationResult):
                result = item
    finally:
        watcher.cancel()
        watch.done()
    if result is None:
        raise server_error("generation ended without a result")
    clock.done()
    return JSONResponse(reply.whole(result), headers=headers)


async def _sse(
    events: asyncio.Queue[object], watch: ClientWatch, reply: Reply, metrics: Metrics,
    started: float,
) -> AsyncIterator[str]:
    clock = _Clock(metrics, started)
    try:
        for line in reply.opening():
            yield line
        while (item := await events.get()) is not _DONE:
            if isinstance(item, BaseException):
                metrics.stream_errors.labels(endpoint=watch.endpoint).inc()
                yield reply.error_event(as_api_error(item))
                break
            if isinstance(item, TokenEvent):
                clock.token()
                for line in reply.event(item):
                    yield line
            elif isinstance(item, GenerationResult):
                for line in reply.closing(item):
                    yield line
                clock.done()
    except (GeneratorExit, asyncio.CancelledError):
        watch()  # the client went away: stop the generation within a step
        raise
    finally:
        watch.done()
