"""Bounded load run against a live ffwd server (one process or Ray replicas) on loopback.

    python -m tools.load --url http://127.0.0.1:8000 [--clients 4] [--seconds 120]
    python -m tools.load --workload agent --turns 4 [--clients 4] [--seconds 120]

`mixed`: each client loops until the time is up, cycling through plain chat,
a streamed chat, a forced tool call, a streamed tool call, and a streamed
chat that it abandons after the first chunks (a client disconnecting).

`agent`: each client runs multi-turn agent conversations (a system prompt,
tools, `--turns` requests, each resending the whole conversation with the
model's answer and its tool call's result appended: a tool call is required
on every turn but the last; results are ~0.8 KB and specific to the
conversation), one conversation per client at a time, so the conversations
interleave at the server; `--think S` waits S seconds between a client's turns
(the agent running its tool), so replicas can be idle when a turn arrives. It
reports the prompt-cache hit rate of turns 2 and later (cached / prompt
tokens), how many of them ran on the previous turn's replica, and the
router's own counters (`ffwd_route_*`, when the server has them) over the run.

Both print requests, failures, 5xx, 429s, requests/s and latency percentiles
as JSON; the exit status is 1 if any request failed or got a 5xx.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
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
AGENT_TOOLS = [*TOOLS, {
    "type": "function",
    "function": {
        "name": "search_flights",
        "description": "Find flights between two cities on a date.",
        "parameters": {"type": "object", "properties": {
            "origin": {"type": "string"}, "destination": {"type": "string"},
            "date": {"type": "string", "description": "YYYY-MM-DD"}},
            "required": ["origin", "destination"]},
    },
}]
AGENT_SYSTEM = (
    "You are a travel agent working for one customer at a time. Use the tools to look "
    "up weather and flights before you answer, keep answers short, and quote the exact "
    "figures the tools return. Never invent a flight number or a price."
)
CITIES = ("Lisbon", "Oslo", "Kyoto", "Quito", "Dakar", "Hanoi", "Lima", "Perth", "Riga",
          "Tunis", "Cusco", "Split")


@dataclass
class Tally:
    """What the clients saw, shared between their threads."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    latencies: list[float] = field(default_factory=list)
    later_latencies: list[float] = field(default_factory=list)  # agent turns 2+
    statuses: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    prompt: int = 0  # agent turns 2+: prompt tokens, and of those cached
    cached: int = 0
    later_turns: int = 0
    same_replica: int = 0
    replicas: set[str] = field(default_factory=set)

    def status(self, status: int, seconds: float, later: bool = False) -> None:
        with self.lock:
            self.statuses[str(status)] = self.statuses.get(str(status), 0) + 1
            if status == 200:
                self.latencies.append(seconds)
                if later:
                    self.later_latencies.append(seconds)

    def fail(self, what: str, exc: Exception) -> None:
        with self.lock:
            self.failures.append(f"{what}: {type(exc).__name__}: {exc}")


# --- mixed ---------------------------------------------------------------------------
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


def mixed_client(client: httpx.Client, url: str, w: int, deadline: float, t: Tally) -> None:
    i = 0
    while time.monotonic() < deadline:
        kind = KINDS[(w + i) % len(KINDS)]
        try:
            t.status(*one(client, url, kind, w * 1000 + i))
        except Exception as exc:  # a failure to count, not to crash the run
            t.fail(kind, exc)
        i += 1


# --- agent conversations -----------------------------------------------------------
def tool_result(city: str, turn: int) -> str:
    """A tool's answer, specific to the conversation and turn (~0.8 KB, like agents' tools).

    >>> len(tool_result("Oslo", 1)) > 700, tool_result("Oslo", 1) != tool_result("Riga", 1)
    (True, True)
    """
    seed = sum(map(ord, city)) + 31 * turn
    days = [{"day": d, "temp_c": (seed + 7 * d) % 30, "rain_mm": (seed * d) % 13,
             "wind_kmh": (seed + d * d) % 40} for d in range(1, 8)]
    flights = [{"number": f"{city[:2].upper()}{(seed + 97 * i) % 900 + 100}",
                "depart": f"{6 + 3 * i:02d}:{(seed + i) % 60:02d}",
                "price_eur": 60 + (seed * (i + 1)) % 240} for i in range(5)]
    return json.dumps({"city": city, "forecast": days, "flights": flights})


def next_messages(messages: list[dict[str, Any]], reply: dict[str, Any], city: str, turn: int
                  ) -> list[dict[str, Any]]:
    """The conversation after `reply`: its tool calls answered, or a follow-up asked."""
    out = [*messages, {k: v for k, v in reply.items() if k in ("role", "content", "tool_calls")}]
    for call in reply.get("tool_calls") or []:
        out.append({"role": "tool", "tool_call_id": call["id"],
                    "content": tool_result(city, turn)})
    if not reply.get("tool_calls"):
        out.append({"role": "user", "content": f"Thanks. Step {turn + 1}: what else should I "
                    "check before I book?"})
    return out


