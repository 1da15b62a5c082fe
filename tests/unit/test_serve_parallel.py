"""The engine's loop under --parallel N, with a scripted service: runs side by side, the
waiting line's order across tenants, 429 when every sequence and the line are busy, and
what /metrics says of it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import replace
from typing import Any

from fastapi.testclient import TestClient

from ffwd.engine.core.batch import BatchStats
from ffwd.serve.app import create_app
from ffwd.serve.dialects.chat import parse_chat
from ffwd.serve.execute import LocalExecutor
from ffwd.serve.request import Context, GenerationRequest
from tests.unit.scripted import STEP, ScriptedContext, ScriptedModel, result, text

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}


class FixedStats(ScriptedContext):
    """Forwards counted as five: two of one sequence, three of three."""

    def batch_stats(self) -> BatchStats:
        return BatchStats(5, {1: 2, 3: 3})


class Gated(ScriptedModel):
    """Each run waits for its own release; `order` is the order runs started in."""

    def __init__(self, parallel: int) -> None:
        self.parallel = parallel
        self.order: list[str] = []
        self.release: dict[str, threading.Event] = {}
        self.started = threading.Semaphore(0)
        self.lock = threading.Lock()
        self._context = FixedStats(parallel)

    def prepare(self, req: GenerationRequest) -> Any:
        return req.context.request_id

    def run(self, prepared: Any, cancelled: Callable[[], bool]) -> Iterator[Any]:
        with self.lock:
            self.order.append(prepared)
            gate = self.release.setdefault(prepared, threading.Event())
        self.started.release()
        while not gate.is_set() and not cancelled():
            yield STEP
        yield text("ok")
        yield result("ok")

    def let_go(self, name: str) -> None:
        with self.lock:
            self.release.setdefault(name, threading.Event()).set()


def request(name: str, tenant: str) -> GenerationRequest:
    return replace(parse_chat(CHAT), context=Context(name, tenant, "tiny"))


def ender(done: list[str], name: str) -> Callable[[list[Any]], None]:
    """A run's deliver: notes `name` in `done` once the run has ended."""
    return lambda items: done.append(name) if items[-1] is None else None


def started(svc: Gated, n: int) -> None:
    for _ in range(n):
        assert svc.started.acquire(timeout=10)


def test_runs_go_side_by_side_and_tenants_take_turns() -> None:
    async def scenario() -> list[str]:
        svc = Gated(parallel=2)
        ex = LocalExecutor(svc, max_queue=8)
        done: list[str] = []
        for name in ("a1", "a2"):
            await ex.start(request(name, "A"), ender(done, name))
        started(svc, 2)  # both run at once
        assert ex.active == 2 and ex.depth == 0
        for name, tenant in (("a3", "A"), ("a4", "A"), ("b1", "B"), ("c1", "C")):
            await ex.start(request(name, tenant), ender(done, name))
        for name in ("a1", "a2", "b1", "c1"):  # one comes free at a time
            svc.let_go(name)
            await asyncio.to_thread(started, svc, 1)
        svc.let_go("a3")
        svc.let_go("a4")
        ex.close()
        return svc.order

    # A came first, but B and C, with nothing running, go before A's waiting ones.
    assert asyncio.run(scenario()) == ["a1", "a2", "b1", "c1", "a3", "a4"]


def test_one_worker_alternates_tenants_in_arrival_order_within_each() -> None:
    async def scenario() -> list[str]:
        svc = Gated(parallel=1)
        ex = LocalExecutor(svc, max_queue=8)
        await ex.start(request("a1", "A"), ender([], "a1"))
        started(svc, 1)
        for name, tenant in (("a2", "A"), ("a3", "A"), ("b1", "B"), ("b2", "B")):
            await ex.start(request(name, tenant), ender([], name))
        for name in ("a1", "b1", "a2", "b2"):
            svc.let_go(name)
            await asyncio.to_thread(started, svc, 1)
        svc.let_go("a3")
        ex.close()
        return svc.order

    assert asyncio.run(scenario()) == ["a1", "b1", "a2", "b2", "a3"]


def test_429_only_when_every_worker_and_the_line_are_busy_and_metrics_say_so() -> None:
    svc = Gated(parallel=2)
    app = create_app(svc, max_queue=1)
    codes: list[int] = []
    with ExitStack() as stack:
        c = stack.enter_context(TestClient(app))
        # a failed check must not leave the gated runs holding the client's exit forever
        stack.callback(lambda: [svc.let_go(n) for n in ("r1", "r2", "r3")])

        def call(name: str) -> None:
            body = {**CHAT, "messages": [{"role": "user", "content": name}]}
            codes.append(c.post("/v1/chat/completions", json=body,
                                headers={"x-request-id": name}).status_code)

        threads = [threading.Thread(target=call, args=(n,)) for n in ("r1", "r2", "r3")]
        for t in threads[:2]:
            t.start()
        started(svc, 2)
        threads[2].start()
        for _ in range(500):  # r3 waits in the line
            if app.state.executor.depth == 1:
                break
            threading.Event().wait(0.01)
        r = c.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 429 and r.headers["retry-after"] == "1"
        assert "2 requests are running (--parallel 2)" in r.json()["error"]["message"]
        assert "1 are waiting (--max-queue 1)" in r.json()["error"]["message"]
        health = c.get("/health").json()
        assert health["active"] == 2 and health["queue_depth"] == 1 and health["parallel"] == 2
        metrics = c.get("/metrics").text
        assert "ffwd_active_sequences 2.0" in metrics and "ffwd_queue_depth 1.0" in metrics
        for name in ("r1", "r2", "r3"):
            svc.let_go(name)
        for t in threads:
            t.join(10)
        assert codes == [200, 200, 200]
        metrics = c.get("/metrics").text
        assert "ffwd_queue_wait_seconds_count 3.0" in metrics
        assert 'ffwd_batch_sequences_bucket{le="2"} 2.0' in metrics
        assert 'ffwd_batch_sequences_bucket{le="4"} 5.0' in metrics
        assert "ffwd_batch_sequences_sum 11.0" in metrics
