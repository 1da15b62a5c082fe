"""The prefill rows: time to first token per prompt and system, side by side.

``summarize(runs)`` reads the run records of the ``prefill`` workload
(`ffwd.bench.workloads.prefill`) into ``{prompt: {system: metrics}}``: the
prompt's ids, the median time to the first output id at the client over the
repeats, prompt ids per second of it, and (where the server says) how many
prompt ids it took from its cache; for an agent turn (``agent:N``: a long
output after the prompt) the median time of the whole request too.
``markdown`` renders them with each ffwd system's time as a ratio to each
llama-server's (the whole request's time for an agent turn).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ffwd.bench.systems.names import LLAMA_SERVER, SERVED, parse_system

WORKLOAD = "prefill"


def summarize(
    runs: Iterable[Mapping[str, Any]], order: Sequence[str] = ()
) -> dict[str, dict[str, dict[str, Any]]]:
    """``{prompt: {system: metrics}}`` of the prefill runs, prompts in run order, systems
    in `order` (then as they first appear)."""
    rank = {name: i for i, name in enumerate(order)}
    groups: dict[str, dict[str, list[Mapping[str, Any]]]] = {}
    for r in runs:
        if r["workload"] == WORKLOAD:
            groups.setdefault(r["item"], {}).setdefault(r["system"], []).append(r)
    return {item: {name: _metrics(systems[name])
                   for name in sorted(systems, key=lambda n: rank.get(n, len(rank)))}
            for item, systems in groups.items()}


def _metrics(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    first = float(statistics.median(r["first_token_seconds"] for r in rows))
    ids = int(rows[0]["prompt_tokens"])
    cached = [r["cached"] for r in rows if r.get("cached") is not None]
    whole = str(rows[0]["item"]).startswith("agent:")
    return {"warm": rows[0].get("kind") == "turn", "prompt_tokens": ids, "repeats": len(rows),
            "first_token_seconds": first, "ids_per_s": ids / first if first > 0 else None,
            "cached": int(statistics.median(cached)) if cached else None,
            "seconds": float(statistics.median(r["seconds"] for r in rows)) if whole else None,
            "tokens": int(statistics.median(r["tokens"] for r in rows)) if whole else None}


def default_ffwd(names: Iterable[str]) -> str | None:
    """The ffwd system in its default setup (no variant) among `names`, else the first."""
    served = [n for n in names if parse_system(n).base in SERVED]
    return next((n for n in served if ":" not in n), served[0] if served else None)


def ratio(rows: Mapping[str, Mapping[str, Any]], a: str, b: str) -> float | None:
    """`a`'s time to first token (an agent turn: its whole time) over `b`'s on one prompt
    (None: either did not run)."""
    if a not in rows or b not in rows:
        return None
    key = "seconds" if rows[b].get("seconds") is not None else "first_token_seconds"
    if not rows[b][key] or rows[a].get(key) is None:
        return None
    return float(rows[a][key] / rows[b][key])


def _cell(m: Mapping[str, Any] | None) -> str:
    if m is None:
        return "—"
    s = f"{m['first_token_seconds']:.2f} s"
    if m.get("seconds") is not None:
        return f"{m['seconds']:.2f} s whole, {m['tokens']} ids ({s} to the first)"
    if m["warm"]:
        return s if m["cached"] is None else f"{s} ({m['prompt_tokens'] - m['cached']:,} new)"
    return s if m["ids_per_s"] is None else f"{s} ({m['ids_per_s']:,.0f}/s)"


def markdown(summary: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> list[str]:
    """The prefill table (empty where the workload did not run)."""
    if not summary:
        return []
    names = list(dict.fromkeys(n for rows in summary.values() for n in rows))
    servers = [n for n in names if parse_system(n).base == LLAMA_SERVER]
    pairs = [(n, s) for s in servers for n in names if parse_system(n).base in SERVED]
    lines = ["| prompt | ids | " + " | ".join(names) + "".join(
                 f" | {n} / {s}" for n, s in pairs) + " |",
             "|---|---:|" + "---:|" * (len(names) + len(pairs))]
    for item, rows in summary.items():
        ids = next(iter(rows.values()))["prompt_tokens"]
        ratios = [ratio(rows, n, s) for n, s in pairs]
        lines.append(f"| {item.replace(':', ' ')} | {ids:,} | "
                     + " | ".join(_cell(rows.get(n)) for n in names)
                     + "".join(" | —" if v is None else f" | {v:.2f}x" for v in ratios) + " |")
    return lines


EXPLAIN = ("Seconds from sending the request to the first output id at the client, median "
           "over repeats. `cold`: nothing cached (in brackets, prompt ids per second); "
           "`turn`: a conversation growing turn by turn, each turn keeping what the last one "
           "cached (in brackets, the prompt ids the server computed; the rest came from its "
           "cache); `agent`: such a turn asking for a rewrite, timed to its last output id "
           "too. The ratio columns divide an ffwd system's time by each llama-server's "
           "(the whole turn's for `agent`; below 1: ffwd is faster).")
