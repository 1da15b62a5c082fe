"""The engine's loop on a scripted context: every running sequence in one forward per
step, each its own rows; prompt chunks within the budget; failures; the waiting line.

The scripted context (`Cache`) keeps each sequence's positions as a cache would and
answers row j of a part with (sequence, position), so a row handed to the wrong
sequence, an id forwarded twice or one lost shows in the rows or the positions. Runs are
scripted steps (what `ffwd.engine.core.generate.stream_steps` is to a model): they yield
`Forward`s and check the rows they are sent.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
import torch

from ffwd.engine.core.batch import BatchStats, Forward, Part
from ffwd.engine.core.prompt_cache import PromptCache
from ffwd.engine.core.scheduler import Engine, QueueFull, Run, ShuttingDown
from tests.unit.scripted import Got, Here, ScriptedSequence, result

LIMIT = 64


class Cache:
    """A context that records every step and keeps each sequence's ids."""

    limit = LIMIT

    def __init__(self, n: int, budget: int = 16, fail_seq: int | None = None) -> None:
        self.sequences = [ScriptedSequence(i) for i in range(n)]
        self.budget = budget
        self.fail_seq = fail_seq
        self.ids: dict[int, list[int]] = {}
        self.steps: list[list[Part]] = []
        self.stats = BatchStats()

    def decode(self, parts: Sequence[Part]) -> list[torch.Tensor]:
        assert sum(len(p.ids) for p in parts) <= LIMIT
        assert [p.seq for p in parts] == sorted(p.seq for p in parts)  # llama.cpp's order
        assert len({p.seq for p in parts}) == len(parts)  # one part per sequence
        if self.fail_seq is not None and any(p.seq == self.fail_seq for p in parts):
            raise RuntimeError("the forward failed")
        self.steps.append(list(parts))
        self.stats.count(len(parts))
        out = []
        for p in parts:
            have = self.ids.setdefault(p.seq, [])
            start = len(have)
            have.extend(p.ids)
            rows = range(start, len(have)) if p.all_rows else [len(have) - 1]
            out.append(torch.tensor([[p.seq, pos] for pos in rows], dtype=torch.float32))
        return out

    def set_running(self, seqs: Sequence[int]) -> None:
        pass

    def batch_stats(self) -> BatchStats:
        return self.stats.copy()


Steps = Callable[[Any, Callable[[], bool]], Iterator[Any]]


def submit(engine: Engine, steps: Steps, tenant: str = "") -> tuple[Run, Got]:
    got = Got()
    run = Run([], steps, Here(), got.deliver, tenant=tenant)  # type: ignore[arg-type]
    engine.submit(run)
    return run, got


def scripted(rng: random.Random, failures: list[str]) -> Steps:
    """A run of prompt chunks, spans with every row and steps with the last."""

    def steps(seq: Any, cancelled: Callable[[], bool]) -> Iterator[Any]:
        sent = 0
        for _ in range(rng.randint(3, 12)):
            kind = rng.choice(["prompt", "rows", "last"])
            n = rng.randint(1, 200) if kind == "prompt" else rng.randint(1, 8)
            rows = yield Forward([rng.randint(0, 99) for _ in range(n)], kind == "rows",
                                 kind == "prompt")
            want = range(sent, sent + n) if kind == "rows" else [sent + n - 1]
            sent += n
            if rows.tolist() != [[seq.seq, pos] for pos in want]:
                failures.append(f"sequence {seq.seq}: rows {rows.tolist()} for {list(want)}")
        yield result(completion=sent)

    return steps


def test_sixteen_runs_get_exactly_their_own_rows() -> None:
    cache = Cache(16)
    engine = Engine(cache, PromptCache(0), max_queue=16)  # type: ignore[arg-type]
    rng = random.Random(7)
    failures: list[str] = []
    runs = [submit(engine, scripted(random.Random(rng.random()), failures)) for _ in range(16)]
    for _, got in runs:
        assert got.ended.wait(60)
    assert failures == []
    for _, got in runs:  # each ended with its result, then its end
        assert got[-1] is None and got[-2].result is not None  # type: ignore[union-attr]
    # Every id reached a cache once: what the runs sent is what the sequences hold.
    sent = sum(g[-2].result.completion_tokens for _, g in runs)  # type: ignore[union-attr]
    assert sent == sum(len(ids) for ids in cache.ids.values())
    stats = cache.batch_stats()
    assert stats.steps == len(cache.steps) == sum(stats.by_size.values())
    assert max(stats.by_size) > 1  # runs shared forwards
    engine.close()


