"""A sequence's price in a shared step: its share of the step plus its extra micro-batch,
the surface's own price alone; and what the span policy decides with it."""

from __future__ import annotations

import pytest

from ffwd.engine.batchcost import SequenceCost, batch_price, prefill_budget
from ffwd.engine.cost import CostSurface
from ffwd.fill.spans import choose_span

# Two CPU cores with the embedded model (ms per forward, last row; rows alike here).
TABLE = {1: 9.5, 2: 12.3, 4: 17.7, 8: 29.8, 16: 51.9, 32: 96.4, 512: 1616.0}


def surface() -> CostSurface:
    return CostSurface({96: dict(TABLE)}, {96: dict(TABLE)}, max_append=512)


def test_alone_a_sequence_prices_with_the_surface_itself() -> None:
    base = surface()
    cost = SequenceCost.over(base, lambda: [], lambda: False)
    for m in (1, 3, 9, 40):
        assert cost.at(500)(m) == base.cost(m, "rows", 500) == cost.cost(m, "rows", 500)
    cost.observe(1, 19.0, "last", 96)  # a forward alone moves the shared level
    assert base.level > 1.0


def test_beside_others_a_sequence_pays_its_share_and_its_extra_ids() -> None:
    base = surface()
    shared = [True]
    cost = SequenceCost.over(base, lambda: [96, 96, 96], lambda: shared[0])
    assert cost.at(96)(1) == pytest.approx(TABLE[4] / 4)
    assert cost.at(96)(5) == pytest.approx(TABLE[4] / 4 + TABLE[4])  # 4 more: a micro-batch
    assert cost.at(96)(5) == pytest.approx(batch_price(base, 5, "rows", 96, [96, 96, 96]))
    cost.observe(1, 100.0, "last", 96)  # a shared forward's time is not this sequence's
    assert base.level == 1.0


def test_in_a_full_batch_on_two_cores_a_likely_span_is_declined() -> None:
    # Alone, 8 ids kept 90% of the time are worth a forward of 9; beside three others
    # the step's average id costs 4.4 ms and the span's extra micro-batch more per id.
    base = surface()
    alone = SequenceCost.over(base, lambda: [], lambda: False)
    batched = SequenceCost.over(base, lambda: [96, 96, 96], lambda: True)
    assert choose_span(alone.at(96), [0.9] * 8, 8).length > 0
    assert choose_span(batched.at(96), [0.9] * 8, 8).length == 0


def test_the_prefill_budget_is_the_shortest_chunk_near_the_cheapest_per_id() -> None:
    assert prefill_budget(surface()) == 16
    gpu = CostSurface({0: {1: 5.0}}, {0: {1: 5.0, 16: 5.5, 512: 9.0}}, max_append=512)
    assert prefill_budget(gpu) == 512
