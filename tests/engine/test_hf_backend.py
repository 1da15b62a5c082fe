"""What only the transformers backend has: bounded caches and one-id-at-a-time scans."""

from __future__ import annotations

import pytest
import torch

from ffwd.engine.hf import HFBackend
from tests.engine.tiny_models import tiny_backend


def _fresh_logits(family: str, ids: list[int]) -> torch.Tensor:
    b = tiny_backend(family)
    b.prefill(ids)
    return b.last_logits


def _ids(n: int, seed: int = 0) -> list[int]:
    return torch.randint(0, 64, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


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


def test_chunked_prefill_matches_one_forward() -> None:
    b = tiny_backend()  # prefill_chunk=64
    seq = _ids(150)
    b.prefill(seq)
    one = HFBackend(b.model, eos_ids=frozenset(), prefill_chunk=512)
    one.prefill(seq)
    torch.testing.assert_close(b.last_logits, one.last_logits)
