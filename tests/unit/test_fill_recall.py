"""The cross-request index: the worked example, the branch rule, tenants kept apart, the
byte bound (least recently used output first), and what an indexed id really costs."""

from __future__ import annotations

import doctest
import random
import tracemalloc
from collections.abc import Sequence

from ffwd.fill import recall
from ffwd.fill.echo import RUN_CAP
from ffwd.fill.recall import BYTES_PER_ID, RecallConfig, RecallIndex


class View:
    def __init__(self, ids: Sequence[int]) -> None:
        self.ids = list(ids)

    length = 0
    budget = float("inf")

    def tail(self, n: int) -> Sequence[int]:
        return self.ids[-n:]


def index(max_bytes: int = 1 << 20, **kw: int) -> RecallIndex:
    cfg = {"k": 2, "max_span": 16, "max_candidates": 8, "max_bytes": max_bytes, **kw}
    return RecallIndex(RecallConfig(**cfg))


def test_docstring_examples_hold() -> None:
    assert doctest.testmod(recall).failed == 0


def test_worked_example_from_the_docstring() -> None:
    idx = index()
    idx.add("", [7, 1, 2, 3, 4, 5])
    p = idx.source("").propose(View([8, 9, 1, 2]))
    assert p is not None and (p.ids, p.policy, p.origin, p.run) == ((3, 4, 5), "verify",
                                                                     "recall", 2)


def test_outputs_that_fork_stop_the_copy() -> None:
    idx = index()
    idx.add("", [1, 2, 3, 4, 9])
    idx.add("", [1, 2, 3, 5, 9])
    p = idx.source("").propose(View([1, 2]))
    assert p is not None and p.ids == (3,) and p.branch_stop
    assert idx.source("").propose(View([6, 6])) is None  # nothing ever followed "6 6"


def test_one_tenant_never_sees_another_s_outputs() -> None:
    idx = index()
    idx.add("alice", [1, 2, 3, 4, 5])
    assert idx.source("bob").propose(View([1, 2])) is None
    assert idx.source("alice").propose(View([1, 2])) is not None


def test_the_index_stays_within_its_bytes_dropping_the_least_recently_used() -> None:
    idx = index(max_bytes=20 * BYTES_PER_ID)
    idx.add("", [1, 2, 3, 4, 5, 6, 7, 8])  # 8 ids
    idx.add("", [11, 12, 13, 14, 15, 16, 17, 18])
    assert idx.source("").propose(View([1, 2])) is not None  # uses the first: now recent
    idx.add("", [21, 22, 23, 24, 25, 26, 27, 28])  # 24 ids > 20: the second goes
    assert idx.nbytes <= 20 * BYTES_PER_ID and len(idx) == 2
    assert idx.source("").propose(View([11, 12])) is None
    assert idx.source("").propose(View([1, 2])) is not None
    idx.add("", list(range(100, 200)))  # larger than the whole budget: not kept
    assert len(idx) == 2


def test_an_indexed_id_costs_no_more_than_the_budget_counts() -> None:
    rng = random.Random(0)
    tracemalloc.start()
    try:
        idx = index(max_bytes=1 << 40, k=3)
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(40):
            idx.add("", [rng.randrange(49152) if rng.random() < 0.5 else rng.randrange(500)
                         for _ in range(500)])
        used = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert used / 20000 <= BYTES_PER_ID


def test_a_repeated_request_copies_from_its_first_output_id_with_the_prompt_as_run() -> None:
    prompt, output = list(range(100, 400)), [7, 8, 9, 10, 11, 12]
    idx = index(max_span=64, k=3)
    idx.add("", prompt + output)  # the earlier request: prompt, then output
    p = idx.source("").propose(View(prompt + [7]))  # the same prompt, its first id sampled
    # The whole prompt matches: a run far past a quote's (counted up to RUN_CAP).
    assert p is not None and p.ids == (8, 9, 10, 11, 12) and p.run == RUN_CAP


def test_a_request_that_starts_with_an_earlier_one_replaces_it() -> None:
    idx = index()
    idx.add("", [1, 2, 3, 4])
    idx.add("", [1, 2, 3, 4])  # the same request again
    assert len(idx) == 1 and idx.nbytes == 4 * BYTES_PER_ID
    idx.add("", [1, 2, 3, 4, 5, 6])  # the next turn of the conversation
    assert len(idx) == 1 and idx.nbytes == 6 * BYTES_PER_ID
    idx.add("other", [1, 2, 3, 4, 5, 6, 7])  # another tenant's is its own
    idx.add("", [1, 2, 9])  # forks: both kept
    assert len(idx) == 3
    p = idx.source("").propose(View([3, 4]))
    assert p is not None and p.ids == (5, 6)  # the replaced document left no stale entry


def test_a_long_match_is_not_vetoed_by_a_short_one_that_forks() -> None:
    # Two earlier requests share the template's "5 6" before their outputs (20 vs 30).
    long_ctx = list(range(100, 140))
    idx = index(k=2)
    idx.add("", long_ctx + [5, 6, 20, 21, 22])
    idx.add("", [77, 5, 6, 30, 31, 32])  # nearer, but matches only "5 6"
    p = idx.source("").propose(View(long_ctx + [5, 6]))
    assert p is not None and p.ids == (20, 21, 22) and not p.branch_stop
    assert p.run == len(long_ctx) + 2
    # With no strong match the rule is as before: where they fork, the copy stops.
    q = idx.source("").propose(View([1, 5, 6]))
    assert q is None or q.branch_stop
