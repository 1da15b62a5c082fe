"""`ffwd.bench.agreement` on the tiny models: what it counts, and that it counts positions
the way the decode loop would see them."""

from __future__ import annotations

import pytest

from ffwd.bench import agreement
from tests.engine.backends import make_backend


@pytest.mark.parametrize("case", ["transformers:llama", "llamacpp:llama"])
def test_batched_and_one_id_forwards_agree_on_every_position(case: str) -> None:
    b = make_backend(case, eos=[2])
    prompt = [5, 9, 14, 3, 27, 11]
    ids, single = agreement.greedy_one_by_one(b, prompt, 30)
    assert len(ids) == 30 and 2 not in ids  # end ids are masked: every prompt runs full length
    multi = agreement.batched(b, prompt, ids, span=8)
    assert multi.shape == single.shape == (30, b.vocab_size)
    result = agreement.measure(b, [prompt, prompt[:3]], tokens=30, span=8)
    below = result["below"]
    assert (below["positions"], below["flips"], result["from"]["positions"]) == (60, 0, 0)
    assert below["max_abs_diff"] < 0.05
    # The one-id row and the warm prefills (all but 1, 2 and 16 ids reused) against a cold one.
    assert result["prefill"]["positions"] == 2 * 4 and result["prefill"]["flips"] == 0
