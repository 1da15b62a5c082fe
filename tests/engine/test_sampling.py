"""Sampler processors, seeding, and the losslessness of `verify_span` under sampling."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Sequence

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import ffwd.engine.core.decode as loop
from ffwd.engine.core.decode import fixed_policy, generate_step
from ffwd.engine.core.generate import drive
from ffwd.engine.sample.processors import (
    OutputCounts,
    apply_min_p,
    apply_presence_frequency,
    apply_repetition_penalty,
    apply_top_k,
    apply_top_p,
)
from ffwd.engine.sample.sampling import Sampler, SamplingParams, SpanVerdict, verify_span
from ffwd.fill import FillPlan, FillSession, Proposal, TokenView
from tests.engine.tiny_models import tiny_backend


def test_truncation_processors() -> None:
    logits = torch.log(torch.tensor([0.5, 0.25, 0.15, 0.1]))
    assert torch.isinf(apply_top_k(logits, 2)).tolist() == [False, False, True, True]
    # 0.5 + 0.25 reaches 0.7: the rest goes.
    assert torch.isinf(apply_top_p(logits, 0.7)).tolist() == [False, False, True, True]
    # min_p 0.25 of the top (0.5) drops ids under 0.125.
    assert torch.isinf(apply_min_p(logits, 0.25)).tolist() == [False, False, False, True]


def test_top_p_matches_a_full_sort() -> None:
    g = torch.Generator().manual_seed(0)
    for scale in (0.5, 3.0, 10.0):
        logits = torch.randn(5000, generator=g) * scale
        probs, order = torch.sort(torch.softmax(logits, -1), descending=True)
        drop = torch.zeros(5000, dtype=torch.bool)
        for p in (0.3, 0.9, 0.99):
            drop[order] = (torch.cumsum(probs, -1) - probs) >= p
            assert torch.equal(torch.isinf(apply_top_p(logits, p)), drop)


def test_penalties() -> None:
    logits = torch.tensor([2.0, -2.0, 1.0])
    rep = apply_repetition_penalty(logits, torch.tensor([True, True, False]), 2.0)
    assert rep.tolist() == [1.0, -4.0, 1.0]
    pf = apply_presence_frequency(logits, torch.tensor([0.0, 0.0, 2.0]), presence=0.5,
                                  frequency=0.25)
    assert pf.tolist() == [2.0, -2.0, 0.0]


@given(st.lists(st.lists(st.integers(0, 9), max_size=12), min_size=1, max_size=8),
       st.lists(st.integers(0, 9), max_size=5))
def test_output_counts_follow_the_output_wherever_it_goes(outputs: list[list[int]],
                                                          prompt: list[int]) -> None:
    """Grown in place (the loop's output), or cut back and rewritten (a rejected span):
    the counts are always the output's own."""
    counts = OutputCounts(prompt)
    grown: list[int] = []
    for out in outputs:
        grown.extend(out)
        for generated in (grown, out):  # the same list grown, then another list
            got = counts.update(generated, 10)
            assert got.tolist() == torch.bincount(torch.tensor(generated, dtype=torch.long),
                                                  minlength=10).float().tolist()
            assert counts.seen().tolist() == [i in prompt or i in generated for i in range(10)]


def test_seeded_draws_are_tied_to_the_seed_and_the_position() -> None:
    logits = torch.zeros(50)
    params = SamplingParams(temperature=1.0, seed=7)

    def run(sampler: Sampler) -> list[int]:
        out: list[int] = []
        for _ in range(20):
            out.append(sampler.sample(logits, out))
        return out

    run1, run2 = run(Sampler(params)), run(Sampler(params))
    assert run1 == run2 and len(set(run1)) > 5  # reproducible, and not one id over and over
    assert run(Sampler(SamplingParams(temperature=1.0, seed=8))) != run1
    assert run(Sampler(SamplingParams(temperature=1.0))) != run(Sampler(SamplingParams(
        temperature=1.0)))  # no seed: a fresh one per request


def test_sampled_verify_keeps_exactly_what_plain_sampling_draws() -> None:
    # Any proposal is kept where plain decoding with the same seed draws it, and the first
    # disagreement is replaced by plain decoding's own draw: the same ids, not just the
    # same distribution, however the output is cut into spans.
    g = torch.Generator().manual_seed(1)
    rows = torch.randn(12, 40, generator=g)
    sampler = Sampler(SamplingParams(temperature=0.9, top_p=0.95, seed=11))
    plain: list[int] = []
    for row in rows:
        plain.append(sampler.sample(row, plain))
    for cut in range(11):
        proposal = [*plain[cut:], 0][: 12 - cut - 1]
        proposal[len(proposal) // 2] = (proposal[len(proposal) // 2] + 1) % 40 if proposal else 0
        verdict = verify_span(rows[cut:], proposal, sampler, plain[:cut])
        assert proposal[: verdict.accepted] == plain[cut : cut + verdict.accepted]
        assert verdict.next_id == plain[cut + verdict.accepted]


def test_greedy_verify_span_keeps_the_argmax_prefix() -> None:
    rows = torch.eye(5)[[1, 2, 3, 4]]  # row j's argmax: j + 1
    sampler = Sampler(SamplingParams())
    assert verify_span(rows, [1, 2, 3], sampler) == SpanVerdict(3, 4)
    assert verify_span(rows, [1, 0, 3], sampler) == SpanVerdict(1, 2)
    assert verify_span(rows[:2], [1, 2], sampler) == SpanVerdict(2, None)
    # Greedy with a logit bias goes through the processed argmax.
    biased = Sampler(SamplingParams(logit_bias={0: 10.0}))
    assert verify_span(rows, [0, 0], biased) == SpanVerdict(2, 0)


def test_a_tie_margin_keeps_near_ties_only_and_only_when_greedy() -> None:
    # Row j: the argmax is id 0 at 2.0, id 1 trails it by 0.3 and id 2 by 1.5.
    rows = torch.tensor([[2.0, 1.7, 0.5, -float("inf")]] * 3)
    greedy = Sampler(SamplingParams())
    assert verify_span(rows, [1, 1], greedy) == SpanVerdict(0, 0)  # exact: the argmax only
    assert verify_span(rows, [1, 1], greedy, margin=0.4) == SpanVerdict(2, 0)  # a near-tie
    assert verify_span(rows, [1, 2], greedy, margin=0.4) == SpanVerdict(1, 0)  # 1.5 behind
    assert verify_span(rows, [3], greedy, margin=9.0) == SpanVerdict(0, 0)  # never -inf
    # Through the processors too (a logit bias makes id 2 the near-tie).
    biased = Sampler(SamplingParams(logit_bias={2: 1.3}))
    assert verify_span(rows, [2], biased, margin=0.4) == SpanVerdict(1, 0)
    # Sampling keeps exactly its own draws: the margin does not apply.
    sampled = Sampler(SamplingParams(temperature=1.0, seed=3))
    plain = verify_span(rows, [1, 1], sampled)
    assert verify_span(rows, [1, 1], sampled, margin=0.4) == plain


# --- losslessness ----------------------------------------------------------------

VOCAB = 5
SPAN = (1, 2, 3)


class FixedVerifySource:
    """Proposes the same span after every sampled id, under `verify`."""

    name = "fixed"
    window_needed = 1

    def propose(self, view: TokenView) -> Proposal | None:
        return Proposal(SPAN, "verify", "echo")

    def observe(self, ids: Sequence[int]) -> None:
        pass


def _exact_pairs(backend: object, prompt: list[int]) -> dict[tuple[int, int], float]:
    """P(second, third generated id) under plain sampling at temperature 1."""
    model = backend.model  # type: ignore[attr-defined]

    def probs(ids: list[int]) -> torch.Tensor:
        with torch.no_grad():
            return torch.softmax(model(input_ids=torch.tensor([ids])).logits[0, -1].float(), -1)

    p1 = probs(prompt)
    out: Counter[tuple[int, int]] = Counter()
    for a in range(VOCAB):
        p2 = probs([*prompt, a])
        for b in range(VOCAB):
            p3 = probs([*prompt, a, b])
            for c in range(VOCAB):
                out[(b, c)] += float(p1[a] * p2[b] * p3[c])
    return dict(out)


def _sample_pairs(
    backend: object, prompt: list[int], runs: int, fill: bool, probe: bool
) -> Counter:
    counts: Counter[tuple[int, int]] = Counter()
    for seed in range(runs):
        backend.prefill(prompt)  # type: ignore[attr-defined]
        session = FillSession(FillPlan(), prompt, sources=[FixedVerifySource()]) if fill else None
        sampler = Sampler(SamplingParams(temperature=1.0, seed=seed))
        ids = [e.id for e in drive(backend, generate_step(  # type: ignore[arg-type]
            backend, sampler, max_tokens=3, session=session, policy=fixed_policy(probe),  # type: ignore[arg-type]
        ))]
        counts[(ids[1], ids[2])] += 1
    return counts


def _p_value(counts: Counter, exact: dict[tuple[int, int], float], runs: int) -> float:
    stat = sum((counts[k] - runs * p) ** 2 / (runs * p) for k, p in exact.items())
    df = len(exact) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2), torch.tensor(stat / 2)))


