"""How a validated request reaches a model: the seam under the HTTP layer.

`create_app` hands every validated request (a `GenerationRequest`) to an
`Executor`. `start(req, deliver)` prepares it (raising `APIError` for input
the model side rejects, 429 when the waiting line is full) and returns a
`Started` whose `job` stops the run within a step when cancelled; the run's
items (its events, a failure, and None once it has ended) reach `deliver` in
lists, on the event loop's thread: a streamed run's after every step, a whole
one's at its end. `count_tokens(req)` renders a chat request's prompt without
running it (Anthropic's ``count_tokens``), and `model_info()` says what the
model offers (``/v1/models``).

`LocalExecutor` runs a `Service` in this process: `start` prepares the
request on the event loop's thread pool (`Service.prepare`), which submits it
to the engine's loop (`ffwd.engine.core.scheduler.Engine`, one thread that steps
every sequence of the model), whose items come back in one hand-off per step
(`LoopChannel`). `ffwd.deploy` runs one on each Ray Serve replica and puts an
executor over the replicas' handle behind the same app.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.concurrency import run_in_threadpool

from ffwd.engine.backend import Backend, Context
from ffwd.engine.core.decode import Steps
from ffwd.engine.core.prompt_cache import PromptCache
from ffwd.engine.core.scheduler import Drained, Engine, Item, QueueFull, Run, ShuttingDown
from ffwd.serve.errors import APIError, shutting_down
from ffwd.serve.metrics import Metrics
from ffwd.serve.request import GenerationRequest

Deliver = Callable[[list[Item]], None]


class Service(Protocol):
    """One loaded model, as the server uses it (`ffwd.serve.service.ModelService`)."""

    model_id: str

    @property
    def context(self) -> Context:
        """The model's sequences and their forwards (what the engine steps)."""
        ...

    @property
    def prompt_cache(self) -> PromptCache:
        """Saved states of earlier conversations (the engine's sequences start from them)."""
        ...

    def model_info(self) -> dict[str, Any]:
        """What the model offers: ``context_window``, ``tool_format``, ``grammar``,
        ``constrained_tool_calls``."""
        ...

    def count_tokens(self, req: GenerationRequest) -> int:
        """The ids of `req`'s prompt, rendered as `prepare` renders it (an `APIError` for
        input it cannot render); no context-window check, nothing compiled."""
        ...

    # What prepare returns is opaque here: it only travels back into prompt() and steps().
    def prepare(self, req: GenerationRequest) -> Any: ...

    def prompt(self, prepared: Any) -> Sequence[int]:
        """The prompt ids a prepared run starts from (which sequence and cache serve it)."""
        ...

    def steps(self, prepared: Any, seq: Backend, cancelled: Callable[[], bool]) -> Steps[None]:
        """The run on `seq`: its events and forwards; when `cancelled()` turns true it stops
        within a step, its last event's result finishing ``cancelled`` (counted, never
        sent)."""
        ...


class Job(Protocol):
    """A started run, as the app holds it (an engine `Run` is one)."""

    done: threading.Event

    @property
    def cancelled(self) -> bool: ...

    @property
    def forwards_after_cancel(self) -> int | None:
        """Forwards its own sequence began after `cancel` (None: not counted here)."""
        ...

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

    @property
    def draining(self) -> bool:
        """Whether the server is going away (a shutdown signal came): /health says 503."""
        ...

    async def start(self, req: GenerationRequest, deliver: Deliver) -> Started: ...

    async def count_tokens(self, req: GenerationRequest) -> int:
        """The prompt ids `req` renders to (raising `APIError` for input it cannot render)."""
        ...

    def model_info(self) -> dict[str, Any]:
        """What the model offers: ``context_window``, ``tool_format``, ``grammar``."""
        ...

    def close(self) -> None:
        """The server is stopping."""
        ...


def queue_full(message: str) -> APIError:
    """Backpressure as OpenAI answers it: 429 with Retry-After."""
    return APIError(429, message, type="rate_limit_error", code="queue_full",
                    headers={"Retry-After": "1"})


@dataclass(frozen=True)
class LoopChannel:
    """An asyncio event loop as the engine's `Channel`: `deliver` runs on it."""

    loop: asyncio.AbstractEventLoop

    def post(self, deliver: Callable[[], None]) -> None:
        if not self.loop.is_closed():  # gone with its client (an app run by a test's own loop)
            self.loop.call_soon_threadsafe(deliver)


class LocalExecutor:
    """A `Service` behind the engine's loop, with a waiting line of at most `max_queue`."""

    def __init__(self, service: Service, max_queue: int, metrics: Metrics | None = None) -> None:
        self.service = service
        self.model_id = service.model_id
        on_admit = metrics.queue_wait.observe if metrics is not None else None
        self.engine = Engine(service.context, service.prompt_cache, max_queue=max_queue,
                             on_admit=on_admit)
        if metrics is not None:
            metrics.watch_engine(self.engine)

    @property
    def parallel(self) -> int:
        return self.engine.parallel

    @property
    def depth(self) -> int:
        """Runs waiting to start (the running ones excluded)."""
        return self.engine.depth

    @property
    def active(self) -> int:
        return self.engine.active

    def forward_calls(self) -> int | None:
        return self.engine.slots.forward_calls

    def health(self) -> dict[str, Any]:
        return {"queue_depth": self.depth, "running": self.active > 0, "active": self.active,
                "parallel": self.parallel}

    @property
    def draining(self) -> bool:
        return self.engine.draining

    def stop_taking(self) -> None:
        """Refuse new requests from now on (the first shutdown signal; `drain` follows)."""
        self.engine.stop_taking()

    def model_info(self) -> dict[str, Any]:
        return self.service.model_info()

    async def count_tokens(self, req: GenerationRequest) -> int:
        return await run_in_threadpool(self.service.count_tokens, req)

    async def start(self, req: GenerationRequest, deliver: Deliver) -> Started:
        channel = LoopChannel(asyncio.get_running_loop())
        return Started(await run_in_threadpool(self._submit, req, deliver, channel))

    def _submit(self, req: GenerationRequest, deliver: Deliver, channel: LoopChannel) -> Run:
        """Prepare `req` and hand it to the engine, from the thread pool: the run goes from
        here to the engine's thread, not back through the event loop first."""
        prepared = self.service.prepare(req)
        run = Run(self.service.prompt(prepared),
                  lambda seq, cancelled: self.service.steps(prepared, seq, cancelled),
                  channel, deliver, stream=req.stream, tenant=req.context.tenant,
                  request_id=req.context.request_id or req.id)
        try:
            self.engine.submit(run)
        except QueueFull as exc:
            raise queue_full(f"the server is busy: {exc}; retry later") from None
        except ShuttingDown as exc:
            raise shutting_down(str(exc)) from None
        return run

    def drain(self, grace_s: float) -> Drained:
        """Take no more requests, refuse the waiting ones, give the running ones `grace_s`
        seconds and cut the rest (`Engine.drain`)."""
        return self.engine.drain(grace_s)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the engine's loop once the runs queued before are done."""
        self.engine.close(timeout)
