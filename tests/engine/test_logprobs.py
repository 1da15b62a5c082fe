"""Logprobs from the decode loop: the model's own log-probability of every emitted id,
sampled or injected, equal to what one teacher-forced forward over the whole sequence gives."""

from __future__ import annotations

import pytest
import torch

from ffwd.config import FillConfig
from ffwd.engine.core.decode import fixed_policy, token_logprob
from ffwd.engine.core.generate import Prepared, stream_generate
from ffwd.engine.events import TokenEvent
from ffwd.engine.hf import HFBackend
from ffwd.fill import FillPlan, FillRow
from tests.engine.tiny_models import CharTokenizer, repetitive_prompt, tiny_backend, tiny_model

TOK = CharTokenizer()


def chunks(prompt: list[int], fill: FillConfig | None = None, plan: FillPlan | None = None,
           top: int = 3, max_tokens: int = 24, **kw: object) -> list[TokenEvent]:
    prep = Prepared(prompt, max_tokens=max_tokens, plan=plan, fill=fill or FillConfig(),
                    logprobs=top)
    out = stream_generate(tiny_backend(), TOK, prep, **kw)  # type: ignore[arg-type]
    return [c for c in out if c.result is None]


def teacher_forced(prompt: list[int], ids: list[int]) -> torch.Tensor:
    """Row i: the log-probabilities of the id at output position i, from one forward."""
    backend = HFBackend(tiny_model(), eos_ids=frozenset(), prefill_chunk=256)
    rows = backend.forward([*prompt, *ids])
    return torch.log_softmax(rows[len(prompt) - 1 : len(prompt) - 1 + len(ids)], dim=-1)


def assert_model_own(prompt: list[int], got: list[TokenEvent]) -> None:
    ids = [c.id for c in got]
    ref = teacher_forced(prompt, ids)  # type: ignore[arg-type]
    for i, c in enumerate(got):
        assert c.logprob is not None, (i, c.origin)
        assert c.logprob == pytest.approx(float(ref[i, c.id]), abs=1e-4), i
        best = torch.topk(ref[i], 3)
        assert [a.id for a in c.top] == best.indices.tolist()


def test_sampled_ids_carry_their_logprob() -> None:
    prompt = repetitive_prompt(0)
    got = chunks(prompt)
    assert len(got) == 24 and all(c.origin == "sampled" for c in got)
    assert_model_own(prompt, got)


@pytest.mark.parametrize("probe", [True, False], ids=["probe-first", "combined"])
def test_verified_echo_ids_carry_the_rows_that_checked_them(probe: bool) -> None:
    prompt = repetitive_prompt(0)
    got = chunks(prompt, FillConfig(mode="echo", k=2), FillPlan(), policy=fixed_policy(probe))
    assert any(c.origin == "echo" for c in got)
    assert_model_own(prompt, got)


def test_asserted_ids_get_the_model_own_logprob_even_at_the_budget_end() -> None:
    prompt = repetitive_prompt(0)
    off = chunks(prompt, max_tokens=10)
    span = (60, 61, 62, 63, 60, 61)
    plan = FillPlan(rows=(FillRow((off[3].id,), span, "scaffold"),))
    # The span ends exactly at max_tokens: its rows are still forwarded when logprobs are asked.
    got = chunks(prompt, FillConfig(mode="strict"), plan, max_tokens=10)
    assert [c.origin for c in got[4:]] == ["template"] * 6
    assert_model_own(prompt, got)
    # An unlikely injected id reports how unlikely the model found it.
    assert min(c.logprob or 0.0 for c in got[4:]) < max(c.logprob or 0.0 for c in got[:4])


def test_forced_opening_rows_start_from_the_prefill() -> None:
    prompt = repetitive_prompt(0)
    plan = FillPlan(rows=(FillRow(tuple(prompt[-2:]), (60, 61, 62, 63), "scaffold"),))
    got = chunks(prompt, FillConfig(mode="strict"), plan, max_tokens=12)
    assert [c.origin for c in got[:4]] == ["template"] * 4
    assert_model_own(prompt, got)


def test_no_logprobs_unless_asked() -> None:
    backend = tiny_backend()
    out = [c for c in stream_generate(backend, TOK, Prepared(repetitive_prompt(0), max_tokens=4))
           if c.result is None]
    assert out and all(c.logprob is None and not c.top for c in out)


def test_token_logprob() -> None:
    row = torch.tensor([0.0, 1.0, 2.0])
    logprob, top = token_logprob(row, 0, top=2)
    assert logprob == pytest.approx(float(torch.log_softmax(row, -1)[0]))
    assert [a.id for a in top] == [2, 1]
