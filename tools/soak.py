"""A bounded soak of `ffwd serve` on loopback, restarted every round: ``python -m tools.soak``.

    python -m tools.soak [--minutes 30] [--clients 8] [--round-seconds 120] [--parallel 4]

Each round starts a server (``ffwd serve`` on a free 127.0.0.1 port; the same cache
folder each time, so every round after the first is a restart), then:

1. **load**: `--clients` threads send, in turn, every kind of `tools.soak_requests`
   (chat whole and streamed, forced tool calls, Completions, Responses and Messages
   whole and streamed, streams their clients cut after a few events, bad bodies on
   five endpoints), each answer judged (5xx, malformed, lost);
2. **metrics**: once nothing runs, `/metrics` must count what the clients saw: requests
   by endpoint and status, the cut streams as cancelled (each one
   `ffwd_forwards_after_cancel` observation), no generation or stream errors;
3. **drain**: `--parallel` long streams run, the server gets SIGTERM, and until it has gone
   `/health` is polled (it must say 503 ``draining`` from the signal on, never 200
   again) and new requests are sent (the drain's 503 is right); each stream ends with
   its reply or the drain's error event, never cut off; the process exits within its
   grace period and a few seconds, its log's last line counting what it did (a
   drain without that line misses its target).

It prints one JSON report (with the load average at the start and the end) and exits 1
if a target is missed: no 5xx, nothing malformed or lost, /metrics equal to the
clients' counts, /health 503 while draining. Everything is bounded: the clients, each
request's time (120 s), each reply's length, the rounds (until `--minutes` is up). The
server listens on loopback only: arguments after ``--`` go to ``ffwd serve``, but not
``--host`` (nor ``--api-key``, which the clients do not send).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from ffwd.bench.systems.servers import ChildServer, free_port
from tools.soak_requests import CHAT, KINDS, Outcome, send

GRACE = 5  # seconds the running requests get to finish once the server is told to stop
PROBLEMS = ("5xx", "malformed", "lost")
SAMPLES = 10  # problems kept in the report, to say what went wrong


@dataclass
class Tally:
    """What the clients saw, shared by their threads; `seen` is this round's answers by
    (path, status), for /metrics."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    by_kind: dict[str, Counter[str]] = field(default_factory=dict)
    problems: Counter[str] = field(default_factory=Counter)
    samples: list[str] = field(default_factory=list)
    seen: Counter[tuple[str, int]] = field(default_factory=Counter)
    abandoned: int = 0
    drain_refusals: int = 0  # the drain's 503s and cut streams: right answers

    def add(self, kind: str, out: Outcome) -> None:
        with self.lock:
            self.by_kind.setdefault(kind, Counter())[str(out.status or "no answer")] += 1
            if out.status is not None:
                self.seen[out.path, out.status] += 1
            self.abandoned += out.abandoned
            self.drain_refusals += out.note == "drain"
            if out.problem is not None:
                self.problems[out.problem] += 1
                if len(self.samples) < SAMPLES:
                    self.samples.append(f"{kind} {out.path} {out.status}: {out.problem}: "
                                        f"{out.note[:300]}")


def start_server(parallel: int, clients: int, extra: Sequence[str]) -> ChildServer:
    port = free_port()
    cmd = [sys.executable, "-m", "ffwd.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--parallel", str(parallel), "--max-queue", str(2 * clients),
           "--shutdown-grace", str(GRACE), *extra]
    return ChildServer("ffwd serve", cmd, port, startup_seconds=600,
                       env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})


