"""The common-run alignment: the ids that every rendering of one position shares.

A row is a run of ids identical across renderings. `common` walks several
renderings side by side from a start token each and stops where they part
ways (or where one reaches its limit, or an EOS id): what follows is no
longer determined by what came before.

A `View` is one rendering from a token on, up to (not into) the token that
reaches a character limit; it is *soft* when that limit only means "unknown
from here" (the end of a turn that another turn follows, whose last token may
merge with the next turn), not "something else may follow".
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ffwd.fill.prefix import common_prefix


@dataclass
class Text:
    """One whole rendering and its ids with their character offsets."""

    text: str
    ids: Sequence[int]
    starts: Sequence[int]
    ends: Sequence[int]

    def tok(self, char: int) -> int:
        """Index of the token that contains character `char`."""
        i = bisect.bisect_right(self.starts, char) - 1
        return i if i > 0 else 0


# (rendering, start token, character limit, soft)
View = tuple[Text, int, float, bool]


def lcp(seqs: Iterable[Sequence[int]]) -> list[int]:
    """Longest common prefix.

    >>> lcp([[1, 2, 3], [1, 2, 4], [1, 2]])
    [1, 2]
    """
    it = iter(seqs)
    first = next(it, None)
    if first is None:
        return []
    out = list(first)
    for seq in it:
        del out[common_prefix(out, seq) :]
    return out


def common(views: Iterable[View], eos: frozenset[int]) -> list[int]:
    """The ids all views share, stopping before EOS (their lcp, without copying).
    A view past its soft limit has no say; past a hard one it ends the run.

    >>> t = Text("ab", [1, 2], [0, 1], [1, 2])
    >>> common([(t, 0, 2, False), (t, 1, 2, False)], frozenset())
    []
    >>> common([(t, 0, 2, False), (t, 0, 1, True)], frozenset())
    [1, 2]
    """
    spans = list(views)
    out: list[int] = []
    k = 0
    while True:
        tok = -1
        for r, i, cap, soft in spans:
            j = i + k
            if j >= len(r.ids) or r.ends[j] > cap or r.ids[j] in eos:
                if soft and j < len(r.ids) and r.ids[j] not in eos:
                    continue
                return out
            if tok not in (-1, r.ids[j]):
                return out
            tok = r.ids[j]
        if tok == -1:
            return out
        out.append(tok)
        k += 1


def unique_prefixes(runs: Mapping[str, Sequence[int]]) -> dict[str, int]:
    """For each run, the fewest leading ids that no other run starts with.

    >>> unique_prefixes({"a": [1, 2, 3], "b": [1, 2, 4], "c": [5], "d": [1, 2]})
    {'d': 3, 'a': 3, 'b': 3, 'c': 1}
    """
    order = sorted(runs, key=lambda n: list(runs[n]))
    out = {}
    for i, name in enumerate(order):
        run = runs[name]
        shared = 0
        for j in (i - 1, i + 1):
            if 0 <= j < len(order):
                shared = max(shared, len(lcp([run, runs[order[j]]])))
        out[name] = shared + 1
    return out