def agent_client(client: httpx.Client, url: str, w: int, deadline: float, t: Tally,
                 turns: int, think: float = 0.0) -> None:
    conv = 0
    while time.monotonic() < deadline:
        city = CITIES[(w * 7 + conv) % len(CITIES)]
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": AGENT_SYSTEM},
            {"role": "user", "content": f"Customer {w}-{conv}: I fly from {city} to Madrid "
             "next week. What weather and flights should I expect?"}]
        last_replica = None
        for turn in range(turns):
            if turn and think:
                time.sleep(think)  # the agent runs the tool the model called
            if time.monotonic() >= deadline:
                break
            t0 = time.perf_counter()
            try:
                # An agent step: a tool call on every turn but the last, which answers.
                r = client.post(url + "/v1/chat/completions", json={
                    "model": "default", "messages": messages, "tools": AGENT_TOOLS,
                    "tool_choice": "required" if turn < turns - 1 else "auto",
                    "max_tokens": 48, "temperature": 0})
            except Exception as exc:
                t.fail(f"agent turn {turn}", exc)
                break
            t.status(r.status_code, time.perf_counter() - t0, later=turn > 0)
            if r.status_code != 200:
                break
            b = r.json()
            replica = r.headers.get("x-ffwd-replica", "")
            usage = b["usage"]
            with t.lock:
                t.replicas.add(replica)
                if turn > 0:
                    t.later_turns += 1
                    t.same_replica += replica == last_replica
                    t.prompt += usage["prompt_tokens"]
                    t.cached += (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
            last_replica = replica
            messages = next_messages(messages, b["choices"][0]["message"], city, turn)
        conv += 1


def route_counters(client: httpx.Client, url: str) -> dict[str, float]:
    """The server's `ffwd_route_*` counters (empty for a single-process server)."""
    try:
        text = client.get(url + "/metrics").text
    except httpx.HTTPError:
        return {}
    return {m[1]: float(m[2]) for m in re.finditer(r"^ffwd_route_(\w+)_total (\S+)$", text, re.M)}


# --- the run -----------------------------------------------------------------------
def pct(values: Sequence[float], p: float) -> float:
    """The p-quantile, nearest rank below.

    >>> pct([1.0, 2.0, 3.0, 4.0], 0.5), pct([], 0.5)
    (3.0, 0.0)
    """
    s = sorted(values)
    return round(s[min(len(s) - 1, int(p * len(s)))], 3) if s else 0.0


def run(url: str, clients: int, seconds: float, workload: str = "mixed",
        turns: int = 4, think: float = 0.0) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    t = Tally()
    with httpx.Client(timeout=30) as probe:
        before = route_counters(probe, url)

    def worker(w: int) -> None:
        with httpx.Client(timeout=300) as client:
            if workload == "agent":
                agent_client(client, url, w, deadline, t, turns, think)
            else:
                mixed_client(client, url, w, deadline, t)

    started = time.perf_counter()
    threads = [threading.Thread(target=worker, args=(w,)) for w in range(clients)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - started
    res: dict[str, Any] = {
        "workload": workload, "clients": clients, "seconds": round(elapsed, 1), "think_s": think,
        "requests": sum(t.statuses.values()) + len(t.failures), "statuses": t.statuses,
        "failures": len(t.failures), "failure_samples": t.failures[:5],
        "server_errors": sum(n for s, n in t.statuses.items() if s.startswith("5")),
        "requests_per_s": round(t.statuses.get("200", 0) / elapsed, 3),
        "p50_s": pct(t.latencies, 0.5), "p95_s": pct(t.latencies, 0.95),
        "mean_s": round(statistics.fmean(t.latencies), 3) if t.latencies else 0.0,
    }
    if workload == "agent":
        with httpx.Client(timeout=30) as probe:
            after = route_counters(probe, url)
        res.update(_agent_summary(t, turns, {k: v - before.get(k, 0) for k, v in after.items()}))
    return res


def _agent_summary(t: Tally, turns: int, routed: dict[str, float]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "turns": turns,
        "later_turns": t.later_turns,
        "later_p50_s": pct(t.later_latencies, 0.5), "later_p95_s": pct(t.later_latencies, 0.95),
        "cache_hit_rate": round(t.cached / t.prompt, 3) if t.prompt else 0.0,
        "same_replica_rate": round(t.same_replica / t.later_turns, 3) if t.later_turns else 0.0,
        "replicas_seen": len(t.replicas - {""}),
    }
    if routed.get("resumable"):
        out["router_prefix_hit_rate"] = round(routed["resumed"] / routed["resumable"], 3)
        out["router"] = {k: int(v) for k, v in routed.items()}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--workload", choices=("mixed", "agent"), default="mixed")
    ap.add_argument("--turns", type=int, default=4, help="requests per agent conversation")
    ap.add_argument("--think", type=float, default=0.0,
                    help="seconds an agent waits between its turns (running its tool)")
    args = ap.parse_args(argv)
    if not args.url.startswith(("http://127.", "http://localhost", "http://[::1]")):
        ap.error("--url must be a loopback address")
    if args.clients < 1 or args.turns < 1 or args.seconds <= 0 or args.think < 0:
        ap.error("--clients and --turns must be >= 1, --seconds > 0, --think >= 0")
    res = run(args.url.rstrip("/"), args.clients, args.seconds, args.workload, args.turns,
              args.think)
    print(json.dumps(res, indent=2))
    return 1 if res["failures"] or res["server_errors"] else 0



if __name__ == "__main__":
    sys.exit(main())
