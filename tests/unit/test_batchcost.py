"""A sequence's price in a shared step: its share of the step plus its extra micro-batch,
the surface's own price alone; and what the span policy decides with it."""

from __future__ import annotations

import pytest

from ffwd.engine.cost.batched import (
    SequenceCost,
    batch_price,
    observe_parts,
    parts_ms,
    prefill_budget,
)
from ffwd.engine.cost.surface import CostSurface
from ffwd.fill.spans import choose_span

# Two CPU cores with the embedded model (ms per forward, last row; rows alike here).
TABLE = {1: 9.5, 2: 12.3, 4: 17.7, 8: 29.8, 16: 51.9, 32: 96.4, 512: 1616.0}


def surface() -> CostSurface:
    return CostSurface({96: dict(TABLE)}, {96: dict(TABLE)}, max_append=512)


def test_alone_a_sequence_prices_with_the_surface_itself() -> None:
    base = surface()
    cost = SequenceCost(base, lambda: [])
    for m in (1, 3, 9, 40):
        assert cost.at(500)(m) == base.cost(m, "rows", 500)
    assert cost.undo is base.undo


def test_beside_others_a_sequence_pays_its_share_and_its_extra_ids() -> None:
    base = surface()
    cost = SequenceCost(base, lambda: [96, 96, 96])
    assert cost.at(96)(1) == pytest.approx(TABLE[4] / 4)
    assert cost.at(96)(5) == pytest.approx(TABLE[4] / 4 + TABLE[4])  # 4 more: a micro-batch
    assert cost.at(96)(5) == pytest.approx(batch_price(base, 5, "rows", 96, [96, 96, 96]))
    base.level = 2.0  # the shared level moves every sequence's prices
    assert cost.at(96)(1) == pytest.approx(TABLE[4] / 2)


def test_a_forward_moves_the_level_by_what_its_parts_predict() -> None:
    base = surface()
    observe_parts(base, [(1, 96, "last")], 19.0)  # a lone forward twice its point
    assert base.level == pytest.approx(1.1)
    base.level = 1.0
    four = [(1, 96, "last")] * 4
    observe_parts(base, four, parts_ms(base, [(1, 96)] * 4))  # a step as predicted
    assert base.level == 1.0
    observe_parts(base, four, 2 * parts_ms(base, [(1, 96)] * 4))  # not one sequence's point
    assert base.level == pytest.approx(1.1)


def test_in_a_full_batch_on_two_cores_a_likely_span_is_declined() -> None:
    # Alone, 8 ids kept 90% of the time are worth a forward of 9; beside three others
    # the step's average id costs 4.4 ms and the span's extra micro-batch more per id.
    base = surface()
    alone = SequenceCost(base, lambda: [])
    batched = SequenceCost(base, lambda: [96, 96, 96])
    assert choose_span(alone.at(96), [0.9] * 8, 8).length > 0
    assert choose_span(batched.at(96), [0.9] * 8, 8).length == 0


def test_the_prefill_budget_is_the_shortest_chunk_near_the_cheapest_per_id() -> None:
    assert prefill_budget(surface()) == 16
    gpu = CostSurface({0: {1: 5.0}}, {0: {1: 5.0, 16: 5.5, 512: 9.0}}, max_append=512)
    assert prefill_budget(gpu) == 512
