"""One proposal per step from every source, and when a failing copy source sits out.

Every step the session asks all its sources. The first ``assert`` proposal
(strict rows, then the grammar) is the *head*: its ids are determined. Each
copy (echo, recall, a caller's verify source) was proposed from the same
point, so it can extend the head only where it starts with the head's ids
(`extend`); one that contradicts the head drops out. Of the copies' tails the
one with the most expected kept ids wins (`expected_kept`, `pick`): a long
copy whose match reaches far back (high acceptance in its run buckets) beats a
short or fresh one, and between equals the earlier source wins. The result is
one span: the head, held under assert, then the winning tail, verified.

Worked example: the grammar forces ``5 6`` after the sampled id; echo proposes
``5 6 7 8`` (a fresh match, 0.5 per id) and recall ``5 6 7 8 9 1 2``
(a long match, 0.9 per id)::

    extend((5, 6), (5, 6, 7, 8))        -> (7, 8)         expected kept 0.5 + 0.25 = 0.75
    extend((5, 6), (5, 6, 7, 8, 9, 1, 2)) -> (7, 8, 9, 1, 2)  expected kept 3.69
    pick -> recall: the step proposes 5 6 7 8 9 1 2, the first two asserted.

`Backoff` pauses a copy source whose verified spans keep failing, as
llama.cpp's ngram-mod empties its table after five drafts in a row that kept
under a quarter of their ids. Everything here is pure (standard library only).
"""

from __future__ import annotations

from collections.abc import Sequence


def extend(head: Sequence[int], copy: Sequence[int]) -> tuple[int, ...] | None:
    """What `copy` adds past `head` (both proposed from the same point); None when the
    copy contradicts the head or adds nothing.

    >>> extend((5, 6), (5, 6, 7)), extend((5, 6), (5, 9, 7)), extend((), (1, 2))
    ((7,), None, (1, 2))
    """
    n = len(head)
    if len(copy) <= n or tuple(copy[:n]) != tuple(head):
        return None
    return tuple(copy[n:])


def expected_kept(rates: Sequence[float]) -> float:
    """Expected leading ids kept of a span whose position j is kept with chance
    ``rates[j]`` once the ones before it were: ``P[1] + ... + P[n]``.

    >>> expected_kept([0.5, 0.5]), expected_kept([1.0, 1.0, 0.0])
    (0.75, 2.0)
    """
    reach, total = 1.0, 0.0
    for q in rates:
        reach *= q
        total += reach
    return total


def pick(rates: Sequence[Sequence[float]]) -> int | None:
    """The index of the span (given by its per-position rates) with the most expected
    kept ids; ties go to the earlier one; None for no spans.

    >>> pick([[0.5, 0.5], [0.9, 0.9, 0.9, 0.9, 0.9]]), pick([[0.9], [0.9]]), pick([])
    (1, 0, None)
    """
    best, score = None, -1.0
    for i, r in enumerate(rates):
        e = expected_kept(r)
        if e > score:
            best, score = i, e
    return best


class Backoff:
    """Pause a copy source whose verified spans keep failing.

    After `streak` verifies in a row that each kept less than `low` of the
    positions they tested, the source sits out the next `pause` sampled ids;
    each further trip doubles the pause (up to `longest`), and a verify that
    keeps at least `low` resets both. Time is the session's count of sampled ids.

    >>> b = Backoff(streak=2, pause=3)
    >>> b.verified(4, 0, now=10), b.verified(5, 1, now=11)  # the second in a row trips
    (False, True)
    >>> [b.paused(now) for now in (12, 14, 15)]  # out for the next 3 sampled ids
    [True, True, False]
    >>> b.verified(4, 0, now=20), b.verified(4, 0, now=21), b.paused(26)  # 6 now
    (False, True, True)
    """

    def __init__(self, streak: int = 5, low: float = 0.25, pause: int = 16,
                 longest: int = 1024) -> None:
        self.streak, self.low, self.first, self.longest = streak, low, pause, longest
        self._misses = 0
        self._pause = pause
        self._until = -1  # the last sampled id it sits out

    def paused(self, now: int) -> bool:
        """Whether the source sits out the sampled id number `now`."""
        return now <= self._until

    def verified(self, tested: int, kept: int, now: int) -> bool:
        """A verify of this source tested `tested` ids and kept `kept`; True when that
        trips the backoff (the source is paused from `now` on)."""
        if tested <= 0:
            return False
        if kept >= self.low * tested:
            self._misses, self._pause = 0, self.first
            return False
        self._misses += 1
        if self._misses < self.streak:
            return False
        self._misses = 0
        self._until = now + self._pause
        self._pause = min(2 * self._pause, self.longest)
        return True