def load(url: str, clients: int, seconds: float, tally: Tally, start: int) -> None:
    """`clients` threads, each sending every kind in turn until `seconds` are up."""
    stop = time.monotonic() + seconds

    def client(w: int) -> None:
        with httpx.Client(timeout=120) as c:
            i = 0
            while time.monotonic() < stop:
                kind = KINDS[(w + i) % len(KINDS)]
                tally.add(kind, send(c, url, kind, start + w * 100_000 + i, lambda: False))
                i += 1

    threads = [threading.Thread(target=client, args=(w,)) for w in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def scrape(url: str) -> dict[tuple[str, str], float]:
    """The server's samples, by (name, labels): ``('ffwd_requests_total', 'endpoint=...,
    status=...')``."""
    text = httpx.get(url + "/metrics", timeout=30).text
    out: dict[tuple[str, str], float] = {}
    for m in re.finditer(r"^(\w+)(?:\{(.*)\})? (\S+)$", text, re.M):
        out[m[1], (m[2] or "").replace('"', "")] = float(m[3])
    return out


def idle(url: str, seconds: float = 60) -> None:
    """Wait until nothing runs or waits (the cut streams' runs have ended)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        h = httpx.get(url + "/health", timeout=30).json()
        if not h.get("active") and not h.get("queue_depth"):
            break
        time.sleep(0.1)
    time.sleep(0.5)  # a response's count comes when its stream has closed


def metrics_mismatches(url: str, tally: Tally) -> list[str]:
    """Where /metrics and the clients disagree (nothing: they agree)."""
    idle(url)
    got = scrape(url)
    out = []
    server = {(labels.split(",")[0].removeprefix("endpoint="),
               int(labels.split(",")[1].removeprefix("status="))): int(v)
              for (name, labels), v in got.items() if name == "ffwd_requests_total"
              and labels.startswith("endpoint=/v1/")}
    for key in sorted(set(server) | set(tally.seen)):
        if server.get(key, 0) != tally.seen.get(key, 0):
            out.append(f"{key[0]} {key[1]}: clients {tally.seen.get(key, 0)}, server "
                       f"{server.get(key, 0)}")
    cancelled = sum(v for (n, _), v in got.items() if n == "ffwd_cancelled_requests_total")
    observed = got.get(("ffwd_forwards_after_cancel_count", ""), 0)
    if not cancelled == observed == tally.abandoned:
        out.append(f"cut streams: clients {tally.abandoned}, cancelled {cancelled:g}, "
                   f"forwards_after_cancel observed {observed:g}")
    for name in ("ffwd_generation_errors_total", "ffwd_stream_errors_total"):
        if errors := sum(v for (n, _), v in got.items() if n == name):
            out.append(f"{name} {errors:g}")
    return out


@dataclass
class Drain:
    """What one SIGTERM showed: /health before (in transit) and after its first 503."""

    health: Counter[str] = field(default_factory=Counter)
    exit_s: float = 0.0
    log: str = ""

    @property
    def ok(self) -> bool:
        return (self.health["503 draining"] > 0 and not self.health["200 after 503"]
                and not self.health["other"] and self.exit_s <= GRACE + 5
                and "shut down:" in self.log)


def poll_health(url: str, drain: Drain, stop: threading.Event) -> None:
    """Until the server has gone: each /health answer, by what it said."""
    draining = False
    with httpx.Client(timeout=10, limits=httpx.Limits(max_keepalive_connections=0)) as c:
        while not stop.is_set():
            try:
                r = c.get(url + "/health")
            except httpx.HTTPError:
                return  # gone
            said = r.json().get("status") if r.status_code in (200, 503) else None
            if r.status_code == 503 and said == "draining":
                draining, key = True, "503 draining"
            elif r.status_code == 200 and said == "ok":
                key = "200 after 503" if draining else "200 before the signal arrived"
            else:
                key = "other"
            drain.health[key] += 1
            time.sleep(0.02)


def drain(server: ChildServer, parallel: int, tally: Tally) -> Drain:
    """Long streams going, then SIGTERM, with /health polled and new requests sent until
    the process has gone (module docstring, 3)."""
    out, told, stop = Drain(), threading.Event(), threading.Event()

    def stream(i: int) -> None:
        with httpx.Client(timeout=120) as c:
            tally.add("long", send(c, server.url, "long", i, told.is_set))

    def late() -> None:  # fresh connections: none is left idle for the server to close
        with httpx.Client(timeout=120, limits=httpx.Limits(max_keepalive_connections=0)) as c:
            i = 0
            while server.proc.poll() is None and not stop.is_set():
                tally.add("late", send(c, server.url, "chat", i, told.is_set))
                i += 1
                time.sleep(0.1)

    streams = [threading.Thread(target=stream, args=(i,)) for i in range(parallel)]
    for t in streams:
        t.start()
    deadline = time.monotonic() + 60  # every stream running: each one the drain must end
    while httpx.get(server.url + "/health", timeout=30).json().get("active", 0) < parallel \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    others = [threading.Thread(target=poll_health, args=(server.url, out, stop)),
              threading.Thread(target=late)]
    told.set()
    t0 = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    for t in others:
        t.start()
    with contextlib.suppress(subprocess.TimeoutExpired):  # too slow: counted, then killed
        server.proc.wait(GRACE + 30)
    out.exit_s = round(time.monotonic() - t0, 1)
    stop.set()
    for t in [*streams, *others]:
        t.join(150)
    out.log = next((ln for ln in reversed(server.tail(20_000).splitlines())
                    if "shut down:" in ln), "no shutdown line in the log")
    server.stop()
    return out


def greedy(url: str, tally: Tally) -> str:
    """One greedy reply, the same prompt every round (the server idle)."""
    r = httpx.post(url + CHAT, timeout=120, json={
        "model": "default", "messages": [{"role": "user", "content": "Name three rivers."}],
        "max_tokens": 24, "temperature": 0})
    tally.add("greedy", Outcome(CHAT, r.status_code, None if r.status_code == 200 else "5xx"
                                if r.status_code >= 500 else "malformed", r.text[:200]))
    return str(r.json()["choices"][0]["message"]["content"]) if r.status_code == 200 else ""


def run(minutes: float, clients: int, round_s: float, parallel: int,
        extra: Sequence[str] = ()) -> dict[str, Any]:
    """The soak (module docstring); its report."""
    started, load_avg = time.monotonic(), os.getloadavg()
    deadline = started + minutes * 60
    tally, drains, mismatches, replies = Tally(), list[Drain](), list[str](), set[str]()
    rounds = 0
    while rounds == 0 or deadline - time.monotonic() > 60:
        server = start_server(parallel, clients, extra)
        try:
            round_tally = Tally()
            replies.add(greedy(server.url, round_tally))
            seconds = min(round_s, max(20.0, deadline - time.monotonic() - GRACE - 20))
            load(server.url, clients, seconds, round_tally, rounds * 10_000_000)
            mismatches += [f"round {rounds}: {m}" for m in
                           metrics_mismatches(server.url, round_tally)]
            merge(tally, round_tally)
            drains.append(drain(server, parallel, tally))
        finally:
            server.stop()
        rounds += 1
    return report(tally, drains, mismatches, replies, rounds, started, load_avg)


def merge(into: Tally, round_tally: Tally) -> None:
    for kind, counts in round_tally.by_kind.items():
        into.by_kind.setdefault(kind, Counter()).update(counts)
    into.problems.update(round_tally.problems)
    into.samples += round_tally.samples[:max(0, SAMPLES - len(into.samples))]
    into.abandoned += round_tally.abandoned
    into.drain_refusals += round_tally.drain_refusals


def report(tally: Tally, drains: list[Drain], mismatches: list[str], replies: set[str],
           rounds: int, started: float, load_avg: tuple[float, ...]) -> dict[str, Any]:
    res: dict[str, Any] = {
        "minutes": round((time.monotonic() - started) / 60, 1), "rounds": rounds,
        "requests": sum(sum(c.values()) for c in tally.by_kind.values()),
        "by_kind": {k: dict(sorted(c.items())) for k, c in sorted(tally.by_kind.items())},
        **{p: tally.problems[p] for p in PROBLEMS},
        "problem_samples": tally.samples, "cut_streams": tally.abandoned,
        "drain_refusals": tally.drain_refusals, "metrics_mismatches": mismatches,
        "drains": [{"health": dict(d.health), "exit_s": d.exit_s, "log": d.log[-160:]}
                   for d in drains],
        "greedy_replies": len(replies),  # distinct greedy replies over the rounds
        "load_average": {"start": [round(x, 2) for x in load_avg],
                         "end": [round(x, 2) for x in os.getloadavg()]},
    }
    res["ok"] = (not any(res[p] for p in PROBLEMS) and not mismatches
                 and all(d.ok for d in drains))
    return res


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--round-seconds", type=float, default=120.0,
                    help="load time of each server's life, between its start and SIGTERM")
    ap.add_argument("--parallel", type=int, default=4, help="the server's --parallel")
    ap.add_argument("server_args", nargs="*", help="more `ffwd serve` arguments (after --)")
    args = ap.parse_args(argv)
    if any(a.split("=")[0] in ("--host", "--api-key") for a in args.server_args):
        ap.error("the soak's server listens on 127.0.0.1 with no key: no --host or --api-key")
    if not (1 <= args.clients <= 64 and 1 <= args.parallel <= 16 and 0 < args.minutes <= 240
            and args.round_seconds >= 10):
        ap.error("--clients 1-64, --parallel 1-16, --minutes up to 240, --round-seconds >= 10")
    res = run(args.minutes, args.clients, args.round_seconds, args.parallel, args.server_args)
    print(json.dumps(res, indent=2))
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
