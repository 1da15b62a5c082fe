"""Measure a backend's `CostCurve`: a few timed forwards of each span length.

`measure(backend)` prefills a short synthetic prompt, then times forwards of
every length in `ffwd.fill.spans.POINTS` of both kinds (every row, last row
only), undoing each one (`Backend.mark`/`undo`), and the checkpoint and
restore of a cache that cannot rewind. `ffwd.models.load_backend` caches the
result per model and configuration.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from ffwd.engine.backend import Backend, Mark
from ffwd.engine.cost import KINDS, CostCurve, Kind
from ffwd.fill.spans import POINTS, Undo


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
    # Without rewind or checkpoint there is nothing to undo with: the context
    # grows by m each time, which a short measurement can afford.
    undoable = backend.can_rewind or backend.can_checkpoint
    times: dict[tuple[int, Kind], list[float]] = {shape: [] for shape in shapes}
    befores: list[float] = []
    afters: list[float] = []
    for rnd in range(repeats + 1):
        for m, kind in shapes:
            mark, ms_before = _timed_mark(backend) if undoable else (None, 0.0)
            t0 = time.perf_counter()
            if kind == "rows":
                backend.forward(span[:m])
            else:
                backend.append(span[:m])
            ms = (time.perf_counter() - t0) * 1000
            if mark is not None:
                t0 = time.perf_counter()
                backend.undo(mark)
                if rnd and mark.snapshot is not None:
                    befores.append(ms_before)
                    afters.append((time.perf_counter() - t0) * 1000)
            if rnd:
                times[(m, kind)].append(ms)
    backend.reset()
    undo = Undo(_median(befores), _median(afters), replay=True) if befores else Undo()
    table = {kind: {m: _median(times[(m, k)]) for m, k in shapes if k == kind} for kind in KINDS}
    return CostCurve(table["rows"], table["last"], backend.max_append, undo)


def _timed_mark(backend: Backend) -> tuple[Mark, float]:
    t0 = time.perf_counter()
    mark = backend.mark()
    return mark, (time.perf_counter() - t0) * 1000


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    return s[len(s) // 2] if s else 0.0
