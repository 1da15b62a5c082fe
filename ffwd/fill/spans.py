"""How much of a verify proposal to forward, and how to chunk an assert span.

A plain decode step forwards the sampled id t alone: it costs ``c(1)`` and
yields one new id. A verify step forwards t with the first m proposed ids and
yields ``1 + a`` ids, where a is the number of leading proposed ids the model
agrees with. Both are priced with the backend's cost curve ``c(m)`` (ms for
one forward of m ids) and the source's acceptance rates ``q[j]`` (the chance
that position j is accepted once positions 0..j-1 were). With
``P[j] = q[0] * ... * q[j-1]`` (the chance that the first j are all kept)::

    expected ids   E(m) = 1 + P[1] + ... + P[m]
    combined cost  C(m) = c(1 + m) + undo            (t and the span together)
    probe cost     C'(m) = c(1) + q[0] * c(m) + undo  (t alone; the span only
                                                       when position 0 is kept)

`choose_span` takes the plan with the most ids per ms, and declines (length 0:
a plain step) unless some plan beats ``1 / c(1)``. So the span length follows
the evidence: a copy whose match reaches far back reads high rates and is
forwarded long at once, as far as the cost says pays; a fresh match, short. The undo cost prices a
rejection: nothing for a cache that rewinds, and for one that cannot
(recurrent state) a checkpoint before the span, a restore after a rejection,
and a forward of the kept ids again.

Worked example, ``c(m) = 8 + 2m`` ms (c(1) = 10, a plain step makes 0.100
ids/ms) and acceptance 0.9 at every position::

    m   E(m)   C(m)  ids/ms
    1   1.90   12    0.158
    4   4.10   18    0.228
    7   5.70   24    0.237   <- chosen: forward t and 7 proposed ids together
    8   6.13   26    0.236
    16  8.33   42    0.198

With acceptance 0.2 no plan beats the plain step (the best, a probe with
m = 2, expects 1.24 ids for 12.4 ms: 0.100 ids/ms), so the proposal is
declined.

Everything here is a pure function of small tables (standard library only).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Cost = Callable[[int], float]  # ms for one forward of m ids

# Acceptance is estimated by the copy's run length (`run_bucket`: 0, 1, 2-3, 4-7,
# 8-15, 16-31, 32-63, 64-127, 128-255, 256 and more ids already matching the copied
# passage), not by the position in the span: a copy that has gone on for long tends to go
# on. The prior a request starts from, per source and run bucket (the last value holds
# past the end), follows `python -m tools.acceptance --k 3 --candidates 8 --max-span 32
# --limit 3` on the embedded model: kept at runs 2-3, 4-7, 8-15, 16-31, 32-63, 64+: 0.63,
# 0.75, 0.90, 0.95, 0.99, 0.99 pooled, 0.58, 0.64, 0.75 on tool requests. It starts
# between the two, as an optimistic start costs forwards before it learns. Recall
# indexes whole requests, so its run counts the prompt: 256 ids matching an earlier
# request right up to the present is that request again (a repeat, the same file
# re-read), whose greedy reply is the earlier one id for id on an exact attention path;
# it starts at 0.999 there, so a repeat's first span is as long as the price says. These
# are only where a server starts: what it sees moves them (`SharedAcceptance`), and each
# request's own evidence lifts or lowers them (`AcceptanceBook`).
PRIORS: dict[str, tuple[float, ...]] = {
    "echo": (0.5, 0.5, 0.55, 0.65, 0.8, 0.9, 0.95, 0.97),
    "recall": (0.4, 0.4, 0.45, 0.55, 0.7, 0.85, 0.9, 0.99, 0.995, 0.999),
}
DEFAULT_PRIOR: tuple[float, ...] = (0.5,)
RUN_BUCKETS = 10


def prior_for(origin: str) -> tuple[float, ...]:
    return PRIORS.get(origin, DEFAULT_PRIOR)


def run_bucket(run: int) -> int:
    """The bucket of a run length: 0, 1, 2-3, 4-7, ... 128-255, 256 and more.

    >>> [run_bucket(r) for r in (0, 1, 2, 3, 4, 9, 40, 100, 200, 500)]
    [0, 1, 2, 2, 3, 4, 6, 7, 8, 9]
    """
    return min(RUN_BUCKETS - 1, max(0, run).bit_length())


@dataclass(frozen=True, slots=True)
class Undo:
    """What a rejected verify span costs beyond its forward.

    before: ms to checkpoint before the span (caches that cannot rewind).
    after: ms to restore or rewind once some ids were rejected.
    replay: whether the kept ids must be forwarded again after a restore.
    """

    before: float = 0.0
    after: float = 0.0
    replay: bool = False


@dataclass(frozen=True, slots=True)
class SpanChoice:
    """The chosen plan: forward `length` proposed ids (0 = decline), probing
    position 0 alone first when `probe`. `expected_ids` counts the sampled id's
    successor too; `expected_ms` is what the plan is expected to cost."""

    length: int
    probe: bool
    expected_ids: float
    expected_ms: float
    plain_ms: float

    @property
    def rate(self) -> float:
        """Expected ids per ms."""
        return self.expected_ids / self.expected_ms


def choose_span(cost: Cost, accept: Sequence[float], n: int, undo: Undo = Undo()) -> SpanChoice:
    """The length (0..n) and mode that maximise expected ids per ms (see the module doc).

    `accept[j]` is the acceptance chance at position j (the last value repeats
    past the end). Ties go to the shorter plan; declining wins unless a plan
    is strictly faster than a plain step.
    """
    plain = cost(1)
    best = SpanChoice(0, False, 1.0, plain, plain)
    reach = 1.0  # P[j]: first j ids kept
    gain = 1.0  # E(m)
    undo_c = undo_p = 0.0  # expected undo cost so far, combined and probe
    for m in range(1, n + 1):
        q = _rate(accept, m - 1)
        # Exactly m-1 kept, then position m-1 rejected: undo, replaying what was kept.
        miss = reach * (1.0 - q)
        undo_c += miss * (undo.after + (cost(m) if undo.replay else 0.0))
        if m > 1:  # a probe never forwards a span whose position 0 failed
            undo_p += miss * (undo.after + (cost(m - 1) if undo.replay else 0.0))
        reach *= q
        gain += reach
        q0 = _rate(accept, 0)
        plans = (
            (False, undo.before + cost(1 + m) + undo_c),
            (True, plain + q0 * (undo.before + cost(m)) + undo_p),
        )
        for probe, ms in plans:
            if probe and m < 2:
                continue  # probing one id is a plain step twice
            if gain * best.expected_ms > best.expected_ids * ms:
                best = SpanChoice(m, probe, gain, ms, plain)
    return best


def _rate(accept: Sequence[float], j: int) -> float:
    if not accept:
        return 0.0
    return min(1.0, max(0.0, accept[min(j, len(accept) - 1)]))


# The span lengths a cost curve is measured at: up to the longest span fill forwards
# (`FillConfig.max_span`, 64), so a long copy is priced on a timed forward.
POINTS = (1, 2, 4, 8, 16, 32, 64)


def chunk_sizes(n: int, cost: Cost, limit: int, points: Sequence[int] = POINTS) -> list[int]:
    """Split a forward of n ids into chunks (each at most `limit`) of least total cost.

    Chunk sizes are drawn from the measured `points` and n itself, since the
    curve is only known there; on a curve whose cost per id falls, that is one
    chunk of n (or of `limit`).

    >>> chunk_sizes(5, lambda m: 10 + m, 8)
    [5]
    >>> chunk_sizes(5, lambda m: {1: 10, 2: 11, 4: 40, 5: 50}.get(m, 99), 8)
    [1, 2, 2]
    """
    sizes = sorted({s for s in (*points, n) if 1 <= s <= min(n, limit)})
    best: list[tuple[float, int]] = [(0.0, 0)]  # (total ms, last chunk) for i ids
    for i in range(1, n + 1):
        best.append(min((best[i - s][0] + cost(s), s) for s in sizes if s <= i))
    out: list[int] = []
    i = n
    while i > 0:
        out.append(best[i][1])
        i -= best[i][1]
    return sorted(out)


class Acceptance:
    """A running estimate of one source's acceptance in each run bucket.

    A proposed id at span position j whose copy had run r ids before the span
    falls in bucket ``run_bucket(r + j)``. Each bucket keeps decayed counts of
    trials and acceptances, blended with a prior worth `weight` trials, so a
    new request starts from the prior and a falling acceptance shows within a
    few observations. With a `base` (what the server learned across requests,
    `SharedAcceptance`) the prior is the base's current estimate, and every
    observation also goes to the base.

    >>> a = Acceptance(prior=(0.5, 0.8), weight=2.0, decay=1.0)
    >>> a.record(tested=3, accepted=1, run=0)  # run 0 kept, run 1 rejected
    >>> [round(r, 3) for r in a.rates(run=0, n=3)]
    [0.667, 0.533, 0.8]
    >>> b = Acceptance(prior=(0.5,), weight=2.0, decay=1.0, base=a)
    >>> [round(r, 3) for r in b.rates(run=0, n=3)]  # starts where `a` stands
    [0.667, 0.533, 0.8]
    """

    def __init__(
        self, prior: Sequence[float], *, weight: float = 4.0, decay: float = 0.9,
        base: Acceptance | None = None,
    ) -> None:
        if not prior or weight <= 0 or not 0 < decay <= 1:
            raise ValueError("Acceptance: need a prior, weight > 0, 0 < decay <= 1")
        self._prior = [_rate(prior, j) for j in range(RUN_BUCKETS)]
        self._weight = weight
        self._decay = decay
        self._base = base
        self._hits = [0.0] * RUN_BUCKETS
        self._trials = [0.0] * RUN_BUCKETS
        self._lock = threading.Lock()  # a server's base is shared by concurrent requests

    def table(self) -> list[float]:
        """The estimate in each run bucket."""
        prior = self._base.table() if self._base is not None else self._prior
        w = self._weight
        with self._lock:
            return [(h + w * p) / (t + w)
                    for h, t, p in zip(self._hits, self._trials, prior, strict=True)]

    def rates(self, run: int = 0, n: int = RUN_BUCKETS) -> list[float]:
        """The chance that each of `n` span positions is kept, after a run of `run`."""
        table = self.table()
        return [table[run_bucket(run + j)] for j in range(n)]

    def record(self, tested: int, accepted: int, run: int = 0) -> None:
        """`tested` positions were checked and the first `accepted` were kept."""
        for j in range(min(tested, accepted + 1)):
            self.observe(run + j, j < accepted)

    def observe(self, run: int, kept: bool) -> None:
        """An id proposed after a run of `run` matching ids was or was not kept."""
        k = run_bucket(run)
        with self._lock:
            self._trials[k] = self._trials[k] * self._decay + 1.0
            self._hits[k] = self._hits[k] * self._decay + (1.0 if kept else 0.0)
        if self._base is not None:
            self._base.observe(run, kept)


# A server's estimate remembers about 1 / (1 - decay) observations per bucket: enough to
# tell 0.99 from 0.999, which decides whether a long copy is forwarded in 20 ids or 64.
SERVER_DECAY = 0.995


class SharedAcceptance:
    """What one server learned about its copy sources across requests: per origin, a
    slowly decaying `Acceptance` from `PRIORS` on, the base of every request's own
    estimate (`AcceptanceBook`). Safe to use from several threads."""

    def __init__(self, *, weight: float = 4.0, decay: float = SERVER_DECAY) -> None:
        self._weight, self._decay = weight, decay
        self._by_origin: dict[str, Acceptance] = {}
        self._lock = threading.Lock()

    def get(self, origin: str) -> Acceptance:
        with self._lock:
            est = self._by_origin.get(origin)
            if est is None:
                est = self._by_origin[origin] = Acceptance(
                    prior_for(origin), weight=self._weight, decay=self._decay)
            return est

    def tables(self) -> dict[str, list[float]]:
        """Each origin's estimate per run bucket (for `ffwd info` and the tests)."""
        with self._lock:
            items = list(self._by_origin.items())
        return {origin: est.table() for origin, est in items}


