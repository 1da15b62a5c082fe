"""EchoSource: propose spans copied from earlier in the session.

Every id that enters the sequence (prompt, sampled, injected) is indexed by the
k-gram that ends at it. When the last k ids occurred before, the source walks
forward from those earlier occurrences, nearest first, and keeps a token only
while every occurrence still being walked agrees on it. Where they disagree the
history has forked: the span stops there and is marked ``branch_stop``. Strong
evidence wins over weak: when some occurrences match the present at least
`STRONG` ids back, only those that match furthest back are walked
(`strongest`), so a passage quoted word for word is not stopped by a short,
unrelated match that forks from it.

Worked example (k=2)::

    history   a b c d  a b c e  a b
    position  0 1 2 3  4 5 6 7  8 9

    The tail "a b" ends at 9 and occurred ending at 5 and at 1 (nearest first).
    Continuations: 5 -> c e a b ..., 1 -> c d a b ...
    Both say "c", then they fork (e vs d): propose [c], branch_stop=True.
    (The session rejects spans shorter than 2, so nothing is injected here.)
    The run: the history before 9 matches the nearest occurrence's context
    back to "c e" vs "c d" (ids 7 and 3 differ), so run = 2 ("a b").

A lookup hashes one k-gram and walks at most `max_span` steps over at most
`max_candidates` occurrences, and measures runs (how far back the history
matches an occurrence's context: at most `STRONG` ids for each, `RUN_CAP` for
the one walked), so a push costs O(k + span) whatever the length of the
history. The index keeps `index_max`
ids; older ones are forgotten.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from ffwd.fill.proposal import Proposal, TokenView

# The run a proposal reports is measured this far back at most: far enough to tell a
# request sent again (its whole prompt matches) from a long quote (`ffwd.fill.spans`).
RUN_CAP = 256
# A match this long (ids) is strong evidence: occurrences that match the present less far
# back do not veto its copy where they fork (llama.cpp's ngram-mod keys on 24 ids).
STRONG = 16


def strongest(runs: Sequence[int], longer: Callable[[int], int] | None = None,
              strong: int = STRONG) -> list[int]:
    """Which candidate occurrences (by their runs, measured at most `strong` back) a copy
    walks: all of them, unless some match the present at least `strong` ids back; then
    only those, and of those (when `longer` measures candidate i's run further back) the
    ones that match furthest: the longest context is the most specific one, so a quote
    that went its own way last time is not overruled by the text it quoted.

    >>> strongest([3, 16, 5, 16]), strongest([3, 5])
    ([1, 3], [0, 1])
    >>> strongest([3, 16, 5, 16], longer=lambda i: (0, 30, 0, 64)[i])
    [3]
    """
    best = [i for i, r in enumerate(runs) if r >= strong]
    if not best:
        return list(range(len(runs)))
    if longer is None or len(best) == 1:
        return best
    full = {i: longer(i) for i in best}
    top = max(full.values())
    return [i for i in best if full[i] == top]


@dataclass(frozen=True, slots=True)
class EchoConfig:
    """k: anchor length; max_span: longest walk; max_candidates: occurrences kept
    per k-gram (nearest first); index_max: ids the index remembers. The values
    a server uses are `ffwd.config.FillConfig`'s (`echo_config()`)."""

    k: int
    max_span: int
    max_candidates: int
    index_max: int

    def __post_init__(self) -> None:
        if self.k < 2:
            raise ValueError(f"echo k={self.k}: expected an integer >= 2")
        if self.max_span < 2:
            raise ValueError(f"echo max_span={self.max_span}: expected an integer >= 2")
        if self.max_candidates < 1:
            raise ValueError(f"echo max_candidates={self.max_candidates}: expected >= 1")
        if self.index_max < self.k + 1:
            raise ValueError(f"echo index_max={self.index_max}: expected > k={self.k}")


class EchoSource:
    """k-gram index over the session's history that proposes verify spans."""

    name = "echo"
    # The source keeps its own copy of the history, so it reads only the
    # session's last id.
    window_needed = 1

    def __init__(
        self,
        config: EchoConfig,
        prompt_ids: Sequence[int],
        delimiters: Iterable[int] = frozenset(),
    ) -> None:
        self.config = config
        self.delimiters = frozenset(delimiters)
        self._hist: list[int] = []  # ids from absolute position `_base` on
        self._base = 0
        self._index: dict[tuple[int, ...], deque[int]] = {}
        self.observe(prompt_ids)

    @property
    def length(self) -> int:
        """Ids observed so far (forgotten ones included)."""
        return self._base + len(self._hist)

    @property
    def oldest(self) -> int:
        """Absolute position of the oldest id still remembered."""
        return max(self._base, self.length - self.config.index_max)

    def at(self, pos: int) -> int:
        return self._hist[pos - self._base]

    def observe(self, ids: Sequence[int]) -> None:
        k = self.config.k
        hist = self._hist
        for tok in ids:
            hist.append(tok)
            if len(hist) >= k:
                key = tuple(hist[-k:])
                bucket = self._index.get(key)
                if bucket is None:
                    # +1: the newest entry is the present tail itself, never a candidate.
                    bucket = self._index[key] = deque(maxlen=self.config.max_candidates + 1)
                bucket.appendleft(self._base + len(hist) - 1)
        # Forget in batches so that trimming the front of the list stays
        # amortised O(1) per id.
        if len(hist) > self.config.index_max + max(1024, self.config.index_max // 4):
            self._forget(len(hist) - self.config.index_max)

    def _forget(self, n: int) -> None:
        """Drop the oldest n ids and their k-gram entries."""
        # Invariant: the index holds only k-grams that lie wholly inside
        # `_hist`, so the keys of the ones ending in the dropped stretch can
        # still be rebuilt here.
        k = self.config.k
        hist = self._hist
        for i in range(k - 1, n + k - 1):
            key = tuple(hist[i - k + 1 : i + 1])
            bucket = self._index.get(key)
            pos = self._base + i
            # The oldest occurrence sits at the right end of its bucket.
            while bucket and bucket[-1] <= pos:
                bucket.pop()
            if bucket is not None and not bucket:
                del self._index[key]
        del hist[:n]
        self._base += n

    def propose(self, view: TokenView) -> Proposal | None:
        k = self.config.k
        end = self.length - 1  # position of the id just observed
        if end + 1 < k:
            return None
        key = tuple(self._hist[-k:])
        bucket = self._index.get(key)
        if bucket is None:
            return None
        oldest = self.oldest + k - 1
        starts = [q + 1 for q in bucket if oldest <= q < end]
        if len(starts) > 1:  # a long match outweighs short ones that fork from it
            runs = [self._run(end, s, STRONG) for s in starts]
            keep = strongest(runs, lambda i: self._run(end, starts[i]))
            starts = [starts[i] for i in keep]
        if not starts:
            return None
        starts_0 = starts[0]  # the nearest occurrence kept: its context measures the run
        # The walk stops at max_span; the session applies the budget so that
        # it can count the cut.
        limit = self.config.max_span
        # An occurrence whose continuation reaches the present drops out there, unless the
        # history already repeats with its period (a loop): then it goes on as the span does.
        loops = {s for s in starts if end + 1 - s <= limit
                 and self._run(end, s, end + 1 - s) == end + 1 - s}
        span: list[int] = []
        branch_stop = False
        while len(span) < limit:
            j = len(span)
            starts = [s for s in starts if s + j <= end or s in loops]
            if not starts:
                break
            nxt = self._next(starts[0] + j, span)
            if any(self._next(s + j, span) != nxt for s in starts[1:]):
                branch_stop = True
                break
            span.append(nxt)
            if nxt in self.delimiters:
                break
        if not span:
            return None
        run = self._run(end, starts_0)
        return Proposal(tuple(span), "verify", "echo", branch_stop=branch_stop, run=run)

    def _next(self, pos: int, span: Sequence[int]) -> int:
        """The id at absolute position `pos`: the history's, or past the present the span's
        (the span follows the id just observed)."""
        return self.at(pos) if pos < self.length else span[pos - self.length]

    def _run(self, end: int, start: int, cap: int = RUN_CAP) -> int:
        """How many ids before `end` (inclusive) equal those before `start` (exclusive),
        counting at most `cap`."""
        low = self.oldest
        n = 0
        while n < cap and start - 1 - n >= low and self.at(end - n) == self.at(start - 1 - n):
            n += 1
        return n
