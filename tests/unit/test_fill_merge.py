"""One proposal per step: a determined head extended by the best-evidenced copy, per-id
sources in the stats, and the backoff of a copy source whose verifies keep failing."""

from __future__ import annotations

import doctest
from collections.abc import Sequence

import pytest

from ffwd.fill import FillPlan, FillRow, FillSession, Proposal, TokenView, merge
from ffwd.fill.merge import Backoff, expected_kept, extend, pick

EOS = 99


class Source:
    """A caller source that always proposes the same ids, with a given run."""

    def __init__(self, ids: Sequence[int], origin: str = "echo", run: int = 0,
                 policy: str = "verify") -> None:
        self.ids, self.origin, self.run, self.policy = tuple(ids), origin, run, policy
        self.name, self.window_needed = origin, 1

    def propose(self, view: TokenView) -> Proposal | None:
        return Proposal(self.ids, self.policy, self.origin, run=self.run)  # type: ignore[arg-type]


def session(*sources: Source, rows: Sequence[FillRow] = (), **kw: object) -> FillSession:
    plan = FillPlan(rows=tuple(rows), eos=(EOS,),
                    delimiters=kw.pop("delimiters", frozenset()))  # type: ignore[arg-type]
    return FillSession(plan, [0], sources=sources, **kw)  # type: ignore[arg-type]


def test_docstring_examples_hold() -> None:
    assert doctest.testmod(merge).failed == 0


def test_the_worked_example_of_the_module_docstring() -> None:
    head = (5, 6)
    echo, recall = extend(head, (5, 6, 7, 8)), extend(head, (5, 6, 7, 8, 9, 1, 2))
    assert (echo, recall) == ((7, 8), (7, 8, 9, 1, 2))
    assert expected_kept([0.5] * 2) == 0.75
    assert expected_kept([0.9] * 5) == pytest.approx(3.68559)
    assert pick([[0.5] * 2, [0.9] * 5]) == 1


def test_extend_and_pick_on_small_arrays() -> None:
    assert extend((), (1, 2)) == (1, 2)
    assert extend((1, 2), (1, 2)) is None  # adds nothing
    assert extend((1, 2), (1,)) is None  # shorter than the head
    assert extend((1, 2), (2, 1, 3)) is None  # contradicts it
    # A short sure copy against a long doubtful one: expected kept ids decide.
    assert pick([[1.0, 1.0], [0.3] * 30]) == 0
    assert pick([[0.5, 0.5], [0.99] * 20]) == 1
    assert pick([[0.9, 0.9], [0.9, 0.9]]) == 0  # ties: the earlier source


def test_backoff_resets_on_a_good_verify_and_doubles_up_to_the_longest() -> None:
    b = Backoff(streak=3, low=0.25, pause=4, longest=10)
    assert [b.verified(8, 1, now=i) for i in range(2)] == [False, False]
    assert not b.verified(8, 2, now=2)  # 2 of 8 is a quarter: not a miss, the streak resets
    assert [b.verified(8, 0, now=i) for i in range(3, 6)] == [False, False, True]
    assert b.paused(6) and b.paused(9) and not b.paused(10)  # the next 4 sampled ids
    trips = [b.verified(8, 0, now=t) for t in range(10, 19)]
    assert trips == [False, False, True] * 3
    assert b._until == 18 + 10  # 4, 8, then capped at 10
    assert not b.verified(0, 0, now=30)  # nothing tested: no verdict


def test_a_copy_extends_the_determined_head_in_one_span() -> None:
    # The row writes "1 2" after 6; echo, asked at the same point, knows "1 2 3 4".
    s = session(Source([1, 2, 3, 4]), rows=[FillRow((6,), (1, 2), "scaffold")])
    p = s.push(6)
    assert p is not None and (p.ids, p.policy, p.asserted, p.lead) == (
        (1, 2, 3, 4), "verify", 2, "template")
    assert [p.origin_at(j) for j in range(4)] == ["template", "template", "echo", "echo"]
    assert s.acceptance(p)[:2] == [1.0, 1.0]
    s.commit(p, 3)  # the head and one copied id kept, the last copied id rejected
    st = s.stats
    assert (st.injected, st.strict, st.echo, st.merged) == (3, 2, 1, 1)
    assert (st.verify_accepted, st.verify_rejected, st.span_lens) == (1, 1, [3])


def test_a_copy_that_contradicts_the_head_is_dropped() -> None:
    s = session(Source([1, 9, 3, 4]), rows=[FillRow((6,), (1, 2), "scaffold")])
    p = s.push(6)
    assert p is not None and (p.ids, p.policy, p.origin) == ((1, 2), "assert", "template")


def test_delimiters_in_the_head_do_not_cut_the_copy_only_past_it() -> None:
    rows = [FillRow((6,), (1, 50), "scaffold")]
    s = session(Source([1, 50, 2, 3, 50, 4]), rows=rows, delimiters=frozenset({50}))
    p = s.push(6)
    assert p is not None and p.ids == (1, 50, 2, 3, 50) and p.asserted == 2


def test_the_span_cap_counts_the_head() -> None:
    s = session(Source(list(range(1, 20))), rows=[FillRow((6,), (1, 2, 3), "scaffold")],
                max_span=5)
    p = s.push(6)
    assert p is not None and p.ids == (1, 2, 3, 4, 5) and p.asserted == 3
    assert s.stats.index_truncated == 1


def test_the_longest_well_evidenced_copy_wins_whatever_the_source_order() -> None:
    fresh = Source([1, 2, 3, 4, 5, 6], origin="echo", run=2)  # a fresh match, asked first
    known = Source([1, 2, 3, 7, 8, 9, 10, 11], origin="recall", run=80)  # matched far back
    p = session(fresh, known).push(0)
    assert p is not None and p.origin == "recall" and p.run == 80
    # At equal evidence the earlier source wins.
    p = session(Source([1, 2], run=80), Source([1, 3], run=80)).push(0)
    assert p is not None and p.ids == (1, 2)


def test_a_copy_source_that_keeps_failing_backs_off_and_the_stats_say_so() -> None:
    s = session(Source([1, 2, 3, 4]))
    for _ in range(5):  # five verifies in a row that keep nothing
        p = s.push(0)
        assert p is not None
        s.commit(p, 0)
    assert s.stats.backoffs == 1
    skipped = 0
    while s.push(0) is None:
        skipped += 1
    assert skipped == 16 and s.stats.backed_off == 16  # the first pause: 16 sampled ids
