"""Hypothesis properties of the session: clamp bounds, history, echo provenance."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ffwd.fill import EchoSource, FillPlan, FillRow, FillSession
from tests.unit.served import echo_config

EOS = 0
tokens = st.integers(min_value=0, max_value=6)  # small alphabet: many matches and forks


def starts_in(hay: list[int], run: tuple[int, ...]) -> bool:
    """Whether `run` occurs in `hay` followed by `run` itself, starting inside `hay`."""
    ext, n = hay + list(run), len(run)
    return any(tuple(ext[i : i + n]) == run for i in range(len(hay)))


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[FillPlan, list[int], list[tuple[int, int, float]], int]:
    rows = tuple(
        FillRow(tuple(draw(st.lists(tokens, min_size=1, max_size=3))),
                tuple(draw(st.lists(tokens, min_size=1, max_size=12))),
                draw(st.sampled_from(["scaffold", "name", "key", "close", "turn-end"])))
        for _ in range(draw(st.integers(0, 4)))
    )
    echo = echo_config(k=draw(st.integers(2, 4)), max_candidates=draw(st.integers(1, 4)))
    delims = frozenset(draw(st.sets(tokens, max_size=2)))
    plan = FillPlan(rows=rows, echo=echo if draw(st.booleans()) else None,
                    delimiters=delims, eos=(EOS,))
    prompt = draw(st.lists(tokens, max_size=30))
    steps = draw(st.lists(st.tuples(tokens, st.integers(0, 20),
                                    st.sampled_from([float("inf"), 0, 1, 2, 3, 5, 9])),
                          max_size=40))
    max_span = draw(st.integers(2, 10))
    return plan, prompt, steps, max_span


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_history_and_clamp_invariants(
    sc: tuple[FillPlan, list[int], list[tuple[int, int, float]], int],
) -> None:
    plan, prompt, steps, max_span = sc
    s = FillSession(plan, prompt, max_span=max_span)
    history = list(prompt)
    echo = next((x for x in s.sources if isinstance(x, EchoSource)), None)
    window = max([1, *(x.window_needed for x in s.sources)])
    for tok, accept, budget in steps:
        before = list(history)
        p = s.push(tok, budget)
        history.append(tok)
        # The view keeps at least the last ids any source reads.
        assert list(s.tail(window)) == history[-window:]
        if p is None:
            continue
        assert 2 <= len(p.ids) <= max_span
        assert len(p.ids) <= budget
        assert EOS not in p.ids
        if p.origin == "echo":
            # A copied span is a contiguous run that starts in the history (a loop's copy
            # runs on past the present as the span itself does).
            assert starts_in(before + [tok], p.ids)
            if plan.delimiters:
                assert not any(t in plan.delimiters for t in p.ids[:-1])
        n = min(accept, len(p.ids))
        s.commit(p, accept)
        history.extend(p.ids[:n])
        assert s.length == len(history)
        if echo is not None:
            assert echo.length == len(history)
        assert list(s.tail(window)) == history[-window:]
    assert s.length == len(history)
    st_ = s.stats
    assert st_.injected == sum(st_.span_lens) == st_.strict + st_.echo
    assert st_.decode_steps == len(steps)


@settings(max_examples=200, deadline=None)
@given(st.lists(tokens, max_size=80), st.integers(2, 4))
def test_echo_proposals_are_runs_of_the_history(hist: list[int], k: int) -> None:
    src = EchoSource(echo_config(k=k, max_span=16), [])
    s_view = FillSession(FillPlan(), [])
    for i, t in enumerate(hist):
        src.observe([t])
        p = src.propose(s_view)
        seen = hist[: i + 1]
        anchor = tuple(seen[-k:])
        # Where the last k ids ended before (the present tail itself excluded).
        ends = [j for j in range(k - 1, i) if tuple(seen[j - k + 1 : j + 1]) == anchor]
        if not ends:
            assert p is None
            continue
        if len(ends) == 1:  # one earlier occurrence: nothing forks, its next id is proposed
            assert p is not None and p.ids[0] == seen[ends[0] + 1]
        if p is not None:
            # The proposal continues an earlier occurrence of the last k ids (past the
            # present, a loop goes on as the proposal does).
            ext = seen + list(p.ids)
            assert any(tuple(ext[j + 1 : j + 1 + len(p.ids)]) == p.ids for j in ends)
