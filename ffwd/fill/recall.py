"""Recall: what earlier requests wrote, as a second copy source across requests.

Agents repeat themselves from one request to the next: the same call with the
same arguments, the same path, the same code. Echo (`ffwd.fill.echo`) sees one
request; `RecallIndex` keeps the outputs of earlier ones, per tenant (one API
key's text never proposes ids to another's request), indexed by the k-gram
that ends at each id, bounded in bytes (the least recently used output goes
first). A request gets a `RecallSource` over its tenant's outputs: when its
last k ids occurred in one, it proposes the continuation (policy ``verify``,
origin ``recall``), kept only while every occurrence being walked agrees, as
echo does, with the copy's run (how far back the request matches the output
before that point) as its evidence.

Worked example (k=2)::

    earlier output   7 1 2 3 4 5
    this request     ... 9 1 2          tail "1 2" ended at 2 in the output
    proposal         3 4 5  (run 2: "1 2"; 9 vs 7 before it differ)

A lookup hashes one k-gram and walks at most `max_span` steps over at most
`max_candidates` occurrences: O(k + span) whatever the index holds.
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from ffwd.fill.echo import RUN_CAP
from ffwd.fill.proposal import Proposal, TokenView

# What one indexed id costs in memory (its k-gram key and dict slot, its entry, its
# place in the stored output), measured with tracemalloc (tests/unit/test_fill_recall.py).
BYTES_PER_ID = 256


@dataclass(frozen=True, slots=True)
class RecallConfig:
    """k: anchor length; max_span: longest walk; max_candidates: occurrences kept per
    k-gram; max_bytes: what the index may hold in all (0: off)."""

    k: int
    max_span: int
    max_candidates: int
    max_bytes: int


class RecallIndex:
    """Earlier requests' outputs, per tenant, k-gram indexed, LRU-bounded in bytes.

    Shared by the requests of one server (one model): `add` after each request,
    `source` for each new one. Safe to use from several threads.
    """

    def __init__(self, config: RecallConfig) -> None:
        self.config = config
        self._docs: OrderedDict[int, tuple[str, array[int]]] = OrderedDict()
        # tenant -> k-gram -> where it ended, nearest first: doc << 32 | end
        self._index: dict[str, dict[tuple[int, ...], list[int]]] = {}
        self._next = 0
        self._ids = 0
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        return self._ids * BYTES_PER_ID

    def __len__(self) -> int:
        return len(self._docs)

    def add(self, tenant: str, ids: Sequence[int]) -> None:
        """Remember `ids` (one request's output) for `tenant`'s later requests."""
        k = self.config.k
        if len(ids) <= k or len(ids) * BYTES_PER_ID > self.config.max_bytes:
            return
        most = self.config.max_candidates
        with self._lock:
            doc, self._next = self._next, self._next + 1
            self._docs[doc] = (tenant, array("l", ids))
            self._ids += len(ids)
            index = self._index.setdefault(tenant, {})
            for end in range(k - 1, len(ids)):
                key = tuple(ids[end - k + 1 : end + 1])
                bucket = index.get(key)
                if bucket is None:
                    index[key] = [doc << 32 | end]
                else:
                    bucket.insert(0, doc << 32 | end)
                    del bucket[most:]
            while self.nbytes > self.config.max_bytes:
                self._evict()

    def _evict(self) -> None:
        doc, (tenant, ids) = self._docs.popitem(last=False)
        self._ids -= len(ids)
        index, k = self._index[tenant], self.config.k
        for end in range(k - 1, len(ids)):
            key = tuple(ids[end - k + 1 : end + 1])
            bucket = index.get(key)
            if bucket is not None:
                bucket[:] = [e for e in bucket if e >> 32 != doc]
                if not bucket:
                    del index[key]

    def clear(self) -> None:
        with self._lock:
            self._docs.clear()
            self._index.clear()
            self._ids = 0

    def source(self, tenant: str) -> RecallSource:
        """A proposal source over `tenant`'s earlier outputs, for one request."""
        return RecallSource(self, tenant)

    def lookup(self, tenant: str, key: tuple[int, ...]) -> list[tuple[Sequence[int], int]]:
        """The outputs where `key` ended, nearest (most recent) first: (ids, end)."""
        with self._lock:
            bucket = self._index.get(tenant, {}).get(key) or []
            found: list[tuple[Sequence[int], int]] = [
                (self._docs[e >> 32][1], e & 0xFFFFFFFF) for e in bucket]
            if bucket:
                self._docs.move_to_end(bucket[0] >> 32)  # an output in use is kept longest
        return found


class RecallSource:
    """One request's view of a `RecallIndex` (a `ProposalSource`)."""

    name = "recall"
    window_needed = RUN_CAP

    def __init__(self, index: RecallIndex, tenant: str) -> None:
        self.index = index
        self.tenant = tenant

    def propose(self, view: TokenView) -> Proposal | None:
        cfg = self.index.config
        tail = list(view.tail(RUN_CAP))
        if len(tail) < cfg.k:
            return None
        found = self.index.lookup(self.tenant, tuple(tail[-cfg.k :]))
        if not found:
            return None
        nearest = found[0]
        span: list[int] = []
        branch_stop = False
        while len(span) < cfg.max_span:
            j = len(span) + 1
            # Outputs that end before the next id drop out; the rest must agree.
            found = [(ids, end) for ids, end in found if end + j < len(ids)]
            if not found:
                break
            nxt = found[0][0][found[0][1] + j]
            if any(ids[end + j] != nxt for ids, end in found[1:]):
                branch_stop = True
                break
            span.append(nxt)
        if not span:
            return None
        return Proposal(tuple(span), "verify", "recall", branch_stop, _run(tail, *nearest))


def _run(tail: Sequence[int], ids: Sequence[int], end: int) -> int:
    """How many trailing ids of `tail` equal those of `ids` ending at `end`.

    >>> _run([9, 1, 2], [7, 1, 2, 3], 2)
    2
    """
    n = 0
    while n < min(len(tail), end + 1) and tail[-1 - n] == ids[end - n]:
        n += 1
    return n
