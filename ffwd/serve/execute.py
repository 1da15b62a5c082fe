"""How a validated request reaches a model: the seam under the HTTP layer.

`create_app` hands every validated request (a `GenerationRequest`) to an
`Executor`. `start(req, put, end)` prepares it (raising `APIError` for input
the model side rejects, 429 when the waiting line is full) and returns a
`Started` whose `job` stops the run within a step when cancelled; the run
calls `put(item)` for each `TokenEvent` (a failure as an exception), from any
thread, and `end()` once after the last. `count_tokens(req)` renders a chat
request's prompt without running it (Anthropic's ``count_tokens``), and
`model_info()` says what the model offers (``/v1/models``).

`LocalExecutor` runs a `Service` on this process's one worker thread: `start`
prepares the request on the event loop's thread pool (`Service.prepare`) and
queues it; the worker takes queued runs in arrival order (no request
overtakes another), skips the ones whose client has gone, runs the others
(`Service.run`) and logs a failed run's traceback under the request's id.
`ffwd.deploy` runs one on each Ray Serve replica and puts an executor over the
replicas' handle behind the same app.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.concurrency import run_in_threadpool

from ffwd.engine.events import TokenEvent
from ffwd.serve.errors import APIError
from ffwd.serve.request import GenerationRequest

log = logging.getLogger("ffwd.serve")
Emit = Callable[[TokenEvent], None]
Put = Callable[[TokenEvent | BaseException], None]


class Service(Protocol):
    """One loaded model, as the server uses it (`ffwd.serve.service.ModelService`)."""

    model_id: str

    @property
    def forward_calls(self) -> int:
        """Model forward passes since start (read live by /metrics)."""
        ...

    def model_info(self) -> dict[str, Any]:
        """What the model offers: ``context_window``, ``tool_format``, ``grammar``,
        ``constrained_tool_calls``."""
        ...

    def count_tokens(self, req: GenerationRequest) -> int:
        """The ids of `req`'s prompt, rendered as `prepare` renders it (an `APIError` for
        input it cannot render); no context-window check, nothing compiled."""
        ...

    # What prepare returns is opaque here: it only travels back into run().
    def prepare(self, req: GenerationRequest) -> Any: ...

    def run(self, prepared: Any, emit: Emit, cancelled: Callable[[], bool]) -> None:
        """Generate, emitting events; when `cancelled()` turns true, stop within a step and
        emit a last event whose result has finish_reason ``cancelled`` (counted, never
        sent)."""
        ...

    def reset(self) -> None:
        """Forget any state a failed run may have left (e.g. the KV cache)."""
        ...


class Job(Protocol):
    """A started run, as the app holds it (`LocalJob` is one)."""

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

    async def start(self, req: GenerationRequest, put: Put,
                    end: Callable[[], None]) -> Started: ...

    async def count_tokens(self, req: GenerationRequest) -> int:
        """The prompt ids `req` renders to (raising `APIError` for input it cannot render)."""
        ...

    def model_info(self) -> dict[str, Any]:
        """What the model offers: ``context_window``, ``tool_format``, ``grammar``."""
        ...


def queue_full(message: str) -> APIError:
    """Backpressure as OpenAI answers it: 429 with Retry-After."""
    return APIError(429, message, type="rate_limit_error", code="queue_full",
                    headers={"Retry-After": "1"})


@dataclass(eq=False)
class LocalJob:
    """A queued run: what the service prepared, where its events go, who asked."""

    prepared: Any
    request_id: str
    put: Put
    end: Callable[[], None]
    done: threading.Event = field(default_factory=threading.Event)
    _cancel: threading.Event = field(default_factory=threading.Event)

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def cancel(self) -> None:
        self._cancel.set()


class LocalExecutor:
    """A `Service` behind a FIFO of at most `max_queue` waiting runs, on one worker thread."""

    def __init__(
        self, service: Service, max_queue: int, on_depth: Callable[[int], None] | None = None,
    ) -> None:
        if max_queue < 1:
            raise ValueError(f"max_queue={max_queue}: expected an integer >= 1")
        self.service = service
        self.model_id = service.model_id
        self.max_queue = max_queue
        self._on_depth = on_depth or (lambda depth: None)
        self._queue: queue.Queue[LocalJob | None] = queue.Queue()
        self._lock = threading.Lock()
        self.depth = 0  # runs waiting to start (the running one excluded)
        self.running = False  # whether a run is on the worker now
        self._worker = threading.Thread(target=self._work, name="ffwd-worker", daemon=True)
        self._worker.start()

    def forward_calls(self) -> int | None:
        return self.service.forward_calls

    def health(self) -> dict[str, Any]:
        return {"queue_depth": self.depth, "running": self.running}

    def model_info(self) -> dict[str, Any]:
        return self.service.model_info()

    async def count_tokens(self, req: GenerationRequest) -> int:
        return await run_in_threadpool(self.service.count_tokens, req)

    async def start(self, req: GenerationRequest, put: Put,
                    end: Callable[[], None]) -> Started:
        prepared = await run_in_threadpool(self.service.prepare, req)
        job = LocalJob(prepared, req.context.request_id or req.id, put, end)
        with self._lock:
            if self.depth >= self.max_queue:
                raise queue_full(f"the server is busy: {self.depth} requests are already "
                                 f"waiting (--max-queue {self.max_queue}); retry later")
            self.depth += 1
            self._queue.put(job)
        self._on_depth(self.depth)
        return Started(job)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the worker once the runs queued before are done."""
        self._queue.put(None)
        self._worker.join(timeout)

    def _work(self) -> None:
        while (job := self._queue.get()) is not None:
            with self._lock:
                self.depth -= 1
            self._on_depth(self.depth)
            self.running = True
            try:
                self._run(job)
            except BaseException:  # its client's side failed too: the worker goes on
                log.exception("request %s: its events could not be delivered", job.request_id,
                              extra={"fields": {"request_id": job.request_id}})
            finally:
                self.running = False
                job.done.set()

    def _run(self, job: LocalJob) -> None:
        """One run; a failure goes to its client (and, a 5xx, to the log)."""
        try:
            if not job.cancelled:  # a client gone while its run waited: nothing to do
                self.service.run(job.prepared, job.put, lambda: job.cancelled)
        except BaseException as exc:
            if not isinstance(exc, APIError):  # a 5xx: always our bug, always in the log
                log.exception("request %s: the generation failed", job.request_id,
                              extra={"fields": {"request_id": job.request_id}})
            self.service.reset()  # forget what the failed run left in the cache
            job.put(exc)
        finally:
            job.end()
