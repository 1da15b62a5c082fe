"""One model, one worker thread, a bounded FIFO of generation jobs.

Requests are served in arrival order (fair: no request overtakes another).
`submit` raises `QueueFull` when `max_queue` jobs are already waiting, so the
handler can answer 429 at once. A job receives a `cancelled()` callable that
turns true when its client goes away; a job cancelled while still waiting is
skipped without touching the model.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

JobFn = Callable[[Callable[[], bool]], None]


class QueueFull(Exception):
    """Raised by `Scheduler.submit` when the waiting line is full."""


@dataclass(eq=False)
class Job:
    fn: JobFn
    cancel_event: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def cancel(self) -> None:
        self.cancel_event.set()

    @property
    def cancelled(self) -> bool:
        return self.cancel_event.is_set()


class Scheduler:
    """Runs jobs one at a time on a dedicated thread."""

    def __init__(
        self,
        max_queue: int,
        *,
        on_depth: Callable[[int], None] | None = None,
        on_error: Callable[[BaseException], None] | None = None,
    ) -> None:
        if max_queue < 1:
            raise ValueError(f"max_queue={max_queue}: expected an integer >= 1")
        self.max_queue = max_queue
        self._on_depth = on_depth
        self._on_error = on_error
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._lock = threading.Lock()
        self._waiting = 0
        self._running = False
        self._thread = threading.Thread(target=self._loop, name="ffwd-worker", daemon=True)
        self._thread.start()

    @property
    def depth(self) -> int:
        """Jobs waiting to start (the running one excluded)."""
        return self._waiting

    @property
    def running(self) -> bool:
        """Whether a job is on the worker now."""
        return self._running

    def submit(self, fn: JobFn) -> Job:
        job = Job(fn)
        with self._lock:
            if self._waiting >= self.max_queue:
                raise QueueFull(
                    f"the server is busy: {self._waiting} requests are already waiting "
                    f"(--max-queue {self.max_queue}); retry later"
                )
            self._waiting += 1
            self._queue.put(job)
        self._report_depth()
        return job

    def close(self, timeout: float = 5.0) -> None:
        self._queue.put(None)
        self._thread.join(timeout)

    def _report_depth(self) -> None:
        if self._on_depth is not None:
            self._on_depth(self._waiting)

    def _loop(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            with self._lock:
                self._waiting -= 1
            self._report_depth()
            job.started.set()
            self._running = True
            try:
                if not job.cancelled:
                    job.fn(job.cancel_event.is_set)
            except BaseException as exc:  # a failed job must never stop the worker
                job.error = exc
                if self._on_error is not None:
                    self._on_error(exc)
            finally:
                self._running = False
                job.done.set()
