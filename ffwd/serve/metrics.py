"""Prometheus metrics for one server (its own registry, so tests can run many).

Label values are bounded: ``endpoint`` is one of the app's own routes or
``other`` (any unknown path, whoever sent it), ``status`` an HTTP status code.
`ffwd_forward_calls_total` is read live from the model (cancelled and failed
generations included), so it shows progress while a request runs.

Scheduling (``--parallel N``): `ffwd_active_sequences` is the requests decoding
now, `ffwd_queue_depth` those waiting for a sequence, `ffwd_queue_wait_seconds`
how long each waited, and `ffwd_batch_sequences` (read live from the model, like
the forward count) how many sequences each model forward carried.

`ffwd_max_tokens_capped_total` counts the generations whose ``max_tokens`` the
server lowered, by what lowered it (``max_tokens_limit`` or ``context_window``).
`ffwd_draining` is 1 from the first shutdown signal on (as /health's 503), else 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from ffwd.engine.core.batch import BatchStats
from ffwd.engine.core.generate import GenerationResult

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128)
WAIT_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)  # sequences in one forward
OTHER_ENDPOINT = "other"


class _LiveCounter(Collector):
    """A counter whose value is read from a callable at scrape time."""

    def __init__(self, name: str, doc: str, read: Callable[[], int]) -> None:
        self.name, self.doc, self.read = name, doc, read

    def collect(self) -> Iterator[CounterMetricFamily]:
        yield CounterMetricFamily(self.name, self.doc, value=self.read())


class _BatchSizes(Collector):
    """Sequences per model forward, as a histogram read from the model at scrape time."""

    def __init__(self, read: Callable[[], BatchStats]) -> None:
        self.read = read

    def collect(self) -> Iterator[HistogramMetricFamily]:
        stats = self.read()
        buckets = [(str(le), sum(n for size, n in stats.by_size.items() if size <= le))
                   for le in BATCH_BUCKETS]
        buckets.append(("+Inf", stats.steps))
        total = sum(size * n for size, n in stats.by_size.items())
        yield HistogramMetricFamily(
            "ffwd_batch_sequences", "Sequences (running requests) carried by one model forward",
            buckets=buckets, sum_value=total)


class EngineView(Protocol):
    """What /metrics reads live of the engine's loop (`ffwd.engine.core.scheduler.Engine`)."""

    @property
    def depth(self) -> int: ...

    @property
    def active(self) -> int: ...

    def batch_stats(self) -> BatchStats: ...


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.endpoints: frozenset[str] = frozenset()
        self.requests = Counter(
            "ffwd_requests", "HTTP requests by endpoint and status", ["endpoint", "status"],
            registry=r,
        )
        self.cancelled = Counter(
            "ffwd_cancelled_requests",
            "Generations stopped because the client went away, by endpoint and streaming",
            ["endpoint", "stream"], registry=r,
        )
        self.forwards_after_cancel = Histogram(
            "ffwd_forwards_after_cancel",
            "Model forwards a cancelled generation's own sequence began after its client "
            "went away (a step: 0-1 plain; 0 for one still waiting)",
            registry=r, buckets=(0, 1, 2, 4, 8, 16, 64),
        )
        self.stream_errors = Counter(
            "ffwd_stream_errors", "Streams that failed after their 200 (an SSE error event)",
            ["endpoint"], registry=r,
        )
        self.prompt_tokens = Counter("ffwd_prompt_tokens", "Prompt tokens", registry=r)
        self.cached_tokens = Counter(
            "ffwd_cached_prompt_tokens", "Prompt tokens served from the prompt cache", registry=r
        )
        self.completion_tokens = Counter(
            "ffwd_completion_tokens", "Completion tokens (injected included)", registry=r
        )
        self.injected_tokens = Counter(
            "ffwd_injected_tokens", "Injected tokens by origin", ["origin"], registry=r
        )
        self.verify_tokens = Counter(
            "ffwd_verify_tokens", "Verify-policy tokens by result", ["result"], registry=r
        )
        self.ttft = Histogram(
            "ffwd_time_to_first_token_seconds", "Time to first token", registry=r,
            buckets=LATENCY_BUCKETS,
        )
        self.latency = Histogram(
            "ffwd_request_latency_seconds", "Request latency", registry=r,
            buckets=LATENCY_BUCKETS,
        )
        self.queue_depth = Gauge("ffwd_queue_depth", "Requests waiting for the model", registry=r)
        self.queue_wait = Histogram(
            "ffwd_queue_wait_seconds", "How long a request waited for a sequence to run on",
            registry=r, buckets=WAIT_BUCKETS,
        )
        self.active_sequences = Gauge(
            "ffwd_active_sequences", "Requests decoding now (at most --parallel)", registry=r)
        self.capped = Counter(
            "ffwd_max_tokens_capped", "Generations that asked for more output ids than the "
            "server gives one request, capped, by what capped them", ["by"], registry=r,
        )
        self.draining = Gauge("ffwd_draining", "1 from the first shutdown signal on (new "
                              "requests and /health get 503), else 0", registry=r)
        self.generation_errors = Counter(
            "ffwd_generation_errors", "Generations that failed with a server error (a 5xx, or "
            "an SSE error event; the traceback is in the server log)", ["endpoint"], registry=r,
        )

    def watch_forwards(self, read: Callable[[], int]) -> None:
        """Report `read()` (the model's forward passes so far) as ffwd_forward_calls_total."""
        self.registry.register(_LiveCounter("ffwd_forward_calls", "Model forward calls", read))

    def watch_draining(self, read: Callable[[], bool]) -> None:
        """Report `read()` (whether the server is going away) as ffwd_draining."""
        self.draining.set_function(lambda: float(read()))

    def watch_batches(self, read: Callable[[], BatchStats]) -> None:
        """Report `read()` (the model's forwards by sequences carried) as
        ffwd_batch_sequences."""
        self.registry.register(_BatchSizes(read))

    def watch_engine(self, engine: EngineView) -> None:
        """Report the engine's line and sequences live: ffwd_queue_depth,
        ffwd_active_sequences and ffwd_batch_sequences."""
        self.queue_depth.set_function(lambda: engine.depth)
        self.active_sequences.set_function(lambda: engine.active)
        self.watch_batches(engine.batch_stats)

    def endpoint(self, path: str) -> str:
        """The label for a request path: the route itself, or `OTHER_ENDPOINT`."""
        return path if path in self.endpoints else OTHER_ENDPOINT

    def count_request(self, path: str, status: int) -> None:
        self.requests.labels(endpoint=self.endpoint(path), status=str(status)).inc()

    def observe_finished(self, res: GenerationResult) -> None:
        """Count one finished generation (tokens and fills), cancelled ones included."""
        self.prompt_tokens.inc(res.prompt_tokens)
        self.cached_tokens.inc(res.cached_tokens)
        self.completion_tokens.inc(res.completion_tokens)
        for origin in res.origins:
            if origin != "sampled":
                self.injected_tokens.labels(origin=origin).inc()
        self.verify_tokens.labels(result="accepted").inc(res.stats.verify_accepted)
        self.verify_tokens.labels(result="rejected").inc(res.stats.verify_rejected)
        if res.cap is not None:
            self.capped.labels(by=res.cap.by).inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