def _argmax_acceptance(
    logits: torch.Tensor, proposed: Sequence[int], sampler: Sampler, generated: Sequence[int] = (),
    margin: float = 0.0,
) -> SpanVerdict:
    """The classic mistake: keep a proposed id only where it is the argmax."""
    for j, tok in enumerate(proposed):
        if int(logits[j].argmax()) != tok:
            return SpanVerdict(j, sampler.sample(logits[j]))
    n = len(proposed)
    return SpanVerdict(n, sampler.sample(logits[n]) if logits.shape[0] > n else None)


def test_sampling_verify_is_lossless(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chi-square of (2nd, 3rd) ids against the exact plain-sampling distribution."""
    runs = 1000
    backend = tiny_backend(vocab=VOCAB, scale=3.0, seed=3)
    prompt = [0, 4, 2, 1, 3, 0]
    exact = _exact_pairs(backend, prompt)
    assert min(exact.values()) * runs > 5  # chi-square needs expected counts >= 5
    # The span must be plausible but not certain, or a wrong rule could pass.
    assert all(p < 0.9 for p in exact.values())

    p_values = {"off": _p_value(_sample_pairs(backend, prompt, runs, False, True), exact, runs)}
    for probe in (True, False):
        counts = _sample_pairs(backend, prompt, runs, fill=True, probe=probe)
        p_values[f"probe={probe}"] = _p_value(counts, exact, runs)
    assert all(p > 1e-3 for p in p_values.values()), p_values

    monkeypatch.setattr(loop, "verify_span", _argmax_acceptance)
    wrong = _sample_pairs(backend, prompt, runs, fill=True, probe=False)
    assert _p_value(wrong, exact, runs) < 1e-8


def test_exact_pairs_sum_to_one() -> None:
    backend = tiny_backend(vocab=VOCAB, scale=3.0, seed=3)
    exact = _exact_pairs(backend, [0, 1])
    assert abs(sum(exact.values()) - 1) < 1e-5
    assert set(exact) == set(itertools.product(range(VOCAB), repeat=2))


# --- a mask with no finite weight (issue 30: the grammar 500) --------------------


class OnlyIds:
    """A `TokenConstraint` that allows `ids` only, whatever the output."""

    position = 0

    def __init__(self, *ids: int) -> None:
        self.ids = list(ids)

    def mask(self, logits: torch.Tensor, generated: Sequence[int]) -> torch.Tensor:
        keep = torch.zeros_like(logits, dtype=torch.bool)
        keep[self.ids] = True
        return logits.masked_fill(~keep, -float("inf"))


@pytest.mark.parametrize("temperature", [0.0, 5e-324, 1e-300, 1e-30, 0.7])
def test_a_vanishing_temperature_draws_the_allowed_argmax(temperature: float) -> None:
    # 3 / 1e-300 overflows to inf, and inf - inf is NaN in the softmax: the draw fell off
    # the end of the CDF onto the last id, which the mask forbids (schemathesis' 500:
    # "grammar refused id 49151", the vocabulary's last id).
    logits = torch.tensor([9.0, 3.0, 2.5, 1.0, 0.0, -1.0])
    sampler = Sampler(SamplingParams(temperature=temperature, seed=1), (), OnlyIds(1, 2))
    drawn = {sampler.sample(logits, [0] * i) for i in range(20)}
    assert drawn <= {1, 2}
    if temperature < 1e-20:  # a temperature this close to 0 is greedy
        assert drawn == {1}
    for proposed in ([1], [2], [5]):  # a verified position draws as plain decoding does
        verdict = verify_span(logits[None], proposed, sampler)
        assert verdict.accepted == (verdict.next_id is None) and (verdict.next_id or 1) in {1, 2}


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_mask_over_ids_the_model_rules_out_still_takes_an_allowed_id(
        temperature: float) -> None:
    params = SamplingParams(temperature=temperature, top_p=0.5, seed=3)
    inf = float("inf")
    # The mask leaves ids whose logits are -inf: no finite weight anywhere.
    logits = torch.tensor([5.0, -inf, 4.0, -inf, 1.0])
    assert Sampler(params, (), OnlyIds(3, 1)).sample(logits) == 1  # the first allowed id
    # Among allowed ids, a finite logit wins over -inf; NaN counts as no weight.
    logits = torch.tensor([5.0, float("nan"), 4.0, -2.0, -inf])
    assert Sampler(params, (), OnlyIds(1, 3, 4)).sample(logits) == 3
    probs = Sampler(params, (), OnlyIds(1, 3, 4)).probs(logits)
    assert probs.tolist() == [0.0, 0.0, 0.0, 1.0, 0.0]
