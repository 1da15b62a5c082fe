"""Prometheus metrics for one server (its own registry, so tests can run many)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from ffwd.serve.events import Finished

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.requests = Counter(
            "ffwd_requests", "HTTP requests by endpoint and status", ["endpoint", "status"],
            registry=r,
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
        self.forward_calls = Counter("ffwd_forward_calls", "Model forward calls", registry=r)
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

    def observe_finished(self, fin: Finished) -> None:
        """Count one finished generation (tokens, forwards, fills)."""
        self.prompt_tokens.inc(fin.usage.prompt_tokens)
        self.cached_tokens.inc(fin.usage.cached_tokens)
        self.completion_tokens.inc(fin.usage.completion_tokens)
        self.forward_calls.inc(int(fin.ffwd.get("forward_calls", 0)))
        for origin, n in dict(fin.ffwd.get("injected_by_origin", {})).items():
            self.injected_tokens.labels(origin=origin).inc(n)
        stats = dict(fin.ffwd.get("stats", {}))
        self.verify_tokens.labels(result="accepted").inc(int(stats.get("verify_accepted", 0)))
        self.verify_tokens.labels(result="rejected").inc(int(stats.get("verify_rejected", 0)))

    def render(self) -> bytes:
        return generate_latest(self.registry)
