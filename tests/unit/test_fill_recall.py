"""The cross-request index: the worked example, the branch rule, tenants kept apart, the
byte bound (least recently used output first), and what an indexed id really costs."""

from __future__ import annotations

import doctest
import random
import tracemalloc
from collections.abc import Sequence

from ffwd.fill import recall
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
