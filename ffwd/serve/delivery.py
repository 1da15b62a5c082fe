"""Moving a generation's events to its client: one JSON body, or server-sent events.

`respond` starts a validated `GenerationRequest` on the executor and hands
every event to the request's `Writer` (the dialect's), as a whole body or as
a stream; the last event carries the result. The events come in lists, one
per engine step for a stream (written as one chunk of server-sent events), or
all at once for a whole body. A client that goes away, streaming or not,
cancels its generation (`ClientWatch`): the model stops within a step. A
failed run is a counted server error: a 5xx body, or an error event once a
stream has begun.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any, Protocol

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ffwd.engine.core.scheduler import Item
from ffwd.engine.events import GenerationResult, TokenEvent
from ffwd.serve.errors import SHUTTING_DOWN, APIError, as_api_error, server_error
from ffwd.serve.execute import Executor, Job
from ffwd.serve.metrics import Metrics
from ffwd.serve.request import GenerationRequest

Items = asyncio.Queue[list[Item]]  # what a run sent, a list at a time


class ClientGone(Exception):
    """The client disconnected before its whole response was ready."""


class Writer(Protocol):
    """A dialect's writer of one response (`ffwd.serve.dialects`)."""

    def collect(self, event: TokenEvent) -> None:
        """An event of a whole response (kept for what the body reports per token)."""
        ...

    def whole(self, res: GenerationResult) -> dict[str, Any]:
        """The whole response, after the last event."""
        ...

    def opening(self) -> list[str]:
        """The SSE events before the first event."""
        ...

    def event(self, event: TokenEvent) -> list[str]:
        """The SSE events of one event; the last event's end the stream."""
        ...

    def error_event(self, err: APIError) -> str:
        """The SSE event of a failure after the stream began."""
        ...


class ClientWatch:
    """A request's job and what happens when its client goes away.

    Calling it cancels the job; `settle` (when the run ends) observes how many
    forwards the run's own sequence began after that (`Job.forwards_after_cancel`):
    0 or 1 for a plain decode step, 0 for a run still waiting (it never ran).
    Where the model runs in another process (a Ray replica), there is no count
    here, and nothing is observed.
    """

    def __init__(self, metrics: Metrics, endpoint: str, stream: bool) -> None:
        self.metrics = metrics
        self.endpoint, self.stream = endpoint, "true" if stream else "false"
        self.job: Job | None = None
        self.left = False  # the client went away before the run ended

    def __call__(self) -> None:
        job = self.job
        if job is None or job.done.is_set() or job.cancelled:
            return
        self.left = True
        job.cancel()
        self.metrics.cancelled.labels(endpoint=self.endpoint, stream=self.stream).inc()

    def settle(self) -> None:
        after = self.job.forwards_after_cancel if self.left and self.job is not None else None
        if after is not None:
            self.metrics.forwards_after_cancel.observe(after)

    def done(self) -> None:
        """The response is complete (or failed): the job has nothing left to do."""
        if self.job is not None:
            self.job.cancel()  # no-op when it already finished


async def respond(request: Request, executor: Executor, metrics: Metrics,
                  req: GenerationRequest, writer: Writer) -> Response:
    """Run `req` and answer with `writer`'s body or stream (see the module docstring)."""
    items: Items = asyncio.Queue()
    watch = ClientWatch(metrics, request.url.path, req.stream)
    access = request.state.access

    def deliver(batch: list[Item]) -> None:  # on this event loop's thread
        for item in batch:
            if item is None:  # once, after the run's last event
                watch.settle()
            elif isinstance(item, BaseException):
                err = as_api_error(item)
                if err.status >= 500 and err.code != SHUTTING_DOWN:  # a bug, not a restart
                    metrics.generation_errors.labels(
                        endpoint=metrics.endpoint(request.url.path)).inc()
            elif item.result is not None:  # counted here: cancelled runs have no reader
                metrics.observe_finished(item.result)
                access.result = item.result  # for the request's log line
        items.put_nowait(batch)

    started = await executor.start(req, deliver)
    watch.job = started.job
    if req.stream:
        return StreamingResponse(
            _sse(items, watch, writer, metrics, time.perf_counter()),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **started.headers},
        )
    return await _whole(request, items, watch, writer, metrics, started.headers)


async def _watch_disconnect(request: Request, items: Items) -> None:
    """Wait for the client to go away (the body is read: only a disconnect can come)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass
    items.put_nowait([ClientGone()])


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
    request: Request, items: Items, watch: ClientWatch, writer: Writer,
    metrics: Metrics, headers: dict[str, str],
) -> Response:
    clock = _Clock(metrics, time.perf_counter())
    result: GenerationResult | None = None
    watcher = asyncio.create_task(_watch_disconnect(request, items))
    try:
        async for item in _each(items):
            if isinstance(item, ClientGone):
                watch()
                return Response(status_code=499)  # nginx's "client closed request"
            if isinstance(item, BaseException):
                raise as_api_error(item)
            if item.result is None:
                clock.token()
            writer.collect(item)
            result = item.result or result
    finally:
        watcher.cancel()
        watch.done()
    if result is None:
        raise server_error("generation ended without a result")
    clock.done()
    return JSONResponse(writer.whole(result), headers=headers)


async def _sse(
    items: Items, watch: ClientWatch, writer: Writer, metrics: Metrics, started: float,
) -> AsyncIterator[str]:
    clock = _Clock(metrics, started)
    try:
        if opening := "".join(writer.opening()):
            yield opening
        ended = False
        while not ended:
            lines: list[str] = []  # one step's events, written as one chunk
            for item in await items.get():
                if item is None:
                    ended = True
                elif isinstance(item, BaseException):
                    metrics.stream_errors.labels(endpoint=watch.endpoint).inc()
                    lines.append(writer.error_event(as_api_error(item)))
                    ended = True
                    break
                else:
                    if item.result is None:
                        clock.token()
                    lines.extend(writer.event(item))
                    if item.result is not None:
                        clock.done()
            if lines:
                yield "".join(lines)
    except (GeneratorExit, asyncio.CancelledError):
        watch()  # the client went away: stop the generation within a step
        raise
    finally:
        watch.done()


async def _each(items: Items) -> AsyncIterator[TokenEvent | BaseException]:
    """A run's items one at a time, until its end."""
    while True:
        for item in await items.get():
            if item is None:
                return
            yield item
