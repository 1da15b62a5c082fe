"""How a validated request reaches a model: the seam under the HTTP layer.

`create_app` hands every validated request (a `GenerationRequest`) to an
`Executor`. `start(req, put, end)` prepares it (raising `APIError` for input
the model side rejects, 429 when the waiting line is full) and returns a
`Started` whose `job` stops the run within a step when cancelled; the run
calls `put(item)` for each `TokenEvent` (a failure as an exception), from any
thread, and `end()` once after the last. `count_tokens(req)` renders a chat
request's prompt without running it (Anthropic's ``count_tokens``), and
`model_info()` says what the model offers (``/v1/models``).

`LocalExecutor` runs a `Service` on this process's worker threads, one per
sequence the model decodes at once (`Service.parallel`, ``--parallel N``):
`start` prepares the request on the event loop's thread pool
(`Service.prepare`) and puts it in the waiting line; a worker that comes free
takes the next run (`next_job`: the oldest of the tenant with the fewest runs
going, tenants taking turns), skips it if its client has gone, runs it
(`Service.run`) and logs a failed run's traceback under the request's id. The
line holds at most `max_queue` runs: when every worker is busy and the line
is full, a request is a 429 with Retry-After. `ffwd.deploy` runs one on each
Ray Serve replica and puts an executor over the replicas' handle behind the
same app.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.concurrency import run_in_threadpool

from ffwd.engine.batch import BatchStats
from ffwd.engine.events import TokenEvent
from ffwd.serve.errors import APIError
from ffwd.serve.metrics import Metrics
from ffwd.serve.request import GenerationRequest

log = logging.getLogger("ffwd.serve")
Emit = Callable[[TokenEvent], None]
Put = Callable[[TokenEvent | BaseException], None]


class Service(Protocol):
    """One loaded model, as the server uses it (`ffwd.serve.service.ModelService`)."""

    model_id: str

    @property
    def forward_calls(self) -> int:
        """Model forward passes since start, counted per sequence (read live by /metrics)."""
        ...

    @property
    def parallel(self) -> int:
        """How many runs the model decodes at once (one forward per step for all)."""
        ...

    def batch_stats(self) -> BatchStats:
        """The model's forwards so far by how many sequences each carried (/metrics)."""
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
        """Forget any state a failed run may have left (e.g. the KV cache of the sequences
        not running now)."""
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
    tenant: str = ""
    queued: float = field(default_factory=time.perf_counter)
    done: threading.Event = field(default_factory=threading.Event)
    _cancel: threading.Event = field(default_factory=threading.Event)

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def cancel(self) -> None:
        self._cancel.set()


def next_job(waiting: Sequence[str], running: Mapping[str, int],
             last: Mapping[str, int]) -> int:
    """Which waiting run starts next, given the tenants of the waiting line (oldest first),
    the runs each tenant has going, and when each was last let in (a count; none: -1):
    the tenant with the fewest runs going, then the one let in least recently, then the
    oldest run. Within a tenant arrival order holds, and a tenant that sends many
    requests at once cannot hold the others back: they take turns.

    >>> next_job(["a", "a", "b"], {"a": 1}, {"a": 5})
    2
    >>> next_job(["a", "b", "a"], {}, {"a": 3, "b": 4})
    0
    >>> next_job(["a", "a", "b"], {}, {"a": 3})
    2
    """
    return min(range(len(waiting)),
               key=lambda i: (running.get(waiting[i], 0), last.get(waiting[i], -1), i))


class LocalExecutor:
    """A `Service` behind a waiting line of at most `max_queue` runs, on one worker thread
    per sequence it decodes at once (`Service.parallel`)."""

    def __init__(
        self, service: Service, max_queue: int, on_depth: Callable[[int], None] | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        if max_queue < 1:
            raise ValueError(f"max_queue={max_queue}: expected an integer >= 1")
        self.service = service
        self.model_id = service.model_id
        self.max_queue = max_queue
        self.parallel = max(1, service.parallel)
        self._metrics = metrics
        if metrics is not None:
            on_depth = on_depth or metrics.queue_depth.set
            metrics.watch_batches(service.batch_stats)
        self._on_depth = on_depth or (lambda depth: None)
        self._cond = threading.Condition()
        self._waiting: list[LocalJob] = []
        self._going: dict[str, int] = {}  # runs going per tenant
        self._let_in: dict[str, int] = {}  # when each tenant was last let in (a count)
        self._admitted = 0
        self._closing = False
        self.active = 0  # runs on the workers now
        self._workers = [threading.Thread(target=self._work, name=f"ffwd-worker-{i}",
                                          daemon=True) for i in range(self.parallel)]
        for worker in self._workers:
            worker.start()

    @property
    def depth(self) -> int:
        """Runs waiting to start (the running ones excluded)."""
        return len(self._waiting)

    @property
    def running(self) -> bool:
        return self.active > 0

    def forward_calls(self) -> int | None:
        return self.service.forward_calls

    def health(self) -> dict[str, Any]:
        return {"queue_depth": self.depth, "running": self.running, "active": self.active,
                "parallel": self.parallel}

    def model_info(self) -> dict[str, Any]:
        return self.service.model_info()

    async def count_tokens(self, req: GenerationRequest) -> int:
        return await run_in_threadpool(self.service.count_tokens, req)

    async def start(self, req: GenerationRequest, put: Put,
                    end: Callable[[], None]) -> Started:
        prepared = await run_in_threadpool(self.service.prepare, req)
        job = LocalJob(prepared, req.context.request_id or req.id, put, end, req.context.tenant)
        with self._cond:
            if len(self._waiting) >= self.max_queue:
                raise queue_full(f"the server is busy: {self.active} requests are running "
                                 f"(--parallel {self.parallel}) and {len(self._waiting)} are "
                                 f"waiting (--max-queue {self.max_queue}); retry later")
            self._waiting.append(job)
            depth = len(self._waiting)
            self._cond.notify()
        self._on_depth(depth)
        return Started(job)

    def close(self, timeout: float = 5.0) -> None:
        """Stop the workers once the runs queued before are done."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        for worker in self._workers:
            worker.join(timeout)

    def _next(self) -> LocalJob | None:
        """The next run to start (waiting for one), or None once closing with none left."""
        with self._cond:
            while not self._waiting and not self._closing:
                self._cond.wait()
            if not self._waiting:
                return None
            i = next_job([j.tenant for j in self._waiting], self._going, self._let_in)
            job = self._waiting.pop(i)
            self._going[job.tenant] = self._going.get(job.tenant, 0) + 1
            self._let_in[job.tenant] = self._admitted
            self._admitted += 1
            self.active += 1
            depth, active = len(self._waiting), self.active
        self._on_depth(depth)
        if self._metrics is not None:
            self._metrics.queue_wait.observe(time.perf_counter() - job.queued)
            self._metrics.active_sequences.set(active)
        return job

    def _finished(self, job: LocalJob) -> None:
        with self._cond:
            self.active -= 1
            self._going[job.tenant] -= 1
            if not self._going[job.tenant]:
                del self._going[job.tenant]
                if all(j.tenant != job.tenant for j in self._waiting):
                    self._let_in.pop(job.tenant, None)  # nothing of it left to order
            active = self.active
        if self._metrics is not None:
            self._metrics.active_sequences.set(active)

    def _work(self) -> None:
        while (job := self._next()) is not None:
            try:
                self._run(job)
            except BaseException:  # its client's side failed too: the worker goes on
                log.exception("request %s: its events could not be delivered", job.request_id,
                              extra={"fields": {"request_id": job.request_id}})
            finally:
                self._finished(job)
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
