"""What a forward of m ids costs at a cache depth, measured once and kept current.

`CostSurface` holds milliseconds per forward for span lengths m at a few cache
depths d (the ids already in the cache), for the two kinds of forward the
decode loop makes: ``rows`` (every position's logits: a verify span) and
``last`` (the last position only: an assert span, a plain step, a prefill
chunk). Attention reads every cached id, so depth changes the shape, not only
the level: on two CPU cores with an f16 cache and flash attention, 16 ids cost
6x one id at depth 0 and 12x at depth 3k.

Pricing ``c(m, d)``: at each measured depth, linear in m between measured
points (the last segment extended past the end), the points first pooled where
a noisy one would price more ids below fewer (`monotone`) and the two timings of a
one-id forward averaged (it is one forward); between depths, linear in d;
past the deepest, the last two depths' slope extended (attention grows about
linearly with depth). Past the backend's `max_append` a forward is impossible
(``inf``).

The surface comes from `ffwd.engine.cost.measure` (timed forwards at load, cached
as JSON by `ffwd.models`); its level follows the forwards the loop really
makes: each `observe` moves one running factor towards the ratio of what a
forward took to what the surface predicted at its depth, so a machine that
gets busy moves the whole surface.

For caches that cannot rewind, `undo` is what a rejected span adds: a
checkpoint before it and a restore after it (measured too).

>>> s = CostSurface({0: {1: 10.0, 16: 40.0}, 1000: {1: 20.0, 16: 100.0}},
...                 {0: {1: 10.0, 16: 30.0}, 1000: {1: 20.0, 16: 90.0}}, max_append=512)
>>> s.cost(16, depth=500), s.cost(1, "last", depth=3000)
(70.0, 40.0)
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from ffwd.fill.spans import Undo

Kind = Literal["rows", "last"]
KINDS: tuple[Kind, ...] = ("rows", "last")
SMOOTHING = 0.1  # weight of one observed forward in the running level
Table = dict[int, dict[int, float]]  # depth -> m -> ms


class Pricing(Protocol):
    """What the decode loop prices spans with: ``m -> ms`` at a depth, and what undoing a
    rejected span adds (a `CostSurface`, or a sequence's share of a batched step)."""

    @property
    def undo(self) -> Undo: ...

    def at(self, depth: int, kind: Kind = "rows") -> Callable[[int], float]: ...


@dataclass(slots=True)
class CostSurface:
    """Milliseconds per forward of m ids at depth d (see the module docstring)."""

    rows: Table
    last: Table
    max_append: int
    undo: Undo = field(default_factory=Undo)
    level: float = 1.0  # running factor on the measured surface

    def __post_init__(self) -> None:
        for kind in KINDS:
            table = getattr(self, kind)
            times = [ms for by_m in table.values() for ms in by_m.values()]
            if not times or any(not (ms > 0 and math.isfinite(ms)) for ms in times):
                raise ValueError(f"cost surface {kind}: expected positive times, got {table}")
        if isinstance(self.max_append, bool) or not (isinstance(self.max_append, int)
                                                     and self.max_append >= 1):
            raise ValueError(f"cost surface: max_append {self.max_append!r}, expected >= 1")
        if sorted(self.rows) != sorted(self.last):
            raise ValueError(f"cost surface: rows at depths {sorted(self.rows)}, "
                             f"last at {sorted(self.last)}")
        # A forward of one id is the same forward whichever rows are asked for (there is
        # one): both timings are samples of it. And a forward of more ids is never
        # cheaper: a noisy point must not price a longer span below a shorter one.
        rows = {d: dict(by_m) for d, by_m in self.rows.items()}
        last = {d: dict(by_m) for d, by_m in self.last.items()}
        for d in rows:
            if 1 in rows[d] and 1 in last[d]:
                rows[d][1] = last[d][1] = (rows[d][1] + last[d][1]) / 2
        self.rows = {d: monotone(by_m) for d, by_m in rows.items()}
        self.last = {d: monotone(by_m) for d, by_m in last.items()}

    @property
    def depths(self) -> list[int]:
        return sorted(self.rows)

    def cost(self, m: int, kind: Kind = "rows", depth: int = 0) -> float:
        """Expected ms of one forward of `m` ids after `depth` cached ids, right now."""
        if m < 1:
            raise ValueError(f"cost of a forward of {m} ids")
        if m > self.max_append:
            return math.inf
        return self.level * self.quiet(m, kind, depth)

    def quiet(self, m: int, kind: Kind = "last", depth: int = 0) -> float:
        """The measured surface at (m, depth), without the running level."""
        table: Table = getattr(self, kind)
        return _interpolate({d: _interpolate(by_m, m) for d, by_m in table.items()}, depth)

    def at(self, depth: int, kind: Kind = "rows") -> Callable[[int], float]:
        """``m -> ms`` at `depth`: the cost a span policy prices with."""
        return lambda m: self.cost(m, kind, depth)

    def observe(self, m: int, ms: float, kind: Kind = "last", depth: int = 0) -> None:
        """A forward of `m` ids after `depth` ids just took `ms`: move the level towards it."""
        if ms > 0 and m <= self.max_append:
            self.level += SMOOTHING * (ms / self.quiet(m, kind, depth) - self.level)

    def describe(self) -> str:
        """The surface in a few lines: ms per forward of m ids (last row only) per depth."""
        ms = sorted({m for by_m in self.last.values() for m in by_m})
        head = "ms per forward, last row | " + " ".join(f"m={m:<5}" for m in ms)
        lines = [head]
        for d in self.depths:
            cells = " ".join(f"{self.quiet(m, 'last', d):<7.1f}" for m in ms)
            lines.append(f"  at depth {d:>6}           | {cells}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, object]:
        def table(t: Table) -> dict[str, dict[str, float]]:
            return {str(d): {str(m): round(v, 4) for m, v in sorted(by_m.items())}
                    for d, by_m in sorted(t.items())}

        return {
            "rows": table(self.rows),
            "last": table(self.last),
            "max_append": self.max_append,
            "undo": {"before": self.undo.before, "after": self.undo.after,
                     "replay": self.undo.replay},
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> CostSurface:
        def table(raw: object) -> Table:
            assert isinstance(raw, dict)
            return {int(depth): {int(m): float(v) for m, v in by_m.items()}
                    for depth, by_m in raw.items()}

        undo = d.get("undo") or {}
        assert isinstance(undo, dict)
        return cls(table(d["rows"]), table(d["last"]), int(str(d["max_append"])),
                   Undo(float(undo.get("before", 0.0)), float(undo.get("after", 0.0)),
                        bool(undo.get("replay", False))))


def flat(rows: Mapping[int, float], last: Mapping[int, float], max_append: int,
         undo: Undo | None = None) -> CostSurface:
    """A surface measured at one depth only (priced the same at every depth)."""
    return CostSurface({0: dict(rows)}, {0: dict(last)}, max_append, undo or Undo())


def monotone(by_m: Mapping[int, float]) -> dict[int, float]:
    """The least-squares fit to `by_m` (ms by span length) that never falls as m grows:
    each run of points that falls is pooled to its mean (pool adjacent violators).

    >>> monotone({1: 8.6, 2: 21.8, 4: 18.2, 8: 30.0})
    {1: 8.6, 2: 20.0, 4: 20.0, 8: 30.0}
    >>> monotone({1: 10.0, 4: 16.0})
    {1: 10.0, 4: 16.0}
    """
    blocks: list[tuple[float, int]] = []  # (sum, count) of each pooled run, in m order
    for m in sorted(by_m):
        total, count = by_m[m], 1
        while blocks and blocks[-1][0] / blocks[-1][1] > total / count:
            before, n = blocks.pop()
            total, count = total + before, count + n
        blocks.append((total, count))
    means = [total / count for total, count in blocks for _ in range(count)]
    return dict(zip(sorted(by_m), means, strict=True))


def _interpolate(table: Mapping[int, float], x: int) -> float:
    """Linear between measured points, the last segment extended past the end (never
    below the last point's value), the first point's value before the start.

    >>> _interpolate({1: 10.0, 4: 16.0}, 2)
    12.0
    >>> _interpolate({1: 10.0, 4: 16.0}, 7)
    22.0
    >>> _interpolate({96: 10.0, 1000: 20.0}, 0), _interpolate({96: 10.0}, 5000)
    (10.0, 10.0)
    """
    if x in table:
        return table[x]
    pts = sorted(table)
    if len(pts) == 1 or x < pts[0]:
        return table[pts[0]]
    lo, hi = pts[0], pts[1]
    for a, b in itertools.pairwise(pts):
        lo, hi = a, b
        if x < b:
            break
    value = table[lo] + (table[hi] - table[lo]) * (x - lo) / (hi - lo)
    return max(value, table[pts[-1]]) if x > pts[-1] else value
