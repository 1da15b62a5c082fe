"""Prefix-affine request routing over Ray Serve replicas.

Turn n+1 of a conversation resends turn n's prompt, and only the replica that
served turn n holds that prefix in its prompt cache. The router hashes each
request's prompt material (tools and messages, or the completion prompt) in
blocks of at most `BLOCK` characters (`prompt_blocks`), chained so that equal
hash lists mean equal prefixes, and remembers which blocks it sent to which replica and where each
of those prompts ended (LRU, bounded per replica).

A request resumes a conversation on the replica holding the longest prefix
of it when no other holds as much and that prefix runs through the whole of
an earlier prompt sent there (turn n of the conversation), however long the
new part is. It goes there if that replica is within `imbalance` requests of
the least-loaded one; otherwise, and whenever it resumes nothing, to the
least-loaded replica, ties to the one holding the least. A prefix that many
conversations share (a system prompt, the tools) attracts nothing: each
replica caches it after its first such request, while a conversation's own
prefix lives on one replica.

The ranking is the pure function `rank`; `ray_router.PrefixAffinityRouter`
is its Ray Serve glue. The view is what was routed, not a readback of the
replicas' caches: a replica that restarts gets a new id and an empty table.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar

from ffwd.serve.request import GenerationRequest

BLOCK = 64  # characters per hashed block (~16 tokens)
DEFAULT_MAX_BLOCKS = 1 << 16  # per replica: ~4M characters of prompts remembered
K = TypeVar("K", bound=Hashable)


def prompt_blocks(req: object) -> list[str]:
    """The request's prompt material cut in blocks whose list grows the way the prompt does.

    A chat request is its shown tools, then each message as the template sees
    it, each piece cut in `BLOCK` characters with its last block shorter: the
    next turn resends the same pieces, so even a short message is a block of
    its own. A completion prompt grows at its end, so only its whole blocks count.

    >>> [len(b) for b in prompt_blocks(GenerationRequest("r", "text", prompt="x" * 150))]
    [64, 64]
    """
    if not isinstance(req, GenerationRequest):
        return []
    if req.kind == "text":
        return cut(req.prompt, BLOCK, tail=False)
    shown = req.tools if req.tools and req.tool_choice != "none" else None
    pieces = [json.dumps(shown, sort_keys=True)] if shown else []
    pieces += [json.dumps(m, sort_keys=True) for m in req.messages]
    return [b for p in pieces for b in cut(p, BLOCK, tail=True)]


def cut(text: str, block: int, *, tail: bool) -> list[str]:
    """`text` in `block`-character pieces, the shorter last one kept if `tail`.

    >>> cut("abcdefg", 3, tail=True), cut("abcdefg", 3, tail=False)
    (['abc', 'def', 'g'], ['abc', 'def'])
    """
    end = len(text) if tail else len(text) - len(text) % block
    return [text[i:i + block] for i in range(0, end, block)]


def chain_hashes(blocks: Sequence[str]) -> list[int]:
    """Each block hashed with the hash before it: equal first n hashes, equal first n blocks.

    >>> a, b = chain_hashes(["ab", "cd", "ef"]), chain_hashes(["ab", "cd", "xy", "ef"])
    >>> a[:2] == b[:2], a[2] == b[3]
    (True, False)
    """
    out: list[int] = []
    h = 0
    for b in blocks:
        h = hash((h, b))
        out.append(h)
    return out


class Held(NamedTuple):
    """What a replica holds of a prompt: leading blocks, and of those, how many end
    where an earlier prompt sent to it ended (0: it never saw this conversation)."""

    blocks: int
    whole: int


class PrefixTable:
    """Blocks sent to each replica (True where a prompt ended), LRU, `max_blocks` each."""

    def __init__(self, max_blocks: int = DEFAULT_MAX_BLOCKS) -> None:
        self.max_blocks = max_blocks
        self._held: dict[Hashable, OrderedDict[int, bool]] = {}

    def match(self, replica: Hashable, hashes: Sequence[int]) -> Held:
        held: Mapping[int, bool] = self._held.get(replica) or {}
        n = whole = 0
        while n < len(hashes) and hashes[n] in held:
            n += 1
            if held[hashes[n - 1]]:
                whole = n
        return Held(n, whole)

    def size(self, replica: Hashable) -> int:
        return len(self._held.get(replica, ()))

    def record(self, replica: Hashable, hashes: Sequence[int]) -> None:
        held = self._held.setdefault(replica, OrderedDict())
        for i, h in enumerate(hashes):
            held[h] = held.get(h, False) or i == len(hashes) - 1
            held.move_to_end(h)
        while len(held) > self.max_blocks:
            held.popitem(last=False)

    def keep(self, replicas: Iterable[Hashable]) -> None:
        """Forget every replica not in `replicas` (gone, or replaced by a fresh one)."""
        alive = set(replicas)
        for r in [r for r in self._held if r not in alive]:
            del self._held[r]


def rank(
    held: Mapping[K, Held], loads: Mapping[K, int], sizes: Mapping[K, int], *, imbalance: int = 1
) -> tuple[list[K], str]:
    """Replicas in the order to try them, and why the first one leads.

    `held`: what each replica holds of the prompt; `loads`: its ongoing
    requests; `sizes`: the blocks it holds in all.

    >>> rank({"a": Held(5, 3), "b": Held(1, 0)}, {"a": 1, "b": 0}, {"a": 9, "b": 2})
    (['a', 'b'], 'prefix')
    >>> rank({"a": Held(5, 3), "b": Held(1, 0)}, {"a": 2, "b": 0}, {"a": 9, "b": 2})
    (['b', 'a'], 'load')
    >>> rank({"a": Held(5, 0), "b": Held(1, 0)}, {"a": 0, "b": 0}, {"a": 9, "b": 2})
    (['b', 'a'], 'load')

    (a holds the conversation's turn before; then a is two requests busier;
    then a shares five blocks with the prompt, but no earlier prompt ended there.)
    """
    by_load = sorted(held, key=lambda r: (loads[r], sizes[r]))
    best = resumer(held, by_load)
    if best is not None and loads[best] - loads[by_load[0]] <= imbalance:
        return [best, *(r for r in by_load if r != best)], "prefix"
    return by_load, "load"


def resumer(held: Mapping[K, Held], order: Sequence[K] | None = None) -> K | None:
    """The replica holding the longest prefix, if it is the only one and it runs
    through a whole earlier prompt sent there (`order`: which to scan first).

    >>> resumer({"a": Held(4, 2), "b": Held(3, 3)}), resumer({"a": Held(3, 0), "b": Held(1, 1)})
    ('a', None)
    >>> resumer({"a": Held(2, 2), "b": Held(2, 2)}) is None  # both hold it: load decides
    True
    """
    order = list(held) if order is None else order
    if not order:
        return None
    best = max(order, key=lambda r: held[r].blocks)
    others = max((held[r].blocks for r in order if r != best), default=0)
    return best if held[best].whole > 0 and held[best].blocks > others else None


@dataclass
class RouteStats:
    """What the router did, per process (exported on the ingress's /metrics)."""

    requests: int = 0
    resumable: int = 0  # continued a prompt that one replica holds (see `resumer`)
    resumed: int = 0  # ... and went to that replica
    prompt_blocks: int = 0
    matched_blocks: int = 0  # blocks the chosen replica held

    def note(self, blocks: int, resumable: bool, resumed: bool, matched: int) -> None:
        with _LOCK:
            self.requests += 1
            self.resumable += resumable
            self.resumed += resumed
            self.prompt_blocks += blocks
            self.matched_blocks += matched

    @property
    def hit_rate(self) -> float:
        return self.resumed / self.resumable if self.resumable else 0.0


_LOCK = threading.Lock()
STATS = RouteStats()


class StatsCollector:
    """A prometheus_client collector over `STATS` (register it on a registry)."""

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        s = STATS
        for name, doc, value in (
            ("requests", "Requests routed to a model replica", s.requests),
            ("resumable", "Routed requests continuing a prompt one replica holds", s.resumable),
            ("resumed", "Of those, sent to that replica", s.resumed),
            ("prompt_blocks", "Prompt blocks routed", s.prompt_blocks),
            ("matched_blocks", "Prompt blocks the chosen replica held", s.matched_blocks),
        ):
            yield CounterMetricFamily(f"ffwd_route_{name}", doc, value=value)
        yield GaugeMetricFamily("ffwd_route_prefix_hit_rate", "resumed / resumable",
                                value=s.hit_rate)
