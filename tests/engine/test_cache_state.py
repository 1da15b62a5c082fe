"""save_state/load_state (the prompt cache's primitive) on every cache kind."""

from __future__ import annotations

import pytest
import torch
from tiny_models import tiny_backend

from ffwd.serve.prompt_cache import PromptCache

A = [3, 9, 4, 12, 7, 7, 1, 30, 22, 5, 8]
B = [40, 41, 2, 6, 18, 18, 50, 9]


def fresh_logits(family: str, ids: list[int]) -> torch.Tensor:
    b = tiny_backend(family)
    b.prefill(ids)
    return b.last_logits


@pytest.mark.parametrize("family", ["llama", "qwen2_sliding", "lfm2", "qwen3_next", "falcon_h1"])
def test_a_saved_state_continues_like_a_fresh_prefill(family: str) -> None:
    b = tiny_backend(family)
    b.prefill(A)
    state = b.save_state()
    assert state.ids == tuple(A) and state.nbytes > 0
    b.prefill(B)  # another conversation takes the cache
    b.load_state(state)
    assert b.cached_ids == tuple(A)
    reused = b.prefill([*A, 11, 13])  # the next turn of conversation A
    assert reused == len(A)
    torch.testing.assert_close(b.last_logits, fresh_logits(family, [*A, 11, 13]))


def test_trims_freely_only_for_plain_attention() -> None:
    assert tiny_backend("llama").trims_freely
    for family in ("qwen2_sliding", "lfm2", "qwen3_next"):
        b = tiny_backend(family)
        b.prefill(A)
        assert not b.trims_freely, family


def test_prompt_cache_switches_conversations_on_a_real_cache() -> None:
    b = tiny_backend("llama")
    cache = PromptCache(1 << 30)
    long_a = [*A, *A, *A]
    for prompt in (long_a, B, [*long_a, 11]):
        cache.select(b, prompt)
        reused = b.prefill(prompt)
    assert reused == len(long_a)  # conversation A came back from the cache
    assert cache.stats.loads == 1 and cache.stats.saves == 2
    torch.testing.assert_close(b.last_logits, fresh_logits("llama", [*long_a, 11]))
