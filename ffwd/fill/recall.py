"""Recall: what earlier requests read and wrote, as a second copy source across requests.

Agents repeat themselves from one request to the next: the same request
again, the same call with the same arguments, a file re-read and re-written,
a conversation whose next prompt quotes the last one. Echo
(`ffwd.fill.echo`) sees one request; `RecallIndex` keeps earlier requests
whole, prompt then output, per tenant (one API key's text never proposes ids
to another's request), indexed by the k-gram that ends at each id, bounded in
bytes (the least recently used request goes first; a request whose ids start
with an earlier one's, such as the next turn of a conversation or the same
request again, replaces it). A request gets a `RecallSource` over its
tenant's: when its last k ids occurred in one, it proposes the continuation
(policy ``verify``, origin ``recall``), with the copy's run (how far back the
request, prompt included, matches the earlier one before that point) as its
evidence. Because the prompt is indexed, a repeated request matches from its
first output id with a run as long as the prompt.

Occurrences are walked as echo walks them: kept while all agree, except that
a match at least `STRONG` ids long is not vetoed by shorter ones
(`ffwd.fill.echo.strongest`): every earlier request shares the template's
markup, and a repeated one should not stop where another request went its own
way. Of the long matches the one reaching furthest back is walked: a request
whose earlier output quoted its prompt follows that output where it left the
quoted text, not the text.

Worked example (k=2)::

    earlier request  7 1 2 3 4 5        (prompt and output, one sequence)
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

from ffwd.fill.echo import RUN_CAP, STRONG, strongest
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
    """Earlier requests (prompt and output), per tenant, k-gram indexed, LRU-bounded in bytes.

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
        """Remember `ids` (one request: its prompt, then its output) for `tenant`'s later
        requests. Earlier ones it starts with (the same request, the conversation up to
        its last turn) are dropped: it holds them."""
        k = self.config.k
        if len(ids) <= k or len(ids) * BYTES_PER_ID > self.config.max_bytes:
            return
        most = self.config.max_candidates
        new = array("l", ids)
        with self._lock:
            for doc in [d for d, (t, old) in self._docs.items()
                        if t == tenant and len(old) <= len(new) and old[0] == new[0]
                        and new[: len(old)] == old]:
                self._evict(doc)
            doc, self._next = self._next, self._next + 1
            self._docs[doc] = (tenant, new)
            self._ids += len(new)
            index = self._index.setdefault(tenant, {})
            for end in range(k - 1, len(ids)):
                # Keys from the caller's ids: their int objects are shared, not made anew.
                key = tuple(ids[end - k + 1 : end + 1])
                bucket = index.get(key)
                if bucket is None:
                    index[key] = [doc << 32 | end]
                else:
                    bucket.insert(0, doc << 32 | end)
                    del bucket[most:]
            while self.nbytes > self.config.max_bytes:
                self._evict(next(iter(self._docs)))

    def _evict(self, doc: int) -> None:
        tenant, ids = self._docs.pop(doc)
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
                self._docs.move_to_end(bucket[0] >> 32)  # a request in use is kept longest
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
        if len(found) > 1:  # a long match outweighs short ones that fork from it
            runs = [_run(tail, *f, STRONG) for f in found]
            found = [found[i] for i in strongest(runs, lambda i: _run(tail, *found[i]))]
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


def _run(tail: Sequence[int], ids: Sequence[int], end: int, cap: int = RUN_CAP) -> int:
    """How many trailing ids of `tail` (at most `cap`) equal those of `ids` ending at `end`.

    >>> _run([9, 1, 2], [7, 1, 2, 3], 2), _run([9, 1, 2], [9, 1, 2, 3], 2, cap=2)
    (2, 2)
    """
    n = 0
    while n < min(len(tail), end + 1, cap) and tail[-1 - n] == ids[end - n]:
        n += 1
    return n
