"""Greedy decoding under a grammar checks the raw argmax first (`GrammarConstraint.allows`)
and builds the mask only when the grammar refuses it. That shortcut must pick exactly
the masked argmax: generated tool schemas, both tool choices, the real tokenizer, random
logits and random walks through what the grammar allows."""

from __future__ import annotations

import random
from typing import Any

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ffwd.engine.sample.sampling import Sampler, SamplingParams
from ffwd.grammar import GrammarConstraint
from tests.unit._tokenizers import tokenizer
from tests.unit.test_closed_objects import SCHEMAS, grammars

STEPS = 40


def tool_constraint(schema: dict[str, Any], choice: str) -> GrammarConstraint:
    tools = [{"type": "function", "function": {"name": "act", "parameters": schema}}]
    made = grammars().for_request(tools, choice)
    assert made is not None
    return made


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(schema=SCHEMAS, choice=st.sampled_from(["auto", "required"]),
       seed=st.integers(0, 2**32 - 1))
def test_allows_says_what_the_mask_says(schema: dict[str, Any], choice: str, seed: int) -> None:
    rng = random.Random(seed)
    c = tool_constraint(schema, choice)
    width = len(tokenizer("default"))
    zeros = torch.zeros(width)
    ids: list[int] = []
    for _ in range(STEPS):
        probe = [rng.randrange(width) for _ in range(32)] + sorted(grammars().eos_ids)
        said = [c.allows(t, ids) for t in probe]  # before the mask: llguidance's own check
        allowed = torch.isfinite(c.mask(zeros, ids))
        assert said == [bool(allowed[t]) for t in probe]
        assert [c.allows(t, ids) for t in probe] == said  # and from the computed mask
        choices = allowed.nonzero().flatten().tolist()
        ids.append(rng.choice(choices))
        if ids[-1] in grammars().eos_ids:
            break


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(schema=SCHEMAS, choice=st.sampled_from(["auto", "required"]),
       seed=st.integers(0, 2**32 - 1))
def test_greedy_under_a_grammar_takes_the_masked_argmax(
        schema: dict[str, Any], choice: str, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    width = len(tokenizer("default"))
    fast = Sampler(SamplingParams(temperature=0.0), (), tool_constraint(schema, choice))
    reference = tool_constraint(schema, choice)
    ids: list[int] = []
    for _ in range(STEPS):
        logits = torch.randn(width, generator=gen) * 4
        if ids and seed % 2:  # half the walks favour an id the grammar may refuse
            logits[ids[-1]] += 50.0
        want = int(reference.mask(logits, ids).argmax())
        assert fast.sample(logits, ids) == want
        ids.append(want)
        if want in grammars().eos_ids:
            break
