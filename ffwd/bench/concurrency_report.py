"""The concurrency row's figures (`ffwd.bench.concurrency`): tables and issue 33's targets.

`summarize(row)` reads the row's rounds into, per ``--parallel`` and system:
the short requests' median latency alone, beside a long generation and in the
mix (with the ratio to alone), and per client count the aggregate output ids
per second (median over repeats of each round's ids over its wall time), the
median and 95th-percentile latency of a request (all repeats pooled) and
the echo rounds' aggregate. `markdown` renders them; `targets` checks the
issue's goals.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from ffwd.bench.systems.names import LLAMA_SERVER

FFWD = "ffwd-echo"  # the server's default fill mode
OFF = "ffwd-off"
SHORT_GOAL = 2.0  # a short request beside a long generation, at most, x its time alone
ONE_CLIENT_GOAL = 0.98  # one client at --parallel N, at least, x one sequence (--parallel 1)
ECHO_GOAL = 1.3  # ffwd-echo vs ffwd-off at P clients on the echo workload, at least


def percentile(xs: Sequence[float], q: float) -> float | None:
    """The `q` quantile of `xs` (nearest rank), None when empty.

    >>> percentile([4.0, 1.0, 3.0, 2.0], 0.5), percentile([4.0, 1.0, 3.0, 2.0], 0.95)
    (2.0, 4.0)
    """
    if not xs:
        return None
    s = sorted(xs)
    return s[max(0, min(len(s) - 1, -(-round(q * 100) * len(s) // 100) - 1))]


def _rate(rounds: Sequence[Mapping[str, Any]]) -> float | None:
    rates = [r["ids"] / r["wall"] for r in rounds if r["wall"] > 0]
    return round(float(statistics.median(rates)), 2) if rates else None


def _clients(rounds: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    latency = [x for r in rounds for x in r["latency"]]
    short = [x for r in rounds for x in r["short"]]
    return {"tokens_per_s": _rate(rounds), "p50": percentile(latency, 0.5),
            "p95": percentile(latency, 0.95), "short_p50": percentile(short, 0.5)}


def summarize(row: Mapping[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{parallel: {system: figures}}`` (see the module docstring)."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for parallel, systems in row["parallel"].items():
        out[parallel] = {}
        for name, r in systems.items():
            alone, beside = percentile(r["alone"], 0.5), percentile(r["beside"], 0.5)
            out[parallel][name] = {
                "short_alone": alone, "short_beside": beside,
                "beside_vs_alone": round(beside / alone, 3) if alone and beside else None,
                "clients": {c: _clients(rounds) for c, rounds in r["mix"].items()},
                "echo": {c: _rate(rounds) for c, rounds in r["echo"].items()},
            }
    return out


def _s(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def markdown(row: Mapping[str, Any]) -> list[str]:
    """The row's tables, one per ``--parallel``."""
    sizes = row["sizes"]
    lines = [f"Each round: {len(row['clients'])} client counts over the same mix of short "
             f"requests (at most {sizes['short']} ids out) and long ones ({sizes['long']} "
             "ids); aggregate = output ids / the round's wall time (median over repeats); "
             "latency over every request of the rounds; short = the short requests alone, "
             f"beside one generation of {sizes['beside']} ids, and in the mix. "
             f"Load average before and after each --parallel: {row['load']}.", ""]
    for parallel, systems in summarize(row).items():
        lines += [f"`--parallel {parallel}` (llama-server `-np {parallel}`):", "",
                  "| system | clients | aggregate tok/s | p50 s | p95 s | short p50 s in mix |",
                  "|---|---:|---:|---:|---:|---:|"]
        for name, fig in systems.items():
            for c, f in fig["clients"].items():
                lines.append(f"| {name} | {c} | {_s(f['tokens_per_s'])} | {_s(f['p50'])} | "
                             f"{_s(f['p95'])} | {_s(f['short_p50'])} |")
        lines += ["", "| system | short alone s | short beside long s | ratio | echo tok/s "
                  "by clients |", "|---|---:|---:|---:|---|"]
        for name, fig in systems.items():
            echo = ", ".join(f"{c}: {_s(v)}" for c, v in fig["echo"].items()) or "—"
            lines.append(f"| {name} | {_s(fig['short_alone'])} | {_s(fig['short_beside'])} | "
                         f"{_s(fig['beside_vs_alone'])} | {echo} |")
        lines.append("")
    return lines


def _target(name: str, value: float | None, goal: str, met: bool | None) -> dict[str, Any]:
    return {"target": name, "value": value, "goal": goal, "met": met}


def targets(row: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Issue 33's targets on the row (None: what they need did not run)."""
    if not row:
        return []
    figures = summarize(row)
    widest = max(figures, key=int)
    at = figures[widest]
    peer = f"{LLAMA_SERVER}:fa-off" if row["ffwd_path"].endswith("-noflash") else LLAMA_SERVER
    ours = at.get(FFWD) or at.get(OFF) or {}
    theirs = at.get(peer, {})
    c = str(min(4, int(widest)))
    mine, other = ours.get("clients", {}).get(c, {}), theirs.get("clients", {}).get(c, {})
    out = []
    for key, goal, better in (("tokens_per_s", ">=", True), ("p50", "<=", False)):
        a, b = mine.get(key), other.get(key)
        v = round(a / b, 3) if a and b else None
        out.append(_target(f"concurrency: {c} clients, ffwd {key} vs {peer} -np {widest}", v,
                           f"{goal} 1.0x", None if v is None else (v >= 1 if better else v <= 1)))
    v = ours.get("beside_vs_alone")
    out.append(_target("concurrency: a short request beside a long generation vs alone", v,
                       f"<= {SHORT_GOAL}x", None if v is None else v <= SHORT_GOAL))
    one = figures.get("1", {}).get(FFWD) or figures.get("1", {}).get(OFF) or {}
    a = ours.get("clients", {}).get("1", {}).get("tokens_per_s")
    b = one.get("clients", {}).get("1", {}).get("tokens_per_s")
    v = round(a / b, 3) if a and b and widest != "1" else None
    out.append(_target(f"concurrency: 1 client at --parallel {widest} vs --parallel 1", v,
                       f">= {ONE_CLIENT_GOAL}x", None if v is None else v >= ONE_CLIENT_GOAL))
    a, b = at.get(FFWD, {}).get("echo", {}).get(widest), at.get(OFF, {}).get("echo", {}).get(
        widest)
    v = round(a / b, 3) if a and b else None
    out.append(_target(f"concurrency: echo at {widest} clients, ffwd-echo vs ffwd-off", v,
                       f">= {ECHO_GOAL}x", None if v is None else v >= ECHO_GOAL))
    return out