class AcceptanceBook:
    """A request's acceptance estimates, one per verify source (on the server's, when
    given), and the declined proposal being followed.

    A declined proposal still teaches: as the model samples, each id is
    compared with the declined span's next position (`sampled`), exactly what
    a verify forward would have asked. Only one is followed at a time, and a
    verified or injected span ends it, so no position is counted twice.
    """

    def __init__(self, shared: SharedAcceptance | None = None) -> None:
        self.shared = shared
        self.estimates: dict[str, Acceptance] = {}
        self._shadow: tuple[str, tuple[int, ...], int] | None = None  # origin, ids, run
        self._pos = 0  # the followed proposal's next position

    def rates(self, origin: str, run: int = 0, n: int = RUN_BUCKETS) -> list[float]:
        return self._get(origin).rates(run, n)

    def verified(self, origin: str, tested: int, accepted: int, run: int = 0) -> None:
        self._shadow = None
        self._get(origin).record(tested, accepted, run)

    def declined(self, origin: str, ids: Sequence[int], run: int = 0) -> None:
        if self._shadow is None and ids:
            self._shadow, self._pos = (origin, tuple(ids), run), 0

    def sampled(self, token_id: int) -> None:
        """The model sampled `token_id`: score the followed proposal's next position."""
        if self._shadow is None:
            return
        origin, ids, run = self._shadow
        kept = token_id == ids[self._pos]
        self._get(origin).observe(run + self._pos, kept)
        self._pos += 1
        if not kept or self._pos == len(ids):
            self._shadow = None

    def stop_following(self) -> None:
        self._shadow = None

    def _get(self, origin: str) -> Acceptance:
        est = self.estimates.get(origin)
        if est is None:
            base = self.shared.get(origin) if self.shared is not None else None
            est = self.estimates[origin] = Acceptance(prior_for(origin), base=base)
        return est
