"""The prompt cache on real caches of both backends: conversations switch and come back."""

from __future__ import annotations

import pytest
import torch

from ffwd.engine.core.prompt_cache import PromptCache
from tests.engine.backends import make_backend

A = [3, 9, 4, 12, 7, 7, 1, 30, 22, 5, 8]
B = [40, 41, 2, 6, 18, 18, 50, 9]


@pytest.mark.parametrize("case", ["transformers:llama", "llamacpp:llama"])
def test_prompt_cache_switches_conversations_on_a_real_cache(case: str) -> None:
    b = make_backend(case)
    cache = PromptCache(1 << 30)
    long_a = [*A, *A, *A]
    for prompt in (long_a, B, [*long_a, 11]):
        cache.select(b, prompt)
        reused = b.prefill(prompt)
    assert reused == len(long_a)  # conversation A came back from the cache
    assert cache.stats.loads == 1 and cache.stats.saves == 2
    fresh = make_backend(case)
    fresh.prefill([*long_a, 11])
    torch.testing.assert_close(b.last_logits, fresh.last_logits, atol=1e-4, rtol=1e-4)