def test_every_step_carries_every_running_sequence() -> None:
    cache = Cache(3)
    engine = Engine(cache, PromptCache(0), max_queue=8)  # type: ignore[arg-type]
    started: list[int] = []

    def steps(seq: Any, cancelled: Callable[[], bool]) -> Iterator[Any]:
        started.append(seq.seq)
        while len(started) < 3:  # until all three run
            yield Forward([0])
        for i in range(10):
            yield Forward([100 + i])
        yield result(completion=10)

    runs = [submit(engine, steps) for _ in range(3)]
    for _, got in runs:
        assert got.ended.wait(30)
    decodes = [step for step in cache.steps if any(p.ids[0] >= 100 for p in step)]
    # The last to start decodes one step ahead of the others; every other step has all.
    assert len(decodes) <= 11 and all(len(step) == 3 for step in decodes[1:-1])
    assert cache.batch_stats().by_size.get(3, 0) >= 9
    engine.close()


def test_a_long_prompt_goes_in_budget_chunks_beside_a_decoding_sequence() -> None:
    cache = Cache(4, budget=16)
    engine = Engine(cache, PromptCache(0), max_queue=8)  # type: ignore[arg-type]
    prompted = threading.Event()
    decoding = threading.Event()
    last_row: list[Any] = []

    def decode(seq: Any, cancelled: Callable[[], bool]) -> Iterator[Any]:
        i = 0
        while not prompted.is_set() or i < 3:
            yield Forward([i % 50])
            decoding.set()
            i += 1
        yield result(completion=i)

    def prompt(seq: Any, cancelled: Callable[[], bool]) -> Iterator[Any]:
        rows = yield Forward(list(range(200)), prompt=True)
        last_row.append(rows.tolist())
        prompted.set()
        yield result(completion=0)

    submit(engine, decode)
    assert decoding.wait(30)
    _, got = submit(engine, prompt)
    assert got.ended.wait(30)
    seq = next(p.seq for step in cache.steps for p in step if len(p.ids) > 1)
    chunks = [len(p.ids) for step in cache.steps for p in step if p.seq == seq]
    assert sum(chunks) == 200 and max(chunks) <= 16
    assert last_row == [[[seq, 199]]]  # the prompt's last row only
    # Alone, a prompt goes in chunks of the step's limit.
    before = len(cache.steps)
    _, alone = submit(engine, prompt)
    assert alone.ended.wait(30)
    assert [len(s[0].ids) for s in cache.steps[before:]] == [64, 64, 64, 8]
    engine.close()


def test_a_failed_forward_fails_its_runs_and_the_next_steps_go_on() -> None:
    cache = Cache(2, fail_seq=0)
    engine = Engine(cache, PromptCache(0), max_queue=8)  # type: ignore[arg-type]

    def two(seq: Any, cancelled: Callable[[], bool]) -> Iterator[Any]:
        yield Forward([1, 2], rows=True)
        yield result(completion=2)

    _, got = submit(engine, two)  # on sequence 0: its forward fails
    assert got.ended.wait(30)
    assert isinstance(got[-2], RuntimeError) and got[-1] is None
    assert cache.sequences[0].resets == 1  # what a failed run left is not trusted
    cache.fail_seq = None
    _, got = submit(engine, two)
    assert got.ended.wait(30) and got[-2].result is not None  # type: ignore[union-attr]
    engine.close()


def test_a_run_that_fails_ends_with_its_error_and_the_others_go_on() -> None:
    cache = Cache(2)
    engine = Engine(cache, PromptCache(0), max_queue=8)  # type: ignore[arg-type]

    def broken(seq: Any, cancelled: Callable[[], bool]) -> Iterator[Any]:
        yield Forward([1])
        raise ValueError("a bug in one run")

    def fine(seq: Any, cancelled: Callable[[], bool]) -> Iterator[Any]:
        for i in range(5):
            yield Forward([i])
        yield result(completion=5)

    _, bad_got = submit(engine, broken)
    _, good_got = submit(engine, fine)
    assert bad_got.ended.wait(30) and good_got.ended.wait(30)
    assert isinstance(bad_got[-2], ValueError) and good_got[-2].result is not None  # type: ignore[union-attr]
    engine.close()


def gate(release: threading.Event) -> Steps:
    def steps(seq: Any, cancelled: Callable[[], bool]) -> Iterator[Any]:
        while not release.is_set() and not cancelled():
            yield Forward([0])
        yield result(completion=1)

    return steps


def test_runs_that_leave_while_waiting_free_the_line_at_once() -> None:
    cache = Cache(4)
    engine = Engine(cache, PromptCache(0), max_queue=16)  # type: ignore[arg-type]
    release = threading.Event()
    long = [submit(engine, gate(release)) for _ in range(4)]
    while engine.active < 4:
        threading.Event().wait(0.001)
    queued = [submit(engine, gate(release)) for _ in range(16)]
    with pytest.raises(QueueFull):
        submit(engine, gate(release))
    for run, _ in queued:  # their clients go
        run.cancel()
    assert engine.depth == 0  # at once, not when a sequence comes free
    _, got = submit(engine, gate(release))  # a live one is admitted to the line
    for _, ended in queued:
        assert ended.ended.wait(30) and ended == [None]  # each told it ended, nothing ran
    release.set()
    assert got.ended.wait(30) and got[-2].result is not None  # type: ignore[union-attr]
    for _, ended in long:
        assert ended.ended.wait(30)
    engine.close()


