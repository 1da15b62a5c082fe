"""The span policy on small tables: what pays, what is declined, how undo is priced."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ffwd.fill.echo import RUN_CAP
from ffwd.fill.spans import (
    Acceptance,
    AcceptanceBook,
    SharedAcceptance,
    Undo,
    choose_span,
    chunk_sizes,
    prior_for,
)


def linear(m: int) -> float:
    return 8.0 + 2.0 * m


def test_worked_example_from_the_module_docstring() -> None:
    choice = choose_span(linear, [0.9], 32)
    assert (choice.length, choice.probe) == (7, False)
    assert choice.expected_ms == pytest.approx(24.0)
    assert choice.expected_ids == pytest.approx(sum(0.9**j for j in range(8)))
    assert choice.rate > 1 / linear(1)


def test_a_span_that_cannot_pay_is_declined() -> None:
    choice = choose_span(linear, [0.2], 32)
    assert choice.length == 0
    assert choice.expected_ms == linear(1) and choice.expected_ids == 1.0


def test_an_expensive_multi_id_forward_declines_even_likely_spans() -> None:
    # llama.cpp-like on CPU: a 2-id forward costs about 2 single ones.
    def steep(m: int) -> float:
        return 10.0 * m

    assert choose_span(steep, [0.9], 32).length == 0


def test_a_cheap_backend_takes_the_whole_span() -> None:
    def flat(m: int) -> float:
        return 10.0 + 0.001 * m

    choice = choose_span(flat, [0.9], 24)
    assert choice.length == 24 and not choice.probe


def test_falling_acceptance_shortens_spans() -> None:
    acc = Acceptance(prior=[0.9], weight=4.0, decay=0.9)
    lengths = [choose_span(linear, acc.rates(), 32).length]
    for _ in range(6):
        acc.record(tested=8, accepted=1)  # the copy keeps breaking at position 1
        lengths.append(choose_span(linear, acc.rates(), 32).length)
    assert lengths == sorted(lengths, reverse=True)
    assert lengths[0] >= 7 and lengths[-1] < lengths[0]


def test_a_recurrent_backend_prices_restore_into_the_decision() -> None:
    rates = [0.7]
    rewinding = choose_span(linear, rates, 32)
    restoring = choose_span(linear, rates, 32, Undo(before=2.0, after=6.0, replay=True))
    assert rewinding.length > 0
    assert restoring.length < rewinding.length
    assert restoring.rate < rewinding.rate
    # With restores that cost several plain steps, the same span is declined.
    assert choose_span(linear, rates, 32, Undo(before=20.0, after=60.0, replay=True)).length == 0


def test_probe_first_when_position_zero_is_doubtful_and_two_ids_cost_much_more() -> None:
    # transformers-on-CPU shape: one id 45 ms, two or more ~65-80 ms.
    def bumpy(m: int) -> float:
        return 45.0 if m == 1 else 64.0 + m

    rates = [0.3, 0.95]  # a coin flip at position 0, then the copy runs
    choice = choose_span(bumpy, rates, 16)
    assert choice.probe and choice.length >= 2
    # A sure position 0 makes the combined forward better.
    assert not choose_span(bumpy, [0.99, 0.95], 16).probe


def test_decline_on_no_rates_or_no_span() -> None:
    assert choose_span(linear, [], 8).length == 0
    assert choose_span(linear, [0.99], 0).length == 0


def test_chunk_sizes_follow_the_curve() -> None:
    assert chunk_sizes(5, lambda m: 10.0 + m, 8) == [5]
    assert chunk_sizes(40, lambda m: 10.0 + m, 16) == [8, 16, 16]
    # A curve with a bump at 4-5 ids splits around it.
    table = {1: 10.0, 2: 11.0, 4: 40.0, 5: 50.0}
    assert chunk_sizes(5, lambda m: table.get(m, 99.0), 8) == [1, 2, 2]
    assert sum(chunk_sizes(33, lambda m: 5.0 + m, 32)) == 33


def test_acceptance_record_and_prior() -> None:
    acc = Acceptance(prior=(0.5, 0.8), weight=2.0, decay=1.0)
    assert acc.rates(run=0, n=4) == [0.5, 0.8, 0.8, 0.8]
    acc.record(tested=3, accepted=1)  # runs 0 and 1 were tested: 0 kept, 1 rejected
    assert acc.rates(run=0, n=3) == pytest.approx([2 / 3, 1.6 / 3, 0.8])
    acc.record(tested=2, accepted=2, run=1)  # runs 1 and 2 kept
    assert acc.rates(run=1, n=2) == pytest.approx([(1 + 1.6) / 4, (1 + 1.6) / 3])
    # A span's positions read the buckets its run reaches: a copy 4 ids in reads bucket 3.
    acc.record(tested=9, accepted=9, run=40)
    assert acc.rates(run=40, n=1)[0] > 0.8 and acc.rates(run=4, n=1)[0] == 0.8


def test_a_long_run_earns_more_than_a_fresh_match() -> None:
    acc = Acceptance(prior=(0.5,), weight=1.0, decay=1.0)
    for _ in range(10):
        acc.record(tested=3, accepted=0, run=2)  # fresh matches fail at once
        acc.record(tested=8, accepted=8, run=20)  # long copies go on
    fresh, long = acc.rates(run=2, n=3), acc.rates(run=20, n=3)
    assert max(fresh[:2]) < 0.2 and min(long) > 0.9


def test_acceptance_forgets_with_decay() -> None:
    acc = Acceptance(prior=[0.5], weight=0.2, decay=0.5)
    for _ in range(20):
        acc.record(tested=1, accepted=0)
    low = acc.rates(n=1)[0]
    for _ in range(5):
        acc.record(tested=1, accepted=1)
    assert low < 0.1 and acc.rates(n=1)[0] > 0.8


def test_acceptance_rejects_bad_settings() -> None:
    with pytest.raises(ValueError):
        Acceptance(prior=[])
    with pytest.raises(ValueError):
        Acceptance(prior=[0.5], decay=0.0)


def test_book_learns_from_a_declined_proposal_while_the_model_samples() -> None:
    book = AcceptanceBook()
    prior = book.rates("echo", run=0, n=3)
    book.declined("echo", (5, 6, 7), run=0)
    book.sampled(5)  # position 0 (run 0) would have been kept
    book.sampled(9)  # position 1 (run 1) would have been rejected
    rates = book.rates("echo", run=0, n=3)
    assert rates[0] > prior[0] and rates[1] < prior[1] and rates[2] == prior[2]
    book.sampled(6)  # no longer followed
    assert book.rates("echo", run=0, n=3) == rates


def test_book_follows_one_declined_proposal_and_a_verify_settles_it() -> None:
    book = AcceptanceBook()
    prior = book.rates("echo", run=8, n=3)
    book.declined("echo", (5, 6, 7), run=8)
    book.declined("echo", (6, 7, 8), run=9)  # the same copy one step later: not counted twice
    book.sampled(5)
    book.verified("echo", tested=2, accepted=2, run=9)  # ends the follow
    book.sampled(0)  # not scored against the declined span any more
    rates = book.rates("echo", run=8, n=3)
    a = Acceptance(prior_for("echo"))
    a.observe(8, True)
    a.record(2, 2, run=9)
    assert rates == a.rates(run=8, n=3) and rates[0] > prior[0]


def ramp(cost: Callable[[int], float], book: AcceptanceBook, origin: str,
         runs: list[int]) -> list[int]:
    """The span lengths `choose_span` gives a copy of 64 ids at each run."""
    return [choose_span(cost, book.rates(origin, r, 64), 64).length for r in runs]


def llama_cpu(m: int) -> float:
    return 12.8 + 3.5 * m  # llama.cpp on two cores at ~500 cached ids (measured here)


def test_span_length_follows_the_evidence_not_a_ramp() -> None:
    # A server that saw copies of long matches kept (a repeat's first request) prices a
    # copy matching 64+ ids back at its first id: one long span, no 1, 1, 2, 3... ramp.
    server = SharedAcceptance()
    first = AcceptanceBook(server)
    for _ in range(10):
        first.verified("recall", tested=20, accepted=20, run=64)
    second = AcceptanceBook(server)
    far, fresh = ramp(llama_cpu, second, "recall", [64, 3])
    assert far >= 48 and fresh <= 4
    # A request of its own (no server) starts from the prior, and learns within itself.
    alone = AcceptanceBook()
    assert ramp(llama_cpu, alone, "recall", [64])[0] < far


def test_the_server_estimate_is_every_request_s_base_and_learns_from_each() -> None:
    server = SharedAcceptance()
    a, b = AcceptanceBook(server), AcceptanceBook(server)
    prior = b.rates("echo", run=5, n=1)[0]
    for _ in range(20):
        a.verified("echo", tested=3, accepted=0, run=5)  # one request's copies fail there
    assert b.rates("echo", run=5, n=1)[0] < prior  # the next request starts lower
    assert server.tables()["echo"][3] < prior_for("echo")[3]
    # A request's own estimate moves faster than the server's (it forgets sooner).
    assert a.rates("echo", run=5, n=1)[0] < b.rates("echo", run=5, n=1)[0]
    # Other buckets and origins are untouched.
    assert b.rates("echo", run=64, n=1)[0] == pytest.approx(prior_for("echo")[7])
    assert "recall" not in server.tables()


def test_the_server_remembers_long_enough_to_tell_099_from_0999() -> None:
    server = SharedAcceptance()
    book = AcceptanceBook(server)
    for i in range(400):
        book.verified("recall", tested=10, accepted=10 if i % 10 else 9, run=64)
    rate = server.get("recall").rates(run=64, n=1)[0]
    assert 0.985 < rate < 0.995  # one miss in 100 ids


def test_a_repeat_is_priced_long_from_its_first_proposal_on_a_fresh_server() -> None:
    # Recall matching the whole prompt (a request sent again: RUN_CAP ids and more) is
    # forwarded as far as the price says at once; a 64-id quote, shorter; a fresh match,
    # a few ids.
    book = AcceptanceBook(SharedAcceptance())
    repeat, quote, fresh = ramp(llama_cpu, book, "recall", [RUN_CAP, 64, 3])
    assert repeat == 64 and 8 <= quote < repeat and fresh <= 4


def test_the_running_level_scales_every_price_alike_and_changes_no_choice() -> None:
    # `expected_ms` is the plan's price on the surface times its running level (the
    # machine now against when it was measured): a busy machine raises it, and the plain
    # step's with it, so the chosen length stays (no undo cost to weigh against it).
    for rates in ([0.6], [0.9], [0.99], [0.999]):
        choices = [choose_span(lambda m, f=f: f * llama_cpu(m), rates, 64)
                   for f in (0.3, 1.0, 6.0)]
        assert len({c.length for c in choices}) == 1
        assert choices[2].expected_ms == pytest.approx(20 * choices[0].expected_ms)
