"""Micro-benchmark: the cost of `FillSession.push` + `commit` per token.

    python -m tools.fill_overhead [--history 100000] [--steps 20000] [--json]

Builds a synthetic session whose prompt is a long token history with the kind
of repetition agents produce (re-quoted stretches), strict rows and echo on,
then times a decode-like stream of pushes: every proposal is committed (assert
spans whole, verify spans up to a pseudo-random prefix). Reports microseconds
per push+commit and per token that entered the history.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Sequence

from ffwd.config import FillConfig
from ffwd.fill import FILL_KINDS, FillPlan, FillRow, FillSession

VOCAB = 49152


def synthetic_history(n: int, rng: random.Random) -> list[int]:
    """Random ids with ~40% of the stream copied from earlier stretches."""
    out: list[int] = []
    while len(out) < n:
        if out and rng.random() < 0.4:
            start = rng.randrange(len(out))
            out.extend(out[start : start + rng.randint(8, 64)])
        else:
            out.extend(rng.randrange(VOCAB) for _ in range(rng.randint(8, 64)))
    return out[:n]


def synthetic_rows(rng: random.Random, n: int = 200) -> tuple[FillRow, ...]:
    kinds = FILL_KINDS
    return tuple(
        FillRow(
            tuple(rng.randrange(VOCAB) for _ in range(rng.randint(1, 4))),
            tuple(rng.randrange(VOCAB) for _ in range(rng.randint(2, 12))),
            kinds[i % len(kinds)],
        )
        for i in range(n)
    )


def run(history: int, steps: int, seed: int = 0) -> dict[str, float]:
    rng = random.Random(seed)
    hist = synthetic_history(history + steps, rng)
    prompt, stream = hist[:history], hist[history:]
    fill = FillConfig(mode="echo")  # the served defaults
    plan = FillPlan(
        rows=synthetic_rows(rng), echo=fill.echo_config(), delimiters=frozenset({34}), eos=(2,)
    )
    session = FillSession(plan, prompt, max_span=fill.max_span)
    accepts = [rng.randint(0, 32) for _ in range(steps)]
    pushes = entered = proposals = 0
    t0 = time.perf_counter()
    for tok, accept in zip(stream, accepts, strict=True):
        p = session.push(tok)
        pushes += 1
        entered += 1
        if p is not None:
            proposals += 1
            n = len(p.ids) if p.policy == "assert" else min(accept, len(p.ids))
            session.commit(p, n)
            entered += n
    elapsed = time.perf_counter() - t0
    return {
        "history": history,
        "pushes": pushes,
        "proposals": proposals,
        "tokens_entered": entered,
        "us_per_push": 1e6 * elapsed / pushes,
        "us_per_token": 1e6 * elapsed / entered,
        "injected": session.stats.injected,
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--history", type=int, default=100_000)
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    res = run(args.history, args.steps, args.seed)
    if args.json:
        print(json.dumps(res))
    else:
        print(
            f"history {res['history']} ids, {res['pushes']} pushes, {res['proposals']} proposals, "
            f"{res['injected']} injected: {res['us_per_push']:.2f} us per push+commit, "
            f"{res['us_per_token']:.2f} us per token"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
