"""The grammar in the decode loop, on a tiny random model with SmolLM2's vocabulary:
sampled output is always valid, and fast-forwarding never changes greedy output."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import jsonschema
import pytest

from ffwd.config import FillConfig
from ffwd.engine.core.decode import SpanPolicy, fixed_policy
from ffwd.engine.core.generate import generate
from ffwd.engine.events import GenerationResult
from ffwd.engine.sample.sampling import SamplingParams
from ffwd.engine.sample.text import ToolCalls
from ffwd.fill import FillPlan, FillSession, Proposal
from ffwd.fill.spans import SpanChoice
from ffwd.grammar import RequestGrammars
from ffwd.grammar.request import UNCHECKED
from ffwd.models import load_tokenizer
from ffwd.templates.choose import resolve_template
from ffwd.templates.formats import get_format
from ffwd.templates.render import render_chat
from ffwd.templates.rows import CompiledTools, compile_tools, default_eos_ids
from tests.engine.tiny_models import tiny_backend
from tests.unit._collection import template_for, written_formats

MODE = {
    "type": "object",
    "properties": {
        "mode": {"enum": ["eco", "turbo", "off"]},
        "level": {"type": "integer", "minimum": 0, "maximum": 99},
        "label": {"type": "string", "maxLength": 6},
        "on": {"type": "boolean"},
    },
    "required": ["mode", "on"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "set_mode", "parameters": MODE}},
    {"type": "function", "function": {"name": "ping", "parameters": {"type": "object"},
                                      "strict": True}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
USER = [{"role": "user", "content": "Turn eco mode on, label it home."}]
# Every format a template writes whose call grammar is checked (the others go free).
FORMATS = [f for f in written_formats() if f not in UNCHECKED]


@cache
def setup(fmt: str) -> tuple[Any, list[int], RequestGrammars, CompiledTools]:
    tok = load_tokenizer("default")
    resolved = resolve_template(tok, fmt, template_for(fmt))
    template, name = resolved.template, resolved.format_name
    eos = default_eos_ids(tok)
    # A random model needs no system prompt listing the tools: a short prompt is cheaper.
    prompt = tok.encode(render_chat(template, USER, tokenizer=tok), add_special_tokens=False)
    grammars = RequestGrammars(tok, template, name, len(tok), eos)
    compiled = compile_tools(tok, template, TOOLS, "required", eos, name)
    return tok, prompt, grammars, compiled


def run(fmt: str, fill: str, seed: int, temperature: float, backend: Any,
        max_tokens: int = 80) -> GenerationResult:
    tok, prompt, grammars, compiled = setup(fmt)
    return generate(
        backend, tok, prompt, SamplingParams(temperature=temperature, seed=seed),
        max_tokens=max_tokens, plan=compiled.plan,
        calls=ToolCalls(compiled.format, TOOLS, compiled.rules),
        fill=FillConfig(mode=fill, k=2, trace=True),  # type: ignore[arg-type]
        grammar=grammars.grammar(TOOLS, "required", False, None),
    )


def backend_for(fmt: str, seed: int = 0) -> Any:
    tok, *_ = setup(fmt)
    return tiny_backend(vocab=len(tok), eos=default_eos_ids(tok), seed=seed)


def parsed_call(fmt: str, text: str) -> tuple[str, dict[str, Any]]:
    parser = get_format(fmt).new_parser(TOOLS)
    parser.feed(text)
    parser.finish()
    assert len(parser.calls) == 1, text
    call = parser.calls[0]
    return call.name, json.loads(call.arguments)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_sampled_generation_is_a_valid_call(fmt: str) -> None:
    backend = backend_for(fmt)
    injected = 0
    for seed in range(50):
        result = run(fmt, "strict", seed, 1.0, backend, max_tokens=300)
        assert result.finish_reason == "tool_calls", result.text  # the grammar ends the turn
        name, args = parsed_call(fmt, result.text)
        assert [(c.name, json.loads(c.arguments)) for c in result.calls] == [(name, args)]
        jsonschema.validate(args, SCHEMAS[name])
        injected += result.stats.injected
    assert injected > 0


@pytest.mark.parametrize("fill", ["strict", "echo"])
@pytest.mark.parametrize("fmt", ["hermes", "mistral"])
def test_greedy_fill_with_grammar_is_identical_to_off_with_grammar(fmt: str, fill: str) -> None:
    forwards_off = forwards_fill = 0
    for seed in range(3):
        backend = backend_for(fmt, seed)
        off = run(fmt, "off", 0, 0.0, backend, max_tokens=60)
        on = run(fmt, fill, 0, 0.0, backend, max_tokens=60)
        assert on.token_ids == off.token_ids and on.text == off.text
        assert on.stats.grammar > 0
        forwards_off += off.forward_calls
        forwards_fill += on.forward_calls
    assert forwards_fill < forwards_off


def _cut_to(length: int) -> SpanPolicy:
    """Forward at most `length` ids of every verify span (0: decline them all)."""

    def decide(proposal: Proposal, session: FillSession) -> SpanChoice:
        return SpanChoice(min(length, len(proposal.ids)), False, 0.0, 1.0, 1.0)

    return decide


POLICIES = {"probe": fixed_policy(True), "combined": fixed_policy(False),
            "shortened": _cut_to(2), "declined": _cut_to(0)}


ECHO_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["label", "note"],
               "properties": {"label": {"type": "string", "maxLength": 30},
                              "note": {"type": "string", "maxLength": 30}}}


def echo_run(policy: str, params: SamplingParams, fill: str, seed: int = 0) -> GenerationResult:
    """A JSON reply under `ECHO_SCHEMA`, with echo proposing copies of what came before."""
    tok, _, grammars, _ = setup("hermes")
    quote = '{"label": "alpha beta gamma delta", "note": "epsilon zeta eta theta"}'
    prompt = tok.encode(f"Like {quote} or {quote}. Answer: ", add_special_tokens=False)
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": ECHO_SCHEMA}}
    return generate(
        backend_for("hermes", seed), tok, prompt, params, max_tokens=60, plan=FillPlan(),
        fill=FillConfig(mode=fill, k=2, trace=True),  # type: ignore[arg-type]
        grammar=grammars.grammar([], "none", True, rf), policy=POLICIES[policy],
    )


@pytest.mark.parametrize("policy", POLICIES)
def test_verify_spans_keep_the_grammar_where_the_output_is(policy: str) -> None:
    """Whether the span policy probes, forwards a verify span whole, shortens or
    declines it, the matcher stands after exactly the emitted ids (checked at every
    step under trace, rejected tails rolled back with the cache): greedy output equals
    decoding without fill, and sampled output (top-2, so copies are often rejected
    after a kept prefix) is valid."""
    greedy = SamplingParams(temperature=0.0)
    for seed in range(2):
        off = echo_run(policy, greedy, "off", seed)
        assert echo_run(policy, greedy, "echo", seed).token_ids == off.token_ids
    stats = []
    for seed in range(8):  # copies of a prompt a random model rarely writes: a few verify
        result = echo_run(policy, SamplingParams(temperature=1.0, top_k=2, seed=seed), "echo")
        jsonschema.validate(json.loads(result.text), ECHO_SCHEMA)
        stats.append(result.stats)
    if policy == "declined":
        assert sum(s.declined for s in stats) > 0 and sum(s.verify_events for s in stats) == 0
    else:
        assert sum(s.verify_accepted for s in stats) > 0
        assert sum(s.verify_rejected for s in stats) > 0
