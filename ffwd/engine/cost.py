"""What a forward of m ids costs on this backend, measured once and kept current.

`CostCurve` holds milliseconds per forward at the span lengths in
`ffwd.fill.spans.POINTS` (1, 2, 4, ... 32 ids), for the two kinds of forward
the decode loop makes: ``rows`` (every position's logits: a verify span) and
``last`` (the last position only: an assert span, a plain step). Between
points it interpolates linearly; past the last point it extrapolates the last
segment; past the backend's `max_append` a forward is impossible (``inf``).

The shape comes from `measure` (a few timed forwards at load, cached as JSON
per model, backend, dtype and threads); the level follows the forwards the
loop really makes: each `observe` moves a running factor towards the ratio of
what a forward took to what the curve predicted, so a machine that gets busy
(every forward slower) moves the whole curve, not only the points it hits.

For caches that cannot rewind, `undo` is what a rejected span adds: a
checkpoint before it and a restore after it (measured too).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from ffwd.fill.spans import POINTS, Undo

if TYPE_CHECKING:  # the protocol module names CostCurve in turn
    from ffwd.engine.backend import Backend

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


def measure(
    backend: Backend, *, context: int = 96, repeats: int = 3, points: Sequence[int] = POINTS
) -> CostCurve:
    """Time forwards of each length in `points` after a `context`-id prompt, both
    kinds, and the checkpoint/restore of a cache that cannot rewind.

    One untimed round first (a shape's first call may compile kernels), then
    `repeats` rounds over every (length, kind), keeping each point's median:
    rounds rather than one point at a time, so that a machine whose speed
    drifts during the measurement skews every point alike (the running level
    corrects the scale later; the shape is what must be right).
    Leaves the backend's cache empty.
    """
    vocab = backend.vocab_size
    prompt = [(7 * i + 3) % vocab for i in range(context)]
    span = [(11 * i + 5) % vocab for i in range(max(points))]
    shapes = [(m, kind) for m in points if m <= backend.max_append for kind in KINDS]
    backend.reset()
    backend.prefill(prompt)
    times: dict[tuple[int, Kind], list[float]] = {shape: [] for shape in shapes}
    befores: list[float] = []
    afters: list[float] = []
    for rnd in range(repeats + 1):
        for m, kind in shapes:
            saved, ms_before = _checkpoint(backend)
            t0 = time.perf_counter()
            if kind == "rows":
                backend.forward(span[:m])
            else:
                backend.append(span[:m])
            ms = (time.perf_counter() - t0) * 1000
            # Without rewind or checkpoint there is nothing to undo with: the
            # context grows by m, which a short measurement can afford.
            if backend.can_rewind or backend.can_checkpoint:
                ms_after = _undo(backend, saved, m)
                if rnd and saved is not None:
                    befores.append(ms_before)
                    afters.append(ms_after)
            if rnd:
                times[(m, kind)].append(ms)
    backend.reset()
    undo = Undo(_median(befores), _median(afters), replay=True) if befores else Undo()
    table = {kind: {m: _median(times[(m, k)]) for m, k in shapes if k == kind} for kind in KINDS}
    return CostCurve(table["rows"], table["last"], backend.max_append, undo)


def _checkpoint(backend: Backend) -> tuple[object | None, float]:
    if backend.can_rewind or not backend.can_checkpoint:
        return None, 0.0
    t0 = time.perf_counter()
    saved = backend.checkpoint()
    return saved, (time.perf_counter() - t0) * 1000


def _undo(backend: Backend, saved: object | None, m: int) -> float:
    t0 = time.perf_counter()
    if saved is None:
        backend.rewind(m)
    else:
        backend.restore(saved)
    return (time.perf_counter() - t0) * 1000


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if s else 0.0


def load_or_measure(backend: Backend, path: Path, refresh: bool = False) -> CostCurve:
    """The curve cached at `path`, or (none there, or `refresh`) a fresh `measure`
    saved there atomically."""
    try:
        if not refresh:
            return CostCurve.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, AssertionError, TypeError):
        pass
    curve = measure(backend)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as fh:
        json.dump(curve.as_dict(), fh)
    os.replace(tmp, path)
    return curve
