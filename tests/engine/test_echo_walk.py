"""The model-free echo replay (`tools.acceptance`) against the real decode loop."""

from __future__ import annotations

import pytest

from ffwd.engine.core.decode import fixed_policy
from tests.engine.test_generate import ECHO, run
from tests.engine.tiny_models import repetitive_prompt
from tools.acceptance import echo_walk, position_rates


@pytest.mark.parametrize("seed", range(4))
def test_walk_predicts_what_whole_span_verify_keeps(seed: int) -> None:
    # Greedy verify keeps exactly the proposed ids the plain output would have
    # written, so replaying echo over that output predicts the loop's gain.
    prompt = repetitive_prompt(seed)
    off = run("llama", prompt)
    echo = run("llama", prompt, ECHO, policy=fixed_policy(False))
    assert echo.token_ids == off.token_ids
    config = ECHO.echo_config()
    assert config is not None
    walk = echo_walk(prompt, off.token_ids, config)
    kept = sum(s.accepted for s in walk)
    assert kept == echo.stats.verify_accepted
    assert sum(s.proposed - s.accepted for s in walk) == echo.stats.verify_rejected
    assert echo.forward_calls == len(walk) + 1  # one step per decode forward, plus prefill
    assert off.forward_calls == len(off.token_ids)
    tested, accepted = zip(*position_rates([walk], 64), strict=True)
    assert accepted[0] <= tested[0] == sum(s.proposed > 0 for s in walk)
