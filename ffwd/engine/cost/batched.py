"""What a sequence's ids cost in a forward it shares with other sequences.

The decode loop prices a verify span (and chunks an assert span) with its
backend's `CostSurface`: ms per forward of m ids at a depth. Under
``--parallel N`` one step forwards every active sequence's ids together, and
the others' ids ride along whatever this sequence does, so a sequence's m ids
are priced as its share of the step plus what its ids beyond the first add
(`batch_price`)::

    price(m) = step(B) / B + c(m - 1, its depth)        (B sequences in the step)
    step(B)  = c(B, shallow) + sum over the B sequences of (c(1, depth) - c(1, shallow))

`step` counts the weights once for all B ids and each sequence's attention at
its own depth. The second term is a micro-batch of its own: llama.cpp takes
the same number of ids from each sequence into one micro-batch, so a
sequence's extra ids run after the others' single ones (`ffwd.engine.core.batch`).
Alone (B = 1) the price is the surface's own ``c(m)``.

Why a share: `ffwd.fill.spans.choose_span` keeps a plan when its expected ids
per ms beat one id at ``price(1)``. With ``price(1) = step/B`` that is
``(E - 1) / c(m) > B / step``: the span's extra ids must come at least as
cheaply as the step's average id, which is what raises the batch's ids per
ms. On a CPU, where a step of B ids costs nearly B one-id steps' compute but
one read of the weights, that bar is high and spans are mostly declined in
a full batch; on a GPU, where a step of 16 sequences costs about what one
costs, it is low.

`prefill_budget` is the prompt ids one shared step carries (`ffwd.engine.core.batch`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ffwd.engine.cost.surface import SMOOTHING, CostSurface, Kind
from ffwd.fill.spans import Undo

BUDGET_SLACK = 1.1  # a prefill chunk may cost this much more per id than the cheapest


def step_ms(surface: CostSurface, depths: Sequence[int]) -> float:
    """Quiet ms of one step carrying one id of each sequence at `depths`.

    >>> s = CostSurface({0: {1: 10.0, 4: 16.0}, 1000: {1: 20.0, 4: 40.0}},
    ...                 {0: {1: 10.0, 4: 16.0}, 1000: {1: 20.0, 4: 40.0}}, max_append=64)
    >>> step_ms(s, [0, 0, 0, 0]), step_ms(s, [1000, 0])
    (16.0, 22.0)
    """
    shallow = surface.depths[0]
    alone = surface.quiet(1, "last", shallow)
    return surface.quiet(len(depths), "last", shallow) + sum(
        surface.quiet(1, "last", d) - alone for d in depths)


def batch_price(surface: CostSurface, m: int, kind: Kind, depth: int,
                others: Sequence[int]) -> float:
    """Quiet ms this sequence's `m` ids (at `depth`) cost in a step with sequences at the
    depths `others` (see the module docstring); the surface's own price when alone.

    >>> s = CostSurface({0: {1: 10.0, 4: 16.0}}, {0: {1: 10.0, 4: 16.0}}, max_append=64)
    >>> batch_price(s, 1, "rows", 0, [0, 0, 0]), batch_price(s, 4, "rows", 0, [0, 0, 0])
    (4.0, 18.0)
    >>> batch_price(s, 4, "rows", 0, [])
    16.0
    """
    if not others:
        return surface.quiet(m, kind, depth)
    share = step_ms(surface, [depth, *others]) / (len(others) + 1)
    return share + (surface.quiet(m - 1, kind, depth) if m > 1 else 0.0)


def parts_ms(surface: CostSurface, parts: Sequence[tuple[int, int]]) -> float:
    """Quiet ms of a step forwarding `parts` ((ids, depth) per sequence): one id of each in
    one micro-batch, each sequence's further ids in one of their own.

    >>> s = CostSurface({0: {1: 10.0, 4: 16.0}}, {0: {1: 10.0, 4: 16.0}}, max_append=64)
    >>> parts_ms(s, [(1, 0), (1, 0), (1, 0), (3, 0)])
    28.0
    """
    base = step_ms(surface, [d for _, d in parts])
    return base + sum(surface.quiet(n - 1, "last", d) for n, d in parts if n > 1)


def observe_parts(surface: CostSurface, parts: Sequence[tuple[int, int, Kind]],
                  ms: float) -> None:
    """A forward of `parts` ((ids, depth, kind) per sequence) took `ms`: move the surface's
    running level towards it. Alone it is the surface's own point (`CostSurface.observe`);
    shared, the step's price (`parts_ms`).

    >>> s = CostSurface({0: {1: 10.0, 4: 16.0}}, {0: {1: 10.0, 4: 16.0}}, max_append=64)
    >>> observe_parts(s, [(1, 0, "last"), (1, 0, "last")], 24.0); round(s.level, 3)
    1.1
    """
    if len(parts) == 1:
        n, depth, kind = parts[0]
        surface.observe(n, ms, kind, depth)
        return
    predicted = parts_ms(surface, [(n, d) for n, d, _ in parts])
    if ms > 0 and predicted > 0:
        surface.level += SMOOTHING * (ms / predicted - surface.level)


def prefill_budget(surface: CostSurface) -> int:
    """Prompt ids per shared step: the shortest measured forward (at the shallowest depth)
    whose ms per id is within `BUDGET_SLACK` of the cheapest. On two CPU cores that is
    a few dozen ids (a longer chunk only stalls the others' streams for longer); on a GPU,
    where the cost per id keeps falling, the longest forward.

    >>> s = CostSurface({0: {1: 1.0}}, {0: {1: 10.0, 8: 30.0, 16: 52.0, 32: 96.0,
    ...                                      512: 1616.0}}, max_append=512)
    >>> prefill_budget(s)
    16
    """
    table = surface.last[surface.depths[0]]
    per_id = {m: ms / m for m, ms in table.items() if m <= surface.max_append}
    best = min(per_id.values())
    return min(m for m, c in per_id.items() if c <= best * BUDGET_SLACK)


@dataclass(slots=True)
class SequenceCost:
    """How one sequence of a batched context prices its forwards (a `Pricing`): against
    `base`, the context's measured surface, beside the sequences at the depths `others()`
    gives (asked at every price): `batch_price`; the surface's own price alone."""

    base: CostSurface
    others: Callable[[], list[int]]

    @property
    def undo(self) -> Undo:
        return self.base.undo

    def at(self, depth: int, kind: Kind = "rows") -> Callable[[int], float]:
        """``m -> ms`` at `depth` against the sequences running now (asked once: a span
        policy prices every length of one proposal against the same batch)."""
        base, others = self.base, self.others()
        if not others:
            return base.at(depth, kind)
        share = step_ms(base, [depth, *others]) / (len(others) + 1)

        def price(m: int) -> float:
            if m < 1:
                raise ValueError(f"cost of a forward of {m} ids")
            if m > base.max_append:
                return math.inf
            return base.level * (share + (base.quiet(m - 1, kind, depth) if m > 1 else 0.0))

        return price
