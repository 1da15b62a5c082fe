"""Bounded load run against a live ffwd server on loopback.

    python -m ffwd.bench.load --url http://127.0.0.1:8000 [--clients 4] [--seconds 120]

Each client loops until the time is up, cycling through plain chat, a
streamed chat, a forced tool call, a streamed tool call, and a streamed chat
that it abandons after the first chunks (a client disconnecting mid-stream).
It prints requests, failures, 5xx, 429s and latency percentiles as JSON; the
exit status is 1 if any request failed or got a 5xx.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import httpx

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    },
}]
USER = [{"role": "user", "content": "What is the weather like in Lisbon today?"}]
KINDS = ("chat", "stream", "tool", "stream_tool", "abandon")


def body(kind: str, i: int) -> dict[str, Any]:
    b: dict[str, Any] = {"model": "default", "messages": USER, "max_tokens": 32,
                         "temperature": 0.7, "seed": i}
    if kind in ("tool", "stream_tool"):
        b.update(tools=TOOLS, tool_choice="required", max_tokens=48)
    if kind in ("stream", "stream_tool", "abandon"):
        b.update(stream=True)
    if kind == "abandon":
        b.update(max_tokens=400)
    return b


def one(client: httpx.Client, url: str, kind: str, i: int) -> tuple[int, float]:
    """Run one request; (status, seconds). Streams are read to [DONE] unless abandoned."""
    t0 = time.perf_counter()
    b = body(kind, i)
    if not b.get("stream"):
        r = client.post(url + "/v1/chat/completions", json=b)
        if r.status_code == 200:
            assert "message" in json.loads(r.text)["choices"][0]
        return r.status_code, time.perf_counter() - t0
    with client.stream("POST", url + "/v1/chat/completions", json=b) as r:
        if r.status_code != 200:
            r.read()
            return r.status_code, time.perf_counter() - t0
        for n, line in enumerate(r.iter_lines()):
            if kind == "abandon" and n >= 3:
                break  # leaving the block closes the connection mid-stream
            if line == "data: [DONE]":
                break
    return 200, time.perf_counter() - t0


def run(url: str, clients: int, seconds: float) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    lock = threading.Lock()
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    failures: list[str] = []

    def worker(w: int) -> None:
        with httpx.Client(timeout=300) as client:
            i = 0
            while time.monotonic() < deadline:
                kind = KINDS[(w + i) % len(KINDS)]
                try:
                    status, dt = one(client, url, kind, w * 1000 + i)
                    with lock:
                        statuses[str(status)] = statuses.get(str(status), 0) + 1
                        if status == 200:
                            latencies.append(dt)
                except Exception as exc:  # a failure to count, not to crash the run
                    with lock:
                        failures.append(f"{kind}: {type(exc).__name__}: {exc}")
                i += 1

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    lat = sorted(latencies)

    def pct(p: float) -> float:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))], 3) if lat else 0.0

    return {
        "clients": clients, "seconds": seconds,
        "requests": sum(statuses.values()) + len(failures), "statuses": statuses,
        "failures": len(failures), "failure_samples": failures[:5],
        "server_errors": sum(n for s, n in statuses.items() if s.startswith("5")),
        "p50_s": pct(0.5), "p95_s": pct(0.95),
        "mean_s": round(statistics.fmean(lat), 3) if lat else 0.0,
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=120.0)
    args = ap.parse_args(argv)
    if not args.url.startswith(("http://127.", "http://localhost", "http://[::1]")):
        ap.error("--url must be a loopback address")
    res = run(args.url.rstrip("/"), args.clients, args.seconds)
    print(json.dumps(res, indent=2))
    return 1 if res["failures"] or res["server_errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
