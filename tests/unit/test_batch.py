"""The batcher on a scripted forward: many threads, one forward per step, each its own rows.

The scripted forward (`Cache`) keeps each sequence's positions as a cache would and
answers row j of a part with (sequence, position), so a row handed to the wrong
sequence, an id forwarded twice or one lost shows in the rows or the positions.
"""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest

from ffwd.engine.batch import Batcher, Part

LIMIT = 64


class Cache:
    """A forward that records every step and keeps each sequence's ids."""

    def __init__(self, fail_seq: int | None = None) -> None:
        self.ids: dict[int, list[int]] = {}
        self.steps: list[list[Part]] = []
        self.fail_seq = fail_seq

    def __call__(self, parts: list[Part]) -> list[np.ndarray]:
        assert sum(len(p.ids) for p in parts) <= LIMIT
        assert [p.seq for p in parts] == sorted(p.seq for p in parts)  # llama.cpp's order
        assert len({p.seq for p in parts}) == len(parts)  # one part per sequence
        if self.fail_seq is not None and any(p.seq == self.fail_seq for p in parts):
            raise RuntimeError("the forward failed")
        self.steps.append(parts)
        out = []
        for p in parts:
            have = self.ids.setdefault(p.seq, [])
            start = len(have)
            have.extend(p.ids)
            rows = range(start, len(have)) if p.all_rows else [len(have) - 1]
            out.append(np.array([[p.seq, pos] for pos in rows], dtype=np.float32))
        return out


def run_sequence(batcher: Batcher, seq: int, rng: random.Random, sent: list[int],
                 failures: list[str]) -> None:
    """A sequence's thread: prompt chunks, spans with every row, steps with the last."""
    try:
        for _ in range(rng.randint(3, 12)):
            kind = rng.choice(["prefill", "rows", "last"])
            n = rng.randint(1, 200) if kind == "prefill" else rng.randint(1, 8)
            ids = [rng.randint(0, 99) for _ in range(n)]
            got = batcher.submit(seq, ids, rows=kind == "rows", split=kind == "prefill")
            start = len(sent)
            sent.extend(ids)
            want = range(start, len(sent)) if kind == "rows" else [len(sent) - 1]
            if got.rows.tolist() != [[seq, pos] for pos in want]:
                failures.append(f"sequence {seq}: rows {got.rows.tolist()} for {list(want)}")
    finally:
        batcher.leave(seq)


def test_sixteen_sequences_get_exactly_their_own_rows() -> None:
    cache = Cache()
    batcher = Batcher(cache, limit=LIMIT, budget=16, wait_s=0.002)
    rng = random.Random(7)
    sent: dict[int, list[int]] = {seq: [] for seq in range(16)}
    failures: list[str] = []
    threads = [threading.Thread(target=run_sequence,
                                args=(batcher, seq, random.Random(rng.random()), sent[seq],
                                      failures)) for seq in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads) and failures == []
    # Every id reached its own sequence's cache once, in order.
    assert {seq: cache.ids.get(seq, []) for seq in sent} == sent
    stats = batcher.stats
    assert stats.steps == len(cache.steps) == sum(stats.by_size.values())
    assert sum(size * n for size, n in stats.by_size.items()) == sum(len(s) for s in cache.steps)


def test_one_forward_carries_every_waiting_sequence() -> None:
    cache = Cache()
    batcher = Batcher(cache, limit=LIMIT, wait_s=1000.0)  # a step waits for every sequence
    counts: dict[int, int] = {}

    def decode(seq: int) -> None:
        steps = 0
        for i in range(10):
            steps += batcher.submit(seq, [i], rows=False).steps
        counts[seq] = steps
        batcher.leave(seq)

    for seq in range(3):
        batcher.enter(seq)
    threads = [threading.Thread(target=decode, args=(seq,)) for seq in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert counts == {0: 10, 1: 10, 2: 10}  # each sequence: one forward per call
    assert batcher.stats.by_size == {3: 10}  # ... and every forward carried all three


def test_a_lone_sequence_forwards_at_once() -> None:
    batcher = Batcher(Cache(), limit=LIMIT, wait_s=1000.0)
    done = threading.Event()

    def alone() -> None:
        for i in range(5):
            batcher.submit(0, [i, i], rows=True)
        done.set()

    threading.Thread(target=alone, daemon=True).start()
    assert done.wait(30)  # never waits for a sequence that is not there


def test_a_long_prompt_goes_in_budget_chunks_beside_a_decoding_sequence() -> None:
    cache = Cache()
    batcher = Batcher(cache, limit=LIMIT, budget=16, wait_s=0.002)
    decoding = threading.Event()
    prefilled = threading.Event()

    def decode() -> None:
        i = 0
        while not prefilled.is_set() or i < 3:
            batcher.submit(0, [i % 50], rows=False)
            decoding.set()
            i += 1
        batcher.leave(0)

    t = threading.Thread(target=decode)
    t.start()
    assert decoding.wait(30)
    got = batcher.submit(1, list(range(200)), rows=False, split=True)
    prefilled.set()
    batcher.leave(1)
    t.join(30)
    chunks = [len(p.ids) for step in cache.steps for p in step if p.seq == 1]
    assert sum(chunks) == 200 and max(chunks) <= 16 and got.steps == len(chunks)
    assert got.rows.tolist() == [[1, 199]]  # the prompt's last row only
    # Two steps after the last decoding one, a prompt alone goes in chunks of the limit.
    assert batcher.submit(3, list(range(2 * LIMIT)), rows=False, split=True).steps > 1
    batcher.leave(3)
    alone = batcher.submit(2, list(range(150)), rows=False, split=True)
    assert alone.steps == 3


def test_a_failed_forward_fails_its_requests_and_the_next_steps_go_on() -> None:
    cache = Cache(fail_seq=3)
    batcher = Batcher(cache, limit=LIMIT)
    with pytest.raises(RuntimeError, match="the forward failed"):
        batcher.submit(3, [1, 2], rows=True)
    batcher.leave(3)
    assert batcher.submit(0, [1, 2], rows=True).rows.tolist() == [[0, 0], [0, 1]]
    with pytest.raises(ValueError, match="at most 64"):
        batcher.submit(0, list(range(65)), rows=False)