def test_a_run_cancelled_while_its_prompt_goes_in_stops_at_once() -> None:
    cache = Cache(2, budget=16)
    engine = Engine(cache, PromptCache(0), max_queue=8)  # type: ignore[arg-type]
    release = threading.Event()
    submit(engine, gate(release))  # a decoding neighbour keeps the prompt in small chunks

    def prompt(seq: Any, cancelled: Callable[[], bool]) -> Iterator[Any]:
        yield Forward(list(range(4000)), prompt=True)
        yield result(completion=0)

    run, got = submit(engine, prompt)
    while not any(len(p.ids) > 1 for step in cache.steps for p in step):
        threading.Event().wait(0.001)
    run.cancel()
    assert got.ended.wait(30) and got == [None]
    chunks = [len(p.ids) for step in cache.steps for p in step if len(p.ids) > 1]
    assert sum(chunks) < 4000  # it did not go on to the end
    release.set()
    engine.close()


def test_a_drain_refuses_new_runs_ends_waiting_ones_and_cuts_what_outlives_the_grace() -> None:
    cache = Cache(2)
    engine = Engine(cache, PromptCache(0), max_queue=8)  # type: ignore[arg-type]

    def steps(n: int) -> Steps:
        def run(seq: Any, cancelled: Callable[[], bool]) -> Iterator[Any]:
            for i in range(n):
                yield Forward([i % 50])
            yield result(completion=n)

        return run

    release = threading.Event()
    _, short = submit(engine, gate(release))  # ends once released
    _, endless = submit(engine, gate(threading.Event()))  # never released
    while engine.active < 2:
        threading.Event().wait(0.001)
    waiting = [submit(engine, steps(3))[1] for _ in range(2)]
    release.set()
    drained = engine.drain(grace_s=0.5)
    assert (drained.finished, drained.cut, drained.refused) == (1, 1, 2)
    with pytest.raises(ShuttingDown):
        submit(engine, steps(1))
    for got in (short, endless, *waiting):
        assert got.ended.wait(10)
    assert short[-2].result is not None  # type: ignore[union-attr]
    assert isinstance(endless[-2], ShuttingDown) and "ended this reply" in str(endless[-2])
    for got in waiting:  # told they did not start, nothing ran
        assert isinstance(got[0], ShuttingDown) and got[1:] == [None]
    engine.close()


def test_a_cancelled_run_counts_the_forwards_its_own_sequence_began_after() -> None:
    """Its client leaves mid-run and its steps take three more forwards (as a span and
    a step could): exactly those three are counted, not its siblings' forwards."""
    cache = Cache(4)
    engine = Engine(cache, PromptCache(0), max_queue=4)  # type: ignore[arg-type]
    release = threading.Event()
    siblings = [submit(engine, gate(release)) for _ in range(3)]
    holder: list[Run] = []

    def steps(seq: Any, cancelled: Callable[[], bool]) -> Iterator[Any]:
        for _ in range(5):
            yield Forward([1])
        holder[0].cancel()  # its client goes between two steps
        for _ in range(3):
            yield Forward([2])
        yield result(completion=8)

    run, got = submit(engine, steps)
    holder.append(run)
    assert got.ended.wait(30)
    release.set()
    for _, ended in siblings:
        assert ended.ended.wait(30)
    assert run.cancelled and run.forwards_after_cancel == 3
    assert len(cache.steps) > 8  # the siblings' forwards went on around it
    assert [r.forwards_after_cancel for r, _ in siblings] == [0, 0, 0]  # never cancelled
    engine.close()


def test_a_run_cancelled_while_waiting_counts_no_forward() -> None:
    """Queued behind runs that hold every sequence, its client leaves: it never ran, so
    it counts nothing, however many forwards the others take meanwhile (issue 52)."""
    cache = Cache(4)
    engine = Engine(cache, PromptCache(0), max_queue=4)  # type: ignore[arg-type]
    release = threading.Event()
    long = [submit(engine, gate(release)) for _ in range(4)]
    while engine.active < 4:
        threading.Event().wait(0.001)
    run, got = submit(engine, gate(release))
    before = len(cache.steps)
    run.cancel()
    assert got.ended.wait(30) and got == [None]
    while len(cache.steps) < before + 5:  # the others go on stepping
        threading.Event().wait(0.001)
    release.set()
    for _, ended in long:
        assert ended.ended.wait(30)
    assert run.forwards_after_cancel == 0
    engine.close()
