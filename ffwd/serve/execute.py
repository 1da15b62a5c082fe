"""How a validated request reaches a model: the seam under the HTTP layer.

`create_app` hands every validated request (a `GenerationRequest`) to an
`Executor`. `start(req, put, end)` prepares it (raising `APIError` for input
the model side rejects, 429 when the waiting line is full) and returns a
`Started` whose `job` stops the run within a step when cancelled; the run
calls `put(item)` for each event (a failure as an exception), from any
thread, and `end()` once after the last. `count_tokens(req)` renders a chat
request's prompt without running it (Anthropic's ``count_tokens``), and
`model_info()` says what the model offers (``/v1/models``). `LocalExecutor` runs a `Service` on
this process's single worker thread, and logs a failed run's traceback under
the request's id; `ffwd.deploy` runs one on each Ray Serve replica and puts an
executor over the replicas' handle behind the same app.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.concurrency import run_in_threadpool

from ffwd.serve.errors import APIError, bad_request, server_error
from ffwd.serve.request import GenerationRequest
from ffwd.serve.scheduler import QueueFull, Scheduler
from ffwd.serve.service import Emit
from ffwd.templates.render import encode_chat, normalize_tools

log = logging.getLogger("ffwd.serve")


class Service(Protocol):
    model_id: str

    # What prepare returns is opaque here: it only travels back into run().
    def prepare(self, req: GenerationRequest) -> Any: ...

    def run(self, prepared: Any, emit: Emit, cancelled: Callable[[], bool]) -> None:
        """Generate, emitting events; when `cancelled()` turns true, stop within a step and
        emit a result with finish_reason ``cancelled`` (counted, never sent)."""
        ...

    def reset(self) -> None:
        """Forget any state a failed run may have left (e.g. the KV cache)."""
        ...

    @property
    def forward_calls(self) -> int:
        """Model forward passes since start (read live by /metrics)."""
        ...


class Job(Protocol):
    """A started run, as the app holds it (`scheduler.Job` is one)."""

    done: threading.Event

    @property
    def cancelled(self) -> bool: ...

    def cancel(self) -> None: ...


@dataclass(eq=False)
class Started:
    job: Job
    headers: dict[str, str] = field(default_factory=dict)  # added to the response


class Executor(Protocol):
    model_id: str

    def forward_calls(self) -> int | None:
        """Model forwards since start, when this process runs the model (else None)."""
        ...

    def health(self) -> dict[str, Any]:
        """What /health reports besides the model: waiting and running requests."""
        ...

    async def start(self, req: GenerationRequest, put: Callable[[object], None],
                    end: Callable[[], None]) -> Started: ...

    async def count_tokens(self, req: GenerationRequest) -> int:
        """The prompt ids `req` renders to (raising `APIError` for input it cannot render)."""
        ...

    def model_info(self) -> dict[str, Any]:
        """What the model offers: ``context_window``, ``tool_format``, ``grammar``."""
        ...


def prompt_tokens(service: Service, req: GenerationRequest) -> int:
    """The ids of `req`'s prompt, rendered as `prepare` renders it (the service's own
    ``count_tokens`` when it has one); no context-window check, nothing compiled."""
    own = getattr(service, "count_tokens", None)
    if callable(own):
        return int(own(req))
    tokenizer, template = getattr(service, "tokenizer", None), getattr(service, "template", None)
    if tokenizer is None or not isinstance(template, str):
        raise server_error(f"{type(service).__name__} cannot count prompt tokens")
    tools = req.tools if req.tool_choice != "none" else []
    try:
        shown = normalize_tools(tools) if tools else None
        ids = encode_chat(tokenizer, template, req.messages, shown)
    except ValueError as exc:
        raise bad_request(f"cannot render this request: {exc}",
                          param=req.param("messages")) from None
    return len(ids)


def service_info(service: Service) -> dict[str, Any]:
    """`Executor.model_info` of a service (what a `ModelService` declares)."""
    grammar = getattr(service, "grammars", None) is not None
    fill = getattr(service, "fill", None)
    return {"context_window": getattr(service, "context_window", None),
            "tool_format": getattr(service, "format_name", None), "grammar": grammar,
            "constrained_tool_calls": grammar and bool(getattr(fill, "grammar", True))}


def queue_full(message: str) -> APIError:
    """Backpressure as OpenAI answers it: 429 with Retry-After."""
    return APIError(429, message, type="rate_limit_error", code="queue_full",
                    headers={"Retry-After": "1"})


class LocalExecutor:
    """A `Service` behind a FIFO of at most `max_queue` waiting runs, on one worker thread."""

    def __init__(
        self, service: Service, max_queue: int, on_depth: Callable[[int], None] | None = None,
    ) -> None:
        self.service = service
        self.model_id = service.model_id
        self.scheduler = Scheduler(max_queue, on_depth=on_depth)

    def forward_calls(self) -> int | None:
        return self.service.forward_calls

    def health(self) -> dict[str, Any]:
        return {"queue_depth": self.scheduler.depth, "running": self.scheduler.running}

    def model_info(self) -> dict[str, Any]:
        return service_info(self.service)

    async def count_tokens(self, req: GenerationRequest) -> int:
        return await run_in_threadpool(prompt_tokens, self.service, req)

    async def start(self, req: GenerationRequest, put: Callable[[object], None],
                    end: Callable[[], None]) -> Started:
        svc = self.service
        prepared = await run_in_threadpool(svc.prepare, req)

        def work(cancelled: Callable[[], bool]) -> None:
            try:
                svc.run(prepared, put, cancelled)
            except BaseException as exc:
                if not isinstance(exc, APIError):  # a 5xx: always our bug, always in the log
                    log.exception("request %s: the generation failed", req.id)
                svc.reset()  # forget what the failed run left in the cache, before anyone retries
                put(exc)
                raise
            finally:
                end()

        try:
            return Started(self.scheduler.submit(work))
        except QueueFull as exc:
            raise queue_full(str(exc)) from None
