"""How many of echo's proposed ids a model keeps, from its greedy outputs alone.

Under greedy decoding a verify step keeps exactly the leading proposed ids that
match what the model writes next, so once a request's plain (fill off) output
is known, echo can be replayed over it for any setting without another
forward: `echo_walk` is that replay, for a loop that forwards every span whole.
`calibration` sets, per run bucket, the acceptance measured on the outputs
beside the one the running estimate predicted (`ffwd.fill.spans`: what
`PRIORS` are set from), `summarize` gives the figures that choose ``k``,
``candidates`` and ``max_span``.

``python -m tools.acceptance`` decodes the bench's workloads once and
replays a grid of settings over the outputs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ffwd.config import FillConfig
from ffwd.fill.echo import EchoConfig, EchoSource
from ffwd.fill.spans import RUN_BUCKETS, AcceptanceBook, run_bucket


@dataclass(frozen=True, slots=True)
class Step:
    """One forward of a walk: `proposed` ids offered (0: a plain step), `accepted` kept;
    the copy's `run` before the span, and what the running estimate `predicted` for each
    proposed position (`ffwd.fill.spans.AcceptanceBook`, as the session keeps it)."""

    proposed: int
    accepted: int
    run: int = 0
    predicted: tuple[float, ...] = ()


class _Tail:
    """The `TokenView` echo is asked with (echo reads its own history)."""

    length = 0
    budget = float("inf")

    def tail(self, n: int) -> Sequence[int]:
        return ()


def echo_walk(prompt: Sequence[int], output: Sequence[int], config: EchoConfig) -> list[Step]:
    """Replay echo over a greedy `output` as a loop that verifies every span whole.

    Each forward feeds the newest id t and echo's proposal; it keeps the
    proposed ids that match the output, and its next row gives the id after
    them for free, which becomes the next t. The output's length is the token
    budget (an output that stopped at an end id should include it).

    >>> cfg = EchoConfig(k=2, max_span=4, max_candidates=1, index_max=1024)
    >>> # After "5 6" the history goes on "7 8 9 4"; the output keeps "7 8", then
    >>> # writes 0: 8 ids in 5 forwards (the first id comes from the prefill).
    >>> for step in echo_walk([5, 6, 7, 8, 9], [4, 5, 6, 7, 8, 0, 3, 2], cfg):
    ...     print(step.proposed, step.accepted)
    0 0
    0 0
    4 2
    0 0
    0 0
    """
    source = EchoSource(config, prompt)
    book = AcceptanceBook()
    view = _Tail()
    steps: list[Step] = []
    i = 0  # output[i] is the id the next forward feeds
    if output:
        source.observe(output[:1])
    while i < len(output) - 1:
        # 1. Echo proposes what follows output[i], cut to the budget; like the
        # session, a span shorter than 2 is not worth a verify.
        proposal = source.propose(view)
        span = list(proposal.ids[: len(output) - 1 - i]) if proposal else []
        span = span if len(span) >= 2 else []
        # 2. The forward keeps the matching prefix and yields the id after it.
        kept = 0
        while kept < len(span) and span[kept] == output[i + 1 + kept]:
            kept += 1
        run = proposal.run if proposal and span else 0
        predicted = tuple(book.rates("echo", run, len(span))) if span else ()
        if span:
            book.verified("echo", len(span), kept, run)
        steps.append(Step(len(span), kept, run, predicted))
        source.observe(output[i + 1 : i + 2 + kept])
        i += kept + 1
    return steps


def position_rates(walks: Sequence[Sequence[Step]], positions: int = 32) -> list[tuple[int, int]]:
    """(tested, kept) at each span position, where position j is tested only when
    the j ids before it were kept, so kept / tested is the conditional rate.

    >>> position_rates([[Step(3, 1), Step(2, 2)]], positions=3)
    [(2, 2), (2, 1), (0, 0)]
    """
    counts = [[0, 0] for _ in range(positions)]
    for step in itertools.chain.from_iterable(walks):
        for j in range(min(step.proposed, step.accepted + 1, positions)):
            counts[j][0] += 1
            counts[j][1] += j < step.accepted
    return [(t, k) for t, k in counts]


def calibration(walks: Sequence[Sequence[Step]]) -> list[dict[str, Any]]:
    """Per run bucket (`ffwd.fill.spans.run_bucket`): the positions tested there, the
    measured rate at which they were kept, and the mean rate the estimate predicted.

    >>> calibration([[Step(2, 1, run=0, predicted=(0.5, 0.25))]])[:2]
    [{'bucket': 0, 'tested': 1, 'measured': 1.0, 'predicted': 0.5}, \
{'bucket': 1, 'tested': 1, 'measured': 0.0, 'predicted': 0.25}]
    """
    sums = [[0, 0, 0.0] for _ in range(RUN_BUCKETS)]
    for step in itertools.chain.from_iterable(walks):
        for j in range(min(step.proposed, step.accepted + 1)):
            b = sums[run_bucket(step.run + j)]
            b[0] += 1
            b[1] += j < step.accepted
            b[2] += step.predicted[j]
    return [{"bucket": i, "tested": int(t), "measured": round(k / t, 3) if t else None,
             "predicted": round(p / t, 3) if t else None}
            for i, (t, k, p) in enumerate(sums)]


def summarize(walks: Sequence[Sequence[Step]], outputs: int) -> dict[str, float]:
    """Proposals, proposed and kept ids per 100 output ids, and the decode forwards
    per output id of the whole-span loop (about 1.0: no gain; 0.5: half the forwards)."""
    steps = list(itertools.chain.from_iterable(walks))
    proposed = sum(s.proposed for s in steps)
    kept = sum(s.accepted for s in steps)
    per = 100.0 / max(outputs, 1)
    return {
        "proposals_per_100": round(sum(s.proposed > 0 for s in steps) * per, 2),
        "proposed_per_100": round(proposed * per, 2),
        "kept_per_100": round(kept * per, 2),
        "kept_of_proposed": round(kept / proposed, 3) if proposed else 0.0,
        "forwards_per_id": round(len(steps) / max(outputs, 1), 3),
    }


def _ints(raw: str) -> list[int]:
    return [int(x) for x in raw.split(",") if x.strip()]


def _outputs(args: argparse.Namespace) -> list[tuple[str, list[int], list[int]]]:
    """(workload, prompt ids, greedy output ids) of every selected bench item."""
    from ffwd.bench.systems.ffwd_http import chat_request
    from ffwd.bench.workloads import WORKLOADS, select
    from ffwd.config import resolve_engine_config, resolve_fill_config
    from ffwd.engine.core.generate import generate
    from ffwd.engine.sample.sampling import SamplingParams
    from ffwd.serve.service import load_service

    workloads = WORKLOADS if args.workload == "all" else (args.workload,)
    chosen = {"dtype": args.dtype} | ({"backend": args.backend} if args.backend else {})
    engine = resolve_engine_config(overrides=chosen)
    service = load_service(args.model, engine, resolve_fill_config(overrides={"fill": "off"}),
                           prompt_cache_bytes=0)
    out = []
    for item in select(workloads, args.limit, args.seed):
        prompt = service.prepare(chat_request(item, "off")).prompt_ids
        result = generate(service.backend, service.tokenizer, prompt, SamplingParams(),
                          max_tokens=item.max_tokens)
        # The end id is part of what the model wrote (a verify span can run into it).
        end = [service.tokenizer.eos_token_id] if result.finish_reason == "stop" else []
        out.append((item.workload, list(prompt), result.token_ids + end))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.acceptance", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", default="all", help="tools, echo, prose or all")
    p.add_argument("--limit", type=int, default=3, help="items per workload")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--model", default="default")
    p.add_argument("--backend", default=None, help="FFWD_BACKEND's choices (default: auto)")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--k", type=_ints, default=[3, 4, 6, 8], help="anchor lengths to try")
    p.add_argument("--candidates", type=_ints, default=[1, 8, 24])
    p.add_argument("--max-span", type=_ints, default=[16, 32, 64])
    p.add_argument("--json", action="store_true", help="print the table as JSON")
    args = p.parse_args(argv)
    runs = _outputs(args)
    table: list[dict[str, Any]] = []
    for k, cand, span in itertools.product(args.k, args.candidates, args.max_span):
        cfg = EchoConfig(k=k, max_span=span, max_candidates=cand,
                         index_max=FillConfig().index_max)
        # One walk per output; the pooled row reuses them.
        walked = [(w, echo_walk(pr, o, cfg), len(o)) for w, pr, o in runs]
        for workload in [*sorted({w for w, _, _ in runs}), "pooled"]:
            mine = [(walk, n) for w, walk, n in walked if workload in (w, "pooled")]
            walks = [walk for walk, _ in mine]
            by_run = [(c["measured"], c["predicted"]) for c in calibration(walks)]
            table.append({"workload": workload, "k": k, "candidates": cand, "max_span": span,
                          **summarize(walks, sum(n for _, n in mine)), "by_run": by_run})
    if args.json:
        json.dump(table, sys.stdout, indent=1)
        return 0
    keys = [c for c in table[0] if c != "by_run"] if table else []
    print(" | ".join([*keys, "(measured, predicted) by run 0, 1, 2-3, 4-7, ... 64+"]))
    for row in table:
        print(" | ".join([*(str(row[c]) for c in keys), str(row["by_run"])]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
