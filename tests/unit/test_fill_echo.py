"""EchoSource: matches, forks, delimiters, bounds, and what it is allowed to propose."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from ffwd.fill import EchoSource, FillPlan, FillRow, FillSession
from tests.unit.served import echo_config

EOS = 99


class View:
    length = 0
    budget = float("inf")

    def tail(self, n: int) -> Sequence[int]:
        return []


def echo(history: Sequence[int], **cfg: int) -> EchoSource:
    cfg.setdefault("k", 2)
    return EchoSource(echo_config(**cfg), history)


def test_worked_example_from_docstring() -> None:
    src = echo([1, 2, 3, 4, 1, 2, 3, 5, 1, 2])
    p = src.propose(View())
    assert p is not None and p.ids == (3,) and p.branch_stop and p.policy == "verify"


def test_copies_the_continuation_of_an_earlier_occurrence() -> None:
    src = echo([10, 11, 12, 13, 14, 15, 0, 10, 11])
    p = src.propose(View())
    assert p is not None
    # It walks to the present: 12 13 14 15 0 10 11 (then runs out of history).
    assert p.ids == (12, 13, 14, 15, 0, 10, 11)
    assert p.origin == "echo" and not p.branch_stop


def test_no_match_no_proposal() -> None:
    assert echo([1, 2, 3, 4]).propose(View()) is None
    assert echo([1]).propose(View()) is None
    assert echo([]).propose(View()) is None


def test_walk_stops_at_max_span() -> None:
    hist = list(range(50)) + [0, 1]
    p = echo(hist, max_span=5).propose(View())
    assert p is not None and p.ids == (2, 3, 4, 5, 6)


def test_candidates_that_agree_keep_walking() -> None:
    # Both earlier occurrences of "1 2" continue with 3 4 5.
    p = echo([1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 0, 1, 2]).propose(View())
    assert p is not None and p.ids[:4] == (3, 4, 5, 0)


def test_fork_stops_the_span_and_marks_branch_stop() -> None:
    p = echo([1, 2, 3, 4, 7, 0, 1, 2, 3, 4, 8, 0, 1, 2]).propose(View())
    assert p is not None and p.ids == (3, 4) and p.branch_stop


def test_delimiter_ends_the_walk_inclusive() -> None:
    src = EchoSource(echo_config(k=2), [1, 2, 3, 50, 4, 5, 1, 2], delimiters={50})
    p = src.propose(View())
    assert p is not None and p.ids == (3, 50)


def test_only_the_nearest_candidates_are_walked() -> None:
    # "1 2" occurred three times before the present: followed by 7, then 9, then 9.
    hist = [1, 2, 7, 1, 2, 9, 1, 2, 9, 1, 2]
    p = echo(hist, max_candidates=2, max_span=12).propose(View())  # the nearest two agree
    # ... up to the present; past it the nearest goes on alone, as the history repeats
    # "9 1 2" (a loop of period 3) at least once: see the next test.
    assert p is not None and p.ids == (9, 1, 2) * 4 and not p.branch_stop
    assert echo(hist, max_candidates=3).propose(View()) is None  # the oldest forks at once


def test_a_loop_is_copied_past_the_present() -> None:
    # The history repeats "5 6 7" twice before the present: the copy of the nearest
    # occurrence runs into the present and goes on as the span itself does.
    p = echo([9, 5, 6, 7, 5, 6, 7, 5, 6], max_candidates=1, max_span=8).propose(View())
    assert p is not None and p.ids == (7, 5, 6, 7, 5, 6, 7, 5) and not p.branch_stop
    # An occurrence whose context does not repeat a whole period stops at the present:
    # "5 6" seen once, 4 ids back, is no evidence of a loop.
    q = echo([9, 5, 6, 7, 8, 5, 6], max_candidates=1, max_span=8).propose(View())
    assert q is not None and q.ids == (7, 8, 5, 6)


def test_one_candidate_still_copies() -> None:
    p = echo([10, 11, 12, 13, 0, 10, 11], max_candidates=1).propose(View())
    assert p is not None and p.ids[:2] == (12, 13)


def test_observe_indexes_new_ids() -> None:
    src = echo([1, 2, 3, 4, 5])
    assert src.propose(View()) is None
    src.observe([0, 1, 2])
    p = src.propose(View())
    assert p is not None and p.ids[:3] == (3, 4, 5)


def test_index_max_forgets_oldest() -> None:
    k = 2
    src = echo([5, 6, 7, 8], k=k, index_max=1024)
    filler = [1000 + i for i in range(3000)]
    src.observe(filler)
    src.observe([5, 6])
    # "5 6" lies beyond the last index_max ids: forgotten.
    assert src.propose(View()) is None
    assert src.length == 3006
    # Memory stays bounded: the list and the index never hold much more than index_max.
    assert len(src._hist) <= 1024 + 1024
    assert sum(len(b) for b in src._index.values()) <= 1024 + 1024
    # Recent material is still found.
    src.observe([1000 + 2990, 1000 + 2991])
    p = src.propose(View())
    assert p is not None and p.ids[0] == 1000 + 2992


def test_echo_sees_injected_tokens_through_the_session() -> None:
    # A strict row injects 3 4 5 after "2"; echo must index those ids too.
    row = FillRow((2,), (3, 4, 5), "scaffold")
    s = FillSession(FillPlan(rows=(row,), echo=echo_config(k=2), eos=(EOS,)), [0])
    src = s.sources[1]
    assert isinstance(src, EchoSource)
    s.push(1)
    p = s.push(2)
    assert p is not None and p.origin == "template"
    s.commit(p, 3)
    assert src.length == s.length == 6
    s.push(9)
    s.push(4)  # "9 4" is new; nothing to copy
    p2 = s.push(5)  # "4 5" was injected: echo proposes what followed it
    assert p2 is not None and p2.origin == "echo" and p2.ids[:2] == (9, 4)


def test_session_echo_uses_the_session_max_span() -> None:
    plan = FillPlan(echo=echo_config(k=2, max_span=32), eos=(EOS,))
    hist = list(range(100)) + [0]
    s = FillSession(plan, hist, max_span=4)
    p = s.push(1)
    assert p is not None and p.ids == (2, 3, 4, 5)


def test_eos_in_history_is_cut_by_the_session() -> None:
    plan = FillPlan(echo=echo_config(k=2), eos=(EOS,))
    s = FillSession(plan, [1, 2, 3, 4, EOS, 7, 1])
    p = s.push(2)
    assert p is not None and p.ids == (3, 4) and p.policy == "verify"


def test_bad_config_raises() -> None:
    with pytest.raises(ValueError, match="k=1"):
        echo_config(k=1)
    with pytest.raises(ValueError, match="max_candidates"):
        echo_config(max_candidates=0)


def test_a_proposal_reports_how_long_its_copy_has_run() -> None:
    # The docstring's example: "a b" matches back to "c e" vs "c d": a run of 2.
    assert echo([1, 2, 3, 4, 1, 2, 3, 5, 1, 2]).propose(View()).run == 2  # type: ignore[union-attr]
    # A re-quote four ids in: the history matches the passage back to where it began.
    p = echo([9, 1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4], max_candidates=1).propose(View())
    assert p is not None and p.ids[:3] == (5, 6, 7) and p.run == 4
    # A copy of a passage that repeats a longer context runs as far as that context.
    p = echo([8, 1, 2, 3, 4, 5, 8, 1, 2, 3], max_candidates=1).propose(View())
    assert p is not None and p.run == 4


def test_a_passage_quoted_far_back_is_not_stopped_by_a_short_match_that_forks() -> None:
    passage = list(range(100, 130))  # 30 ids quoted before, then "1 2" went on "3 4 5"
    history = [*passage, 1, 2, 3, 4, 5, 0, 7, 1, 2, 9, 9, 0, *passage, 1, 2]
    p = echo(history).propose(View())
    # The nearer "1 2" (followed by 9) matches 2 ids back; the quoted one 32.
    assert p is not None and p.ids[:4] == (3, 4, 5, 0) and not p.branch_stop
    assert p.run == len(passage) + 2
    # Without the long match both occurrences count, and they fork at once.
    short = echo([1, 2, 3, 4, 5, 0, 7, 1, 2, 9, 9, 0, 8, 1, 2]).propose(View())
    assert short is None or short.branch_stop
