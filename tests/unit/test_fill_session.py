"""FillSession and StrictRowSource: triggers, clamps, commit accounting, stats."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from ffwd.fill import (
    FillPlan,
    FillRow,
    FillSession,
    Proposal,
    StrictRowSource,
    TokenView,
)
from tests.unit.served import echo_config

EOS = 99


def row(trigger: Sequence[int], emit: Sequence[int], kind: str = "scaffold", **kw: bool) -> FillRow:
    return FillRow(tuple(trigger), tuple(emit), kind, **kw)  # type: ignore[arg-type]


def session(*rows: FillRow, prompt: Sequence[int] = (0,), **kw: object) -> FillSession:
    plan = FillPlan(rows=rows, eos=(EOS,), delimiters=kw.pop("delimiters", frozenset()))  # type: ignore[arg-type]
    return FillSession(plan, prompt, **kw)  # type: ignore[arg-type]


class ListSource:
    """A caller source that always proposes the same ids."""

    def __init__(self, ids: Sequence[int], policy: str = "verify", origin: str = "echo",
                 window: int = 1) -> None:
        self.ids = tuple(ids)
        self.policy = policy
        self.origin = origin
        self.name = "list"
        self.window_needed = window
        self.seen: list[int] = []

    def propose(self, view: TokenView) -> Proposal | None:
        return Proposal(self.ids, self.policy, self.origin)  # type: ignore[arg-type]

    def observe(self, ids: Sequence[int]) -> None:
        self.seen.extend(ids)


class Gate:
    def __init__(self, allow: bool) -> None:
        self.allow = allow
        self.observed: list[int] = []

    def observe(self, ids: Sequence[int]) -> None:
        self.observed.extend(ids)

    def allows(self, r: FillRow) -> bool:
        return self.allow


# --- triggers -----------------------------------------------------------------


def test_row_fires_on_trigger_suffix_and_returns_assert_template() -> None:
    s = session(row([5, 6], [7, 8, 9]))
    assert s.push(5) is None
    p = s.push(6)
    assert p == Proposal((7, 8, 9), "assert", "template")


def test_trigger_matches_across_prompt_boundary() -> None:
    # The prompt ends with 5; the first sampled id completes the trigger.
    s = session(row([5, 6], [7, 8]), prompt=[1, 2, 5])
    p = s.push(6)
    assert p is not None and p.ids == (7, 8)


def test_trigger_longer_than_history_never_matches() -> None:
    s = session(row([1, 2, 3], [7, 8]), prompt=[])
    assert s.push(3) is None


def test_longest_trigger_wins_regardless_of_plan_order() -> None:
    s = session(row([6], [1, 1]), row([5, 6], [2, 2]), prompt=[5])
    p = s.push(6)
    assert p is not None and p.ids == (2, 2)


def test_plan_order_breaks_ties_between_equal_triggers() -> None:
    s = session(row([6], [1, 1]), row([6], [2, 2]))
    p = s.push(6)
    assert p is not None and p.ids == (1, 1)


def test_name_and_key_rows_are_schema_origin() -> None:
    for kind, origin in [("name", "schema"), ("key", "schema"), ("close", "template"),
                         ("turn-end", "template"), ("scaffold", "template")]:
        s = session(row([6], [1, 2], kind))
        p = s.push(6)
        assert p is not None and p.origin == origin and p.policy == "assert"


def test_context_gates_rows_that_require_it() -> None:
    gated = row([6], [1, 2], requires_context=True)
    assert session(gated, strict_context=Gate(False)).push(6) is None
    p = session(gated, strict_context=Gate(True)).push(6)
    assert p is not None and p.ids == (1, 2)
    # Without any context a row that requires one never fires.
    assert session(gated).push(6) is None


def test_gated_row_falls_through_to_next_row_in_bucket() -> None:
    s = session(row([5, 6], [1, 1], requires_context=True), row([6], [2, 2]),
                prompt=[5], strict_context=Gate(False))
    p = s.push(6)
    assert p is not None and p.ids == (2, 2)


def test_context_observes_sampled_and_committed_ids() -> None:
    gate = Gate(True)
    s = session(row([6], [1, 2]), strict_context=gate)
    p = s.push(6)
    assert p is not None
    s.commit(p, 2)
    s.push(4)
    assert gate.observed == [6, 1, 2, 4]


def test_empty_rows_are_ignored() -> None:
    src = StrictRowSource([row([], [1, 2]), row([3], [])])
    s = session()
    s.push(3)
    assert src.propose(s) is None


def test_strict_source_enable_disable() -> None:
    src = StrictRowSource([row([3], [1, 2])])
    s = session(prompt=[3])
    assert src.enabled and src.propose(s) is not None
    src.disable()
    assert not src.enabled and src.propose(s) is None


# --- clamps -------------------------------------------------------------------


def test_eos_cuts_before_first_eos() -> None:
    s = session(row([6], [1, 2, EOS, 3]))
    p = s.push(6)
    assert p is not None and p.ids == (1, 2)
    assert s.stats.index_truncated == 1


def test_eos_cut_below_two_rejects() -> None:
    s = session(row([6], [1, EOS, 3, 4]))
    assert s.push(6) is None
    assert s.stats.index_truncated == 0


def test_delimiters_do_not_cut_strict_rows() -> None:
    s = session(row([6], [1, 50, 2, 50]), delimiters=frozenset({50}))
    p = s.push(6)
    assert p is not None and p.ids == (1, 50, 2, 50)


def test_delimiter_ends_echo_span_inclusive_and_keeps_policy() -> None:
    src = ListSource([1, 50, 2, 3], policy="assert", origin="echo")
    s = session(sources=[src], delimiters=frozenset({50}))
    p = s.push(6)
    assert p is not None and p.ids == (1, 50)
    assert p.policy == "assert"  # ending at a delimiter does not weaken the claim


def test_echo_cut_by_max_span_is_held_under_verify() -> None:
    src = ListSource([1, 2, 3, 4, 5], policy="assert", origin="echo")
    s = session(sources=[src], max_span=3)
    p = s.push(6)
    assert p is not None and p.ids == (1, 2, 3) and p.policy == "verify"


def test_echo_cut_by_eos_is_held_under_verify() -> None:
    src = ListSource([1, 2, EOS], policy="assert", origin="echo")
    s = session(sources=[src])
    p = s.push(6)
    assert p is not None and p.ids == (1, 2) and p.policy == "verify"


def test_strict_row_cut_by_budget_stays_assert() -> None:
    s = session(row([6], [1, 2, 3, 4]))
    p = s.push(6, budget=3)
    assert p is not None and p.ids == (1, 2, 3) and p.policy == "assert"
    assert s.budget == 3


def test_max_span_caps_strict_rows() -> None:
    s = session(row([6], list(range(10, 50))), max_span=5)
    p = s.push(6)
    assert p is not None and p.ids == (10, 11, 12, 13, 14)


def test_budget_below_two_rejects() -> None:
    s = session(row([6], [1, 2, 3]))
    assert s.push(6, budget=1) is None


def test_clamp_order_eos_before_delimiter_before_span() -> None:
    # EOS at 3 cuts to [1, 50, 2]; delimiter cuts to [1, 50]; span cap 8 is moot.
    src = ListSource([1, 50, 2, EOS, 50], origin="echo")
    s = session(sources=[src], delimiters=frozenset({50}), max_span=8)
    p = s.push(6)
    assert p is not None and p.ids == (1, 50)
    # Delimiter before span cap: the cap never sees the tail past the delimiter.
    src2 = ListSource([1, 2, 3, 50, 4], origin="echo")
    s2 = session(sources=[src2], delimiters=frozenset({50}), max_span=2)
    p2 = s2.push(6)
    assert p2 is not None and p2.ids == (1, 2) and p2.policy == "verify"


def test_single_token_spans_are_rejected_and_next_source_is_asked() -> None:
    s = session(row([6], [1]), sources=[ListSource([7, 8])])
    p = s.push(6)
    assert p is not None and p.ids == (7, 8)


def test_invalid_session_settings_raise() -> None:
    with pytest.raises(ValueError, match="max_span"):
        session(max_span=1)
    with pytest.raises(ValueError, match="append_chunk_size"):
        session(append_chunk_size=-1)


# --- priority -----------------------------------------------------------------


def test_source_priority_strict_then_echo_then_callers() -> None:
    plan = FillPlan(rows=(row([3, 4], [7, 7]),), echo=echo_config(k=2), eos=(EOS,))
    # Echo knows "1 2 -> 3 4 9"; the strict row fires after "3 4"; the caller
    # source always has something.
    prompt = [1, 2, 3, 4, 9]
    s = FillSession(plan, prompt, sources=[ListSource([5, 5], origin="ngram")])
    assert s.push(1) is not None and s._pending is not None  # caller: no echo match yet
    s.commit(s._pending, 0)
    p = s.push(2)  # echo beats the caller
    assert p is not None and p.origin == "echo" and p.ids[:3] == (3, 4, 9)
    s.commit(p, 0)
    s.push(3)
    s.commit(s._pending, 0)  # type: ignore[arg-type]
    p = s.push(4)  # strict beats echo (which would propose 9 ...)
    assert p is not None and p.origin == "template" and p.ids == (7, 7)


def test_window_is_the_max_window_needed() -> None:
    wide = ListSource([1, 2], window=40)
    s = session(row([1, 2, 3], [4, 5]), sources=[wide], prompt=list(range(100)))
    assert len(s.tail(1000)) == 40
    s2 = session(row([1, 2, 3], [4, 5]), prompt=list(range(100)))
    assert list(s2.tail(1000)) == [97, 98, 99]


# --- commit -------------------------------------------------------------------


def test_full_commit_counts_and_extends_history() -> None:
    s = session(row([6], [1, 2, 3], "name"), prompt=[0])
    p = s.push(6)
    assert p is not None
    assert s.length == 2  # nothing enters the history before commit
    s.commit(p, 3)
    st = s.stats
    assert (st.events, st.injected, st.strict, st.echo, st.span_lens) == (1, 3, 3, 0, [3])
    assert s.length == 5 and list(s.tail(3)) == [1, 2, 3]


def test_partial_and_zero_verify_commits() -> None:
    src = ListSource([1, 2, 3, 4])
    s = session(sources=[src])
    p = s.push(6)
    assert p is not None and p.policy == "verify"
    s.commit(p, 2)
    assert (s.stats.verify_accepted, s.stats.verify_rejected) == (2, 2)
    assert src.seen[-3:] == [6, 1, 2] and s.stats.echo == 2
    p = s.push(7)
    assert p is not None
    s.commit(p, 0)
    assert (s.stats.verify_accepted, s.stats.verify_rejected) == (2, 6)
    assert s.stats.events == 1 and s.stats.span_lens == [2]
    assert src.seen[-1] == 7


def test_commit_clamps_accepted_to_proposal_length() -> None:
    s = session(row([6], [1, 2]))
    p = s.push(6)
    assert p is not None
    s.commit(p, 10)
    assert s.stats.injected == 2 and s.length == 4


def test_commit_contract_is_enforced() -> None:
    s = session(row([6], [1, 2]))
    p = s.push(6)
    assert p is not None
    with pytest.raises(RuntimeError, match="before commit"):
        s.push(6)
    s.commit(p, 2)
    with pytest.raises(RuntimeError, match="not pending"):
        s.commit(p, 2)


def test_assert_commit_does_not_touch_verify_counters() -> None:
    s = session(row([6], [1, 2]))
    p = s.push(6)
    assert p is not None
    s.commit(p, 1)
    assert (s.stats.verify_accepted, s.stats.verify_rejected) == (0, 0)


# --- notes and stats ----------------------------------------------------------


def test_note_counters() -> None:
    s = session()
    s.note_verify_event(1.5)
    s.note_verify_event(0.5)
    s.note_verify_unsupported()
    st = s.stats
    assert (st.verify_events, st.checkpoint_ms, st.verify_unsupported) == (2, 2.0, 1)


def test_decode_steps_count_pushes_only() -> None:
    s = session(row([6], [1, 2]))
    s.push(5)
    p = s.push(6)
    assert p is not None
    s.commit(p, 2)
    assert s.stats.decode_steps == 2


def test_parse_failure_disarms_only_after_a_strict_fill() -> None:
    s = session(row([6], [1, 2]))
    s.note_parse_failure()
    assert s.strict_enabled and s.stats.parse_fallback == 0
    p = s.push(6)
    assert p is not None
    s.commit(p, 2)
    s.note_parse_failure()
    assert not s.strict_enabled and s.stats.parse_fallback == 1
    assert s.push(6) is None


def test_parse_failure_keeps_echo() -> None:
    plan = FillPlan(rows=(row([6], [1, 2]),), echo=echo_config(k=2), eos=(EOS,))
    s = FillSession(plan, [3, 4, 5, 8, 8, 3])
    p = s.push(6)
    assert p is not None
    s.commit(p, 2)
    s.note_parse_failure()
    assert s.push(3) is None
    p = s.push(4)  # "3 4" occurred in the prompt: echo proposes 5 8 8 3 ...
    assert p is not None and p.origin == "echo" and p.ids[:2] == (5, 8)


def test_branch_stops_are_counted() -> None:
    plan = FillPlan(echo=echo_config(k=2), eos=(EOS,))
    # 1 2 -> 3 4 and 1 2 -> 3 5: fork after 3.
    s = FillSession(plan, [1, 2, 3, 4, 1, 2, 3, 5, 0, 1])
    assert s.push(2) is None  # the span [3] is too short
    assert s.stats.branch_stops == 1


def test_stats_as_dict_has_every_field() -> None:
    keys = set(session().stats.as_dict())
    assert keys == {
        "events", "injected", "strict", "grammar", "echo", "recall", "span_lens", "wasted_samples",
        "parse_fallback", "index_truncated", "decode_steps", "verify_events",
        "verify_accepted", "verify_rejected", "verify_unsupported", "checkpoint_ms",
        "branch_stops", "declined", "backoffs", "backed_off", "merged", "verify_spans",
    }


def test_default_budget_is_unbounded() -> None:
    s = session()
    s.push(1)
    assert math.isinf(s.budget)


# --- start (forced openings) ----------------------------------------------------


def test_start_fires_a_row_triggered_by_the_prompt_tail() -> None:
    s = session(row([7, 8], [1, 2, 3]), prompt=[5, 7, 8])
    p = s.start()
    assert p == Proposal((1, 2, 3), "assert", "template")
    s.commit(p, 3)
    assert s.length == 6 and s.stats.decode_steps == 0 and s.stats.strict == 3
    assert s.push(4) is None and s.stats.decode_steps == 1


def test_start_asks_only_strict_rows_and_only_once() -> None:
    s = session(sources=[ListSource([1, 2])], prompt=[5])
    assert s.start() is None  # the caller source is not asked before a sample
    s2 = session(row([5], [1, 2]), prompt=[5])
    p = s2.start(budget=1)
    assert p is None  # the budget clamp applies
    s2.push(9)
    with pytest.raises(RuntimeError, match="began"):
        s2.start()


class Stateless:
    """A caller source without ``observe`` (the hook is optional)."""

    name = "stateless"
    window_needed = 1

    def propose(self, view: TokenView) -> Proposal | None:
        return Proposal((7, 8), "assert", "ngram") if view.tail(1) == [3] else None


def test_a_source_without_observe_is_asked_and_never_observed() -> None:
    s = session(sources=[Stateless()])
    assert s.push(1) is None
    p = s.push(3)
    assert p is not None and p.ids == (7, 8)
    s.commit(p, 2)
    assert s.length == 1 + 2 + 2


def test_decline_counts_and_keeps_learning_from_samples() -> None:
    src = ListSource([5, 6, 7])
    s = session(sources=[src])
    p = s.push(1)
    assert p is not None and p.policy == "verify"
    before = s.acceptance(p)
    with pytest.raises(RuntimeError, match="not pending"):
        s.decline(Proposal((5, 6), "verify", "echo"))
    s.decline(p)
    assert s.stats.declined == 1 and s.stats.verify_rejected == 0
    assert s.length == 2  # nothing entered the history
    q = s.push(5)  # the model sampled what position 0 proposed
    assert s.acceptance(p)[0] > before[0]
    assert q is not None
    s.commit(q, 0, tested=1)  # a probe rejected at position 0
    assert s.stats.verify_rejected == 1 and s.stats.verify_accepted == 0


def test_commit_tested_limits_what_counts_as_rejected() -> None:
    s = session(sources=[ListSource([5, 6, 7, 8])])
    p = s.push(1)
    assert p is not None and p.run == 0 and len(p.ids) == 4
    before = s.acceptance(p)
    s.commit(p, 1, tested=2)
    assert (s.stats.verify_accepted, s.stats.verify_rejected) == (1, 1)
    rates = s.acceptance(p)
    assert rates[0] > before[0]  # position 0 learned an acceptance
    assert rates[1] < before[1]  # position 1 learned a rejection
    assert rates[2:] == before[2:]  # positions 2 and 3 (other run buckets) were not tested


class FakeGrammar:
    """A constraining source: forces (20, 21) after 3, admits nothing past id 50."""

    name = "grammar"
    window_needed = 1

    def __init__(self) -> None:
        self.seen: list[int] = []

    def propose(self, view: TokenView) -> Proposal | None:
        return Proposal((20, 21), "assert", "grammar") if view.tail(1) == [3] else None

    def observe(self, ids: Sequence[int]) -> None:
        self.seen.extend(ids)

    def admit(self, ids: Sequence[int]) -> int:
        return next((i for i, t in enumerate(ids) if t == 50), len(ids))


def test_the_grammar_comes_after_strict_rows_and_before_echo() -> None:
    g = FakeGrammar()
    s = session(row([3], [7, 8]), sources=[ListSource([9, 9])], grammar=g)
    p = s.push(3)
    assert p is not None and p.origin == "template"  # strict rows first
    s.commit(p, 0)
    s2 = session(sources=[ListSource([9, 9])], grammar=g)
    p2 = s2.push(3)
    assert p2 is not None and (p2.ids, p2.origin, p2.policy) == ((20, 21), "grammar", "assert")
    s2.commit(p2, 2)
    assert s2.stats.grammar == 2 and s2.stats.strict == 0 and s2.stats.injected == 2
    assert g.seen[-3:] == [3, 20, 21]


def test_the_grammar_bounds_every_proposal_and_answers_start() -> None:
    s = session(row([1], [4, 5, 50, 6]), grammar=FakeGrammar())
    p = s.push(1)
    assert p is not None and p.ids == (4, 5) and s.stats.index_truncated == 1
    s.commit(p, 2)
    cut = session(sources=[ListSource([7, 50, 8])], grammar=FakeGrammar())
    assert cut.push(2) is None  # one admitted id is too short to propose
    start = session(grammar=FakeGrammar(), prompt=(0, 3)).start()
    assert start is not None and start.origin == "grammar"
