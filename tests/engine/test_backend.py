"""The Backend contract, one suite over every backend and cache kind (`backends.CASES`).

A backend's cache must always behave as if it had been filled in one go with
the ids it reports: after prefix reuse, rewinds, refused rewinds, restores
and state loads, the next logits match a fresh backend that never went
anywhere else.
"""

from __future__ import annotations

import pytest
import torch

from tests.engine.backends import ATTENTION, CASES, CHUNK, RECURRENT, make_backend

# float32 rounding between one forward of many ids and several of few; llama.cpp
# attends over an f16 cache whose rounding also follows how many cells the cache
# spans (up to ~0.015 on the tiny models, 0 on the embedded one). A wrong cache
# (a window that lost ids) is off by whole units.
ATOL = {"transformers": 1e-4, "llamacpp": 0.05, "llamacpp-gpu": 0.05, "llamacpp-seq": 0.05}


def ids(n: int, seed: int = 0) -> list[int]:
    return torch.randint(3, 64, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def fresh(case: str, seq: list[int]) -> torch.Tensor:
    b = make_backend(case)
    b.prefill(seq)
    return b.last_logits


def close(a: torch.Tensor, b: torch.Tensor, case: str) -> None:
    torch.testing.assert_close(a, b, atol=ATOL[case.split(":")[0]], rtol=1e-4)


@pytest.fixture(params=CASES)
def case(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_cache_kind_is_reported(case: str) -> None:
    b = make_backend(case)
    b.prefill(ids(10))
    assert b.can_rewind == (case in ATTENTION) and b.can_checkpoint
    assert (b.rewindable == 0) == (case in RECURRENT)


def test_prefill_reuses_the_longest_cached_prefix(case: str) -> None:
    b = make_backend(case)
    seq = ids(50)
    assert b.prefill(seq[:30]) == 0
    calls = b.forward_calls
    assert b.prefill(seq[:40]) == 30  # an extension forwards only the new ids
    assert b.forward_calls == calls + 1
    close(b.last_logits, fresh(case, seq[:40]), case)
    # A repeat forwards its last id again: a cut of one, where the cache can cut.
    assert b.prefill(seq[:40]) == (39 if b.rewindable >= 1 else 0)
    close(b.last_logits, fresh(case, seq[:40]), case)
    other = [*seq[:20], *ids(10, seed=5)]
    can_cut = b.cache_len - 20 <= b.rewindable
    assert b.prefill(other) == (20 if can_cut else 0)
    close(b.last_logits, fresh(case, other), case)


def test_forward_returns_every_row_and_append_the_last(case: str) -> None:
    b = make_backend(case)
    head, span, tail = ids(20), ids(5, seed=1), ids(3, seed=2)
    b.prefill(head)
    calls = b.forward_calls
    rows = b.forward(span)
    assert rows.shape == (5, b.vocab_size) and rows.dtype == torch.float32
    for j in range(5):
        close(rows[j], fresh(case, [*head, *span[: j + 1]]), case)
    last = b.append(tail)
    assert last.shape == (b.vocab_size,)
    close(last, fresh(case, [*head, *span, *tail]), case)
    assert torch.equal(b.last_logits, last)
    assert b.forward_calls == calls + 2 and b.cached_ids == (*head, *span, *tail)


@pytest.mark.parametrize("case", ATTENTION)
def test_rewind_then_continue_is_as_if_never_there(case: str) -> None:
    # 440 ids: past a sliding window and past what a window-sized cache would hold.
    b, twin = make_backend(case), make_backend(case)
    prompt = ids(440)
    b.prefill(prompt)
    twin.prefill(prompt)
    g = torch.Generator().manual_seed(1)
    for _ in range(12):  # verify-like events: append a span, keep a prefix of it
        n, seed = torch.randint(2, 6, (1,), generator=g), torch.randint(0, 999, (1,), generator=g)
        span = ids(int(n), seed=int(seed))
        b.forward(span)
        kept = int(torch.randint(0, len(span) + 1, (1,), generator=g))
        b.rewind(len(span) - kept)
        if kept:
            twin.append(span[:kept])
    assert b.cached_ids == twin.cached_ids
    close(b.append([5]), twin.append([5]), case)
    close(b.last_logits, fresh(case, [*b.cached_ids]), case)
    # Far back, to where the window had long moved on (a prompt that shares 100 ids).
    if b.rewindable >= b.cache_len - 100:
        b.rewind(b.cache_len - 100)
        close(b.append([6, 7]), fresh(case, [*prompt[:100], 6, 7]), case)


def test_rewind_refuses_what_it_cannot_do(case: str) -> None:
    b = make_backend(case)
    seq = ids(24)
    b.prefill(seq[:20])
    b.forward(seq[20:])
    with pytest.raises(ValueError):
        b.rewind(25)
    with pytest.raises(ValueError):
        b.rewind(-1)
    if b.rewindable < b.cache_len:
        with pytest.raises(RuntimeError, match=r"cannot be rewound|reaches past"):
            b.rewind(b.rewindable + 1)
    assert b.cached_ids == tuple(seq)  # a refusal leaves the cache as it was
    close(b.append([7]), fresh(case, [*seq, 7]), case)


def test_checkpoint_restore_returns_to_the_same_cache(case: str) -> None:
    b = make_backend(case)
    seq = ids(30)
    b.prefill(seq[:20])
    for cut in (0, 2, 5):
        cp = b.checkpoint()
        b.forward(seq[20:25])
        b.restore(cp)
        assert b.cached_ids == tuple(seq[:20])
        if cut:
            b.append(seq[20 : 20 + cut])
            cp2 = b.checkpoint()
            b.forward([11, 12, 13])
            b.restore(cp2)
            close(b.append([7]), fresh(case, [*seq[: 20 + cut], 7]), case)
            b.prefill(seq[:20])  # back to the 20 ids for the next round
    close(b.append([9]), fresh(case, [*seq[:20], 9]), case)


def test_a_saved_state_continues_like_a_fresh_prefill(case: str) -> None:
    a, other = ids(11), ids(8, seed=3)
    b = make_backend(case)
    b.prefill(a)
    state = b.save_state()
    assert state.ids == tuple(a) and state.nbytes > 0
    b.prefill(other)  # another conversation takes the cache
    b.load_state(state)
    assert b.cached_ids == tuple(a)
    assert b.prefill([*a, 11, 13]) == len(a)  # the next turn of conversation a
    close(b.last_logits, fresh(case, [*a, 11, 13]), case)


def test_forward_calls_count_every_forward_and_none_exceeds_max_append(case: str) -> None:
    b = make_backend(case)
    assert b.max_append == CHUNK
    b.prefill(ids(150))  # chunks of 64: three forwards
    assert b.forward_calls == 3
    b.forward([4, 5])
    b.append([6])
    assert b.forward_calls == 5
    with pytest.raises(ValueError, match="max_append"):
        b.forward(ids(CHUNK + 1))
    assert b.forward_calls == 5 and b.cache_len == 153


def test_eos_ids_are_the_models_own(case: str) -> None:
    assert make_backend(case, eos=(2,)).eos_ids == frozenset({2})
    assert make_backend(case).eos_ids == frozenset()


def test_trims_freely_only_for_plain_attention(case: str) -> None:
    b = make_backend(case)
    b.prefill(ids(11))
    assert b.trims_freely == (case.endswith(":llama"))


@pytest.mark.parametrize("case", ATTENTION)
def test_a_loaded_state_rewinds_only_as_far_as_it_holds(case: str) -> None:
    seq = ids(40)
    b = make_backend(case)
    b.prefill(seq[:30])
    state = b.save_state()
    b.prefill(ids(8, seed=3))
    b.load_state(state)
    depth = b.rewindable
    if depth < 30:  # a window's worth (or any) of the older ids are not in the state
        with pytest.raises(RuntimeError, match="reaches past"):
            b.rewind(depth + 1)
        assert b.cached_ids == tuple(seq[:30])
    b.rewind(depth)  # as far as it says is always right
    close(b.append(seq[30 - depth : 35]), fresh(case, seq[:35]), case)
