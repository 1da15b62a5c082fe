"""Reuse idle keep-alive connections against a live server and count what fails.

    python -m tools.keepalive --url http://127.0.0.1:8000 [--reuses 500] [--connections 10]
                              [--gap 4.9 5.5] [--expiry 60] [--seed 0]

Each of `--connections` clients is a plain `httpx.Client` with one connection,
kept idle up to `--expiry` seconds (httpx's own default is 5: pass 5 to see
what the SDKs built on it do). A client sends a one-id chat completion, reads
the whole answer, waits a gap drawn uniformly from `--gap` (seconds), and
sends again, until the clients together have sent `--reuses` requests after a
gap. A request after a gap is a *reuse* when it went out on the connection
that answered the one before (the same local port); one that failed is
counted by its error (``RemoteProtocolError``: the server closed the
connection as the request went out). It prints JSON (requests, reuses,
failures by kind, the last Keep-Alive header seen) and exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

BODY = {"model": "default", "max_tokens": 1,
        "messages": [{"role": "user", "content": "Say hi."}]}


@dataclass
class Tally:
    """What the clients saw, summed under a lock."""

    requests: int = 0
    reuses: int = 0  # requests after a gap sent on the connection that answered the last
    failures: Counter[str] = field(default_factory=Counter)
    keep_alive: str | None = None  # the last Keep-Alive header seen
    lock: threading.Lock = field(default_factory=threading.Lock)

    def summary(self) -> dict[str, Any]:
        return {"requests": self.requests, "reuses": self.reuses,
                "failed": sum(self.failures.values()), "failures": dict(self.failures),
                "keep_alive_header": self.keep_alive}


def local_port(r: httpx.Response) -> int | None:
    """The client's port of the connection that carried `r`."""
    stream = r.extensions.get("network_stream")
    addr = stream.get_extra_info("client_addr") if stream is not None else None
    return int(addr[1]) if addr else None


def client_run(url: str, gaps: list[float], expiry: float, tally: Tally) -> None:
    """One client: a first request, then one after each gap in `gaps`."""
    limits = httpx.Limits(max_connections=1, keepalive_expiry=expiry)
    with httpx.Client(base_url=url, limits=limits, timeout=120) as c:
        port: int | None = None
        for i, gap in enumerate([0.0, *gaps]):
            # 1. wait out the gap on the idle connection, then send on it.
            time.sleep(gap)
            try:
                r = c.post("/v1/chat/completions", json=BODY)
                r.read()
                error = None if r.status_code == 200 else f"HTTP {r.status_code}"
            except httpx.HTTPError as exc:
                r, error = None, type(exc).__name__
            # 2. count it: a failure by its kind, a reuse when the port is the last one's.
            now = local_port(r) if r is not None else None
            with tally.lock:
                tally.requests += 1
                if error:
                    tally.failures[error] += 1
                elif i and now is not None and now == port:
                    tally.reuses += 1
                if r is not None and "keep-alive" in r.headers:
                    tally.keep_alive = r.headers["keep-alive"]
            port = now


def soak(url: str, reuses: int, connections: int = 1, gap: tuple[float, float] = (4.9, 5.5),
         expiry: float = 60.0, seed: int = 0) -> dict[str, Any]:
    """Run the clients (see the module docstring) and return the summary."""
    rng = random.Random(seed)
    per = [reuses // connections + (i < reuses % connections) for i in range(connections)]
    tally = Tally()
    threads = [threading.Thread(target=client_run, args=(
        url, [rng.uniform(*gap) for _ in range(n)], expiry, tally)) for n in per if n]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return tally.summary()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", default="http://127.0.0.1:8000")
    p.add_argument("--reuses", type=int, default=500, help="requests sent after a gap, in all")
    p.add_argument("--connections", type=int, default=10, help="clients side by side")
    p.add_argument("--gap", type=float, nargs=2, default=(4.9, 5.5), metavar=("MIN", "MAX"),
                   help="idle seconds before each reuse, drawn uniformly")
    p.add_argument("--expiry", type=float, default=60.0,
                   help="seconds a client keeps an idle connection (httpx's default: 5)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args(argv)
    started = time.monotonic()
    out = soak(a.url, a.reuses, a.connections, tuple(a.gap), a.expiry, a.seed)
    out |= {"gap_s": list(a.gap), "expiry_s": a.expiry, "connections": a.connections,
            "wall_s": round(time.monotonic() - started, 1)}
    print(json.dumps(out, indent=2))
    return 1 if out["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
