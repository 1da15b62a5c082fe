"""Span lengths in ``ffwd bench``'s report: what each copy source proposed and kept.

Every ffwd run records its verify proposals (`FillStats.verify_spans`, read back as
``(origin, proposed, forwarded, kept)`` rows). `histogram` buckets them per system and
source by powers of two; `first_spans` lists the first injected span of each repeated
request (the repeat workload's ``*.2`` kinds), the span a request seen before should
start with; `markdown` renders both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)  # a bucket holds lengths from its bound to the next


def bucket(n: int) -> int:
    """The bucket of a span of `n` ids: the largest bound of `BUCKETS` not over it.

    >>> [bucket(n) for n in (1, 3, 4, 63, 64, 500)]
    [1, 2, 4, 32, 64, 128]
    """
    return max(b for b in BUCKETS if b <= max(n, 1))


def label(b: int) -> str:
    """A bucket's range as text.

    >>> label(1), label(4), label(128)
    ('1', '4-7', '128+')
    """
    nxt = [x for x in BUCKETS if x > b]
    if not nxt:
        return f"{b}+"
    return str(b) if nxt[0] == b + 1 else f"{b}-{nxt[0] - 1}"


def histogram(runs: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, list[int]]]]:
    """``{system: {origin: {"proposed": counts, "kept": counts}}}``, counts per `BUCKETS`
    entry; a kept count is over the proposals that kept at least one id.

    >>> rows = [{"system": "ffwd-echo", "spans": [["recall", 40, 40, 40], ["echo", 3, 3, 0]]}]
    >>> histogram(rows)["ffwd-echo"]["recall"]
    {'proposed': [0, 0, 0, 0, 0, 1, 0, 0], 'kept': [0, 0, 0, 0, 0, 1, 0, 0]}
    """
    out: dict[str, dict[str, dict[str, list[int]]]] = {}
    for r in runs:
        for origin, proposed, _forwarded, kept in r.get("spans") or ():
            h = out.setdefault(r["system"], {}).setdefault(
                origin, {"proposed": [0] * len(BUCKETS), "kept": [0] * len(BUCKETS)})
            h["proposed"][BUCKETS.index(bucket(proposed))] += 1
            if kept:
                h["kept"][BUCKETS.index(bucket(kept))] += 1
    return out


def first_spans(runs: Iterable[Mapping[str, Any]]) -> dict[str, list[int]]:
    """Each system's first injected span (ids, 0: none) of every repeated request, in
    run order."""
    out: dict[str, list[int]] = {}
    for r in runs:
        if r["workload"] == "repeat" and str(r.get("kind", "")).endswith(".2") \
                and r.get("spans") is not None:
            out.setdefault(r["system"], []).append(int(r.get("first_span") or 0))
    return out


def markdown(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """The report's span section (empty where no ffwd system copied anything)."""
    hist = histogram(runs)
    if not hist:
        return []
    lines = ["Verify proposals per copy source, by length (ids): proposed, and kept where "
             "at least one id was kept.", "",
             "| system | source | | " + " | ".join(label(b) for b in BUCKETS) + " |",
             "|---|---|---|" + "---:|" * len(BUCKETS)]
    for system, origins in sorted(hist.items()):
        for origin, h in sorted(origins.items()):
            for kind in ("proposed", "kept"):
                lines.append(f"| {system} | {origin} | {kind} | "
                             + " | ".join(str(c) for c in h[kind]) + " |")
    firsts = first_spans(runs)
    if firsts:
        lines += ["", "First injected span of each repeated request (ids): "
                  + "; ".join(f"{s}: {', '.join(map(str, v))}" for s, v in sorted(firsts.items()))]
    return lines
