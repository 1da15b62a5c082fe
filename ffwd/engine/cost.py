"""What a forward of m ids costs on this backend, measured once and kept current.

`CostCurve` holds milliseconds per forward at the span lengths in
`ffwd.fill.spans.POINTS` (1, 2, 4, ... 32 ids), for the two kinds of forward
the decode loop makes: ``rows`` (every position's logits: a verify span) and
``last`` (the last position only: an assert span, a plain step). Between
points it interpolates linearly; past the last point it extrapolates the last
segment; past the backend's `max_append` a forward is impossible (``inf``).

The shape comes from `ffwd.engine.measure` (a few timed forwards at load,
cached as JSON per model, backend, dtype and threads by `ffwd.models`); the
level follows the forwards the loop really makes: each `observe` moves a
running factor towards the ratio of what a forward took to what the curve
predicted, so a machine that gets busy
(every forward slower) moves the whole curve, not only the points it hits.

For caches that cannot rewind, `undo` is what a rejected span adds: a
checkpoint before it and a restore after it (measured too).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from ffwd.fill.spans import Undo

Kind = Literal["rows", "last"]
KINDS: tuple[Kind, ...] = ("rows", "last")
SMOOTHING = 0.1  # weight of one observed forward in the running level


@dataclass(slots=True)
class CostCurve:
    """Milliseconds per forward of m ids (see the module docstring)."""

    rows: dict[int, float]
    last: dict[int, float]
    max_append: int
    undo: Undo = field(default_factory=Undo)
    level: float = 1.0  # running factor on the measured shape

    def __post_init__(self) -> None:
        for kind in KINDS:
            table = getattr(self, kind)
            if not table or any(not (ms > 0 and math.isfinite(ms)) for ms in table.values()):
                raise ValueError(f"cost curve {kind}: expected positive times, got {table}")

    def cost(self, m: int, kind: Kind = "rows") -> float:
        """Expected ms of one forward of `m` ids right now."""
        if m < 1:
            raise ValueError(f"cost of a forward of {m} ids")
        if m > self.max_append:
            return math.inf
        return self.level * _interpolate(getattr(self, kind), m)

    def observe(self, m: int, ms: float, kind: Kind = "last") -> None:
        """A forward of `m` ids just took `ms`: move the running level towards it."""
        predicted = _interpolate(getattr(self, kind), m)
        if ms > 0 and m <= self.max_append:
            self.level += SMOOTHING * (ms / predicted - self.level)

    def describe(self) -> str:
        """The curve in one line: ms per forward of m ids, all rows and last row only."""

        def ms(table: dict[int, float]) -> str:
            return ", ".join(f"{m}: {v:.1f}" for m, v in sorted(table.items()))

        return (f"ms per forward of m ids, all rows {{{ms(self.rows)}}}, "
                f"last row {{{ms(self.last)}}}")

    def as_dict(self) -> dict[str, object]:
        return {
            "rows": {str(m): round(v, 4) for m, v in sorted(self.rows.items())},
            "last": {str(m): round(v, 4) for m, v in sorted(self.last.items())},
            "max_append": self.max_append,
            "undo": {
                "before": self.undo.before,
                "after": self.undo.after,
                "replay": self.undo.replay,
            },
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> CostCurve:
        def table(raw: object) -> dict[int, float]:
            assert isinstance(raw, dict)
            return {int(k): float(v) for k, v in raw.items()}

        undo = d.get("undo") or {}
        assert isinstance(undo, dict)
        return cls(
            table(d["rows"]),
            table(d["last"]),
            int(str(d["max_append"])),
            Undo(
                float(undo.get("before", 0.0)),
                float(undo.get("after", 0.0)),
                bool(undo.get("replay", False)),
            ),
        )


def _interpolate(table: Mapping[int, float], m: int) -> float:
    """Linear between measured points; the last segment extended past the end.

    >>> _interpolate({1: 10.0, 4: 16.0}, 2)
    12.0
    >>> _interpolate({1: 10.0, 4: 16.0}, 7)
    22.0
    """
    pts = sorted(table)
    if m in table:
        return table[m]
    if len(pts) == 1:
        return table[pts[0]] * m / pts[0]
    lo, hi = pts[0], pts[1]
    for a, b in itertools.pairwise(pts):
        lo, hi = a, b
        if m < b:
            break
    return table[lo] + (table[hi] - table[lo]) * (m - lo) / (hi - lo)
