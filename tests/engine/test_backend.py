"""HFBackend caches: rewind, checkpoint/restore and prefix reuse match a fresh prefill."""

from __future__ import annotations

import pytest
import torch
from tiny_models import tiny_backend

from ffwd.engine.hf import HFBackend

REWINDABLE = ["llama", "qwen2_sliding", "lfm2"]
RECURRENT = ["qwen3_next", "falcon_h1"]


def _fresh_logits(family: str, ids: list[int]) -> torch.Tensor:
    b = tiny_backend(family)
    b.prefill(ids)
    return b.last_logits


def _ids(n: int, seed: int = 0) -> list[int]:
    return torch.randint(0, 64, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize("family", REWINDABLE)
def test_rewind_matches_fresh_prefill(family: str) -> None:
    b = tiny_backend(family)
    assert b.can_rewind
    seq = _ids(40)
    b.prefill(seq[:20])
    g = torch.Generator().manual_seed(1)
    for _ in range(12):  # verify-like events: append a span, keep a prefix
        span = torch.randint(0, 64, (int(torch.randint(2, 6, (1,), generator=g)),), generator=g)
        rows = b.forward(span.tolist())
        assert rows.shape == (len(span), 64)
        b.rewind(int(torch.randint(0, len(span) + 1, (1,), generator=g)))
    held = list(b.cached_ids)
    assert b.cache_len == len(held)
    b.append([5])
    torch.testing.assert_close(b.last_logits, _fresh_logits(family, [*held, 5]))


@pytest.mark.parametrize("family", RECURRENT)
def test_recurrent_cache_restores_from_checkpoint(family: str) -> None:
    b = tiny_backend(family)
    seq = _ids(30)
    b.prefill(seq[:20])
    assert not b.can_rewind and b.can_checkpoint
    with pytest.raises(RuntimeError, match="cannot be rewound"):
        b.rewind(1)
    for cut in (0, 2, 5):
        cp = b.checkpoint()
        b.forward(seq[20:25])
        b.restore(cp)
        assert b.cached_ids == tuple(seq[:20])
        if cut:
            b.append(seq[20 : 20 + cut])
            cp2 = b.checkpoint()
            b.forward([1, 2, 3])
            b.restore(cp2)
            b.append([7])
            torch.testing.assert_close(
                b.last_logits, _fresh_logits(family, [*seq[: 20 + cut], 7])
            )
            b.prefill(seq[:20])  # a pure extension the other way round: reset
    b.append([9])
    torch.testing.assert_close(b.last_logits, _fresh_logits(family, [*seq[:20], 9]))


def test_sliding_window_refuses_to_rewind_past_what_it_holds() -> None:
    b = tiny_backend("qwen2_sliding")  # window 6
    b.prefill(_ids(20))
    b.forward([1, 2, 3])
    assert b.rewindable == 3
    with pytest.raises(RuntimeError, match="reaches past"):
        b.rewind(4)
    b.rewind(3)
    b.append([4])
    assert b.rewindable == 1


def test_mamba_appends_one_id_at_a_time() -> None:
    b = tiny_backend("mamba")
    assert b.max_append == 1 and not b.can_checkpoint
    seq = _ids(12)
    b.prefill(seq[:8])
    with pytest.raises(ValueError, match="max_append"):
        b.forward(seq[8:10])
    for t in seq[8:12]:
        b.append([t])
    torch.testing.assert_close(b.last_logits, _fresh_logits("mamba", seq))


def test_mamba_multi_id_append_really_loses_state() -> None:
    """Why mamba is limited to one id per forward (see SCAN_RESTARTS_ON_APPEND)."""
    b = tiny_backend("mamba")
    seq = _ids(12)
    b.prefill(seq[:8])
    b._max_append = 4  # bypass the guard on purpose
    b.forward(seq[8:12])
    assert not torch.allclose(b.last_logits, _fresh_logits("mamba", seq), atol=1e-4)


@pytest.mark.parametrize("family", ["llama", "qwen2_sliding", "qwen3_next"])
def test_prefill_reuses_the_common_prefix(family: str) -> None:
    b: HFBackend = tiny_backend(family)
    seq = _ids(50)
    assert b.prefill(seq[:30]) == 0
    calls = b.forward_calls
    assert b.prefill(seq[:40]) == 30  # extension
    assert b.forward_calls == calls + 1
    torch.testing.assert_close(b.last_logits, _fresh_logits(family, seq[:40]))
    # A full repeat reuses all but the last id (a cut of one: not for recurrent state).
    assert b.prefill(seq[:40]) == (0 if family == "qwen3_next" else 39)
    torch.testing.assert_close(b.last_logits, _fresh_logits(family, seq[:40]))
    other = [*seq[:20], *_ids(10, seed=5)]
    reused = b.prefill(other)
    assert reused == (20 if family == "llama" else 0)  # bounded caches cannot cut back far
    torch.testing.assert_close(b.last_logits, _fresh_logits(family, other))


def test_chunked_prefill_counts_forwards_and_matches() -> None:
    b = tiny_backend()  # prefill_chunk=64
    seq = _ids(150)
    b.prefill(seq)
    assert b.forward_calls == 3
    one = HFBackend(b.model, eos_ids=frozenset(), prefill_chunk=512)
    one.prefill(seq)
    torch.testing.assert_close(b.last_logits, one.last_logits)
