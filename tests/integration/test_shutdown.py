"""Stopping `ffwd serve` (issue 39): on SIGTERM with streams in flight it refuses new and
waiting requests with a 503, lets the running ones finish within the grace period, cuts
the rest with an error event that says so, logs one line counting them, and exits
within the grace period and two seconds."""

from __future__ import annotations

import json
import signal
import threading
import time
from typing import Any

import httpx

from tests.integration.live_server import Server

GRACE = 20  # the short reply finishes well inside it even on a loaded machine
# Long greedy replies: the end of the turn is never chosen, so each runs to max_tokens.
LONG = {"model": "default", "messages": [{"role": "user", "content": "Count to a million."}],
        "max_tokens": 4000, "temperature": 0, "stream": True,
        "logit_bias": {"2": -100}}  # SmolLM2's <|im_end|>
# Long enough to be still running when the third request has queued behind it (seconds
# on two cores), short enough to finish well inside the grace period.
SHORT = {**LONG, "max_tokens": 200}


def stream(url: str, body: dict[str, Any], out: dict[str, Any]) -> None:
    """One streamed chat completion: its events, the error event if any, whether it ended
    with [DONE]."""
    events: list[Any] = []
    with httpx.Client(timeout=120) as c, c.stream("POST", url + "/v1/chat/completions",
                                                 json=body) as r:
        out["status"] = r.status_code
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:] if line == "data: [DONE]" else json.loads(line[6:]))
    out["events"] = events


def test_sigterm_drains_within_the_grace_period() -> None:
    server = Server("--parallel", "2", "--shutdown-grace", str(GRACE), "--fill", "off")
    try:
        runs = [(SHORT, {}), (LONG, {}), (LONG, {})]  # two run, one waits
        threads = [threading.Thread(target=stream, args=(server.url, body, out))
                   for body, out in runs]
        for t in threads:
            t.start()
            time.sleep(0.1)
        deadline = time.monotonic() + 60
        while (health := httpx.get(server.url + "/health").json())["active"] < 2 or \
                health["queue_depth"] < 1:  # two running, one waiting
            assert time.monotonic() < deadline, health
            time.sleep(0.02)
        assert "events" not in runs[0][1], "the short reply ended before the line formed"
        t0 = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        late = httpx.post(server.url + "/v1/chat/completions", json={**SHORT, "stream": False})
        assert late.status_code == 503 and late.headers["retry-after"] == "1"
        assert late.json()["error"]["code"] == "server_shutting_down"
        server.proc.wait(GRACE + 10)
        took = time.monotonic() - t0
        for t in threads:
            t.join(10)
    finally:
        server.stop()
    assert took <= GRACE + 2, took
    log = server.tail(20000)
    assert "SIGTERM: draining" in log
    finished = [out for _, out in runs if out["events"][-2].get("choices")]
    errors = [out["events"][-2]["error"] for _, out in runs if "error" in out["events"][-2]]
    assert all(out["events"][-1] == "[DONE]" for _, out in runs)  # every stream ended cleanly
    assert finished and runs[0][1] in finished  # the short one finished in time
    assert [e["code"] for e in errors] == ["server_shutting_down"] * 2  # one cut, one refused
    assert ["did not start" in e["message"] for e in errors] == [False, True]
    assert f"1 requests finished, 1 cut after the {GRACE} s grace period, 2 refused" in log
