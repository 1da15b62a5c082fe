"""PromptCache: picks the saved state with the longest usable prefix; LRU by bytes."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from ffwd.engine.core.prompt_cache import PromptCache
from ffwd.fill import common_prefix


@dataclass(frozen=True)
class State:
    ids: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return 10 * len(self.ids)


class FakeBackend:
    def __init__(self, ids: tuple[int, ...] = (), free: bool = True) -> None:
        self.cached_ids = ids
        self.trims_freely = free
        self.loaded: list[tuple[int, ...]] = []

    def save_state(self) -> State:
        return State(self.cached_ids)

    def load_state(self, state: State) -> None:
        self.cached_ids = state.ids
        self.loaded.append(state.ids)


def test_common_prefix() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert common_prefix([], [1]) == 0
    assert common_prefix([1, 2], [1, 2]) == 2


def test_switches_to_the_conversation_that_matches_and_keeps_the_live_one() -> None:
    cache = PromptCache(10_000)
    b = FakeBackend((1, 2, 3, 4, 5))  # conversation A is live
    cache._store(State((7, 8, 9, 10)))  # conversation B was saved earlier
    cache.select(b, [7, 8, 9, 10, 11, 12])  # B's next turn
    assert b.cached_ids == (7, 8, 9, 10) and cache.stats.loads == 1
    assert [s.ids for s in cache._entries.values()] == [(1, 2, 3, 4, 5)]
    cache.select(b, [1, 2, 3, 4, 5, 6])  # and back to A
    assert b.cached_ids == (1, 2, 3, 4, 5)
    assert [s.ids for s in cache._entries.values()] == [(7, 8, 9, 10)]


def test_live_cache_wins_when_it_is_as_good() -> None:
    cache = PromptCache(10_000)
    b = FakeBackend((1, 2, 3))
    cache._store(State((1, 2, 3, 9)))
    cache.select(b, [1, 2, 3, 4])
    assert b.loaded == []


def test_the_last_prompt_id_is_never_counted() -> None:
    cache = PromptCache(10_000)
    b = FakeBackend((5,))
    cache._store(State((1, 2)))
    cache.select(b, [1, 2])  # usable prefix is 1, not 2
    assert b.loaded == [(1, 2)]
    b2 = FakeBackend((5,))
    c2 = PromptCache(10_000)
    c2._store(State((1,)))
    c2.select(b2, [1])  # usable 0: nothing to gain
    assert b2.loaded == []


def test_partial_prefix_needs_a_freely_trimmable_cache() -> None:
    for free, expect in ((True, [(1, 2, 3, 9, 9)]), (False, [])):
        cache = PromptCache(10_000)
        b = FakeBackend((5, 5), free=free)
        cache._store(State((1, 2, 3, 9, 9)))
        cache.select(b, [1, 2, 3, 4])
        assert b.loaded == expect
    # An exact prefix is usable on any cache.
    cache = PromptCache(10_000)
    b = FakeBackend((5, 5), free=False)
    cache._store(State((1, 2)))
    cache.select(b, [1, 2, 3])
    assert b.loaded == [(1, 2)]


def test_lru_eviction_by_bytes() -> None:
    cache = PromptCache(100)  # 10 ids in all
    for i in range(4):
        cache._store(State(tuple(range(i * 10, i * 10 + 4))))
    assert len(cache) == 2 and cache.nbytes == 80 and cache.stats.evictions == 2
    assert [s.ids[0] for s in cache._entries.values()] == [20, 30]
    cache._store(State(tuple(range(11))))  # larger than the whole budget: not kept
    assert len(cache) == 2


def test_zero_bytes_disables() -> None:
    cache = PromptCache(0)
    b = FakeBackend((1, 2))
    cache._store(State((3, 4)))
    cache.select(b, [3, 4, 5])
    assert b.loaded == []
    with pytest.raises(ValueError, match="bytes"):
        PromptCache(-1)


def test_a_conversation_switch_saves_the_live_state() -> None:
    cache = PromptCache(10_000)
    a = tuple(range(100, 160))
    b = FakeBackend(a)
    cache.select(b, [1, 2, 3])  # another conversation: A would be thrown away
    assert [s.ids for s in cache._entries.values()] == [a]
    b.cached_ids = (1, 2, 3, 4)  # ...B ran
    cache.select(b, [*a, 7])  # A's next turn comes back
    assert b.cached_ids == a and [s.ids for s in cache._entries.values()] == [(1, 2, 3, 4)]


def test_the_next_turn_of_the_same_conversation_saves_nothing() -> None:
    cache = PromptCache(10_000)
    live = tuple(range(100, 160))
    b = FakeBackend(live)
    cache.select(b, [*live[:-3], 9, 9, 9, 9])  # the reply's last ids re-tokenised
    assert len(cache) == 0
