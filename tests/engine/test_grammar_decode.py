"""The grammar in the decode loop, on a tiny random model with SmolLM2's vocabulary:
sampled output is always valid, and fast-forwarding never changes greedy output."""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import jsonschema
import pytest
from tiny_models import tiny_backend

from ffwd.config import FillConfig
from ffwd.engine.generate import GenerationResult, generate
from ffwd.engine.sampling import SamplingParams
from ffwd.fill import FillPlan
from ffwd.grammar import RequestGrammars
from ffwd.models import load_tokenizer
from ffwd.templates.formats import FORMATS, get_format
from ffwd.templates.render import render_chat, resolve_template
from ffwd.templates.rows import CompiledTools, compile_tools, default_eos_ids

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


@cache
def setup(fmt: str) -> tuple[Any, list[int], RequestGrammars, CompiledTools]:
    tok = load_tokenizer("default")
    template, name = resolve_template(tok, fmt)
    eos = default_eos_ids(tok)
    # A random model needs no system prompt listing the tools: a short prompt is cheaper.
    prompt = tok.encode(render_chat(template, USER, tokenizer=tok), add_special_tokens=False)
    grammars = RequestGrammars(tok, template, name, len(tok), eos)
    compiled = compile_tools(tok, template, TOOLS, "required", eos, name)
    return tok, prompt, grammars, compiled


def run(fmt: str, fill: str, seed: int, temperature: float, backend: Any,
        max_tokens: int = 80) -> GenerationResult:
    tok, prompt, grammars, compiled = setup(fmt)
    constraint = grammars.for_request(TOOLS, "required", parallel=False)
    return generate(
        backend, tok, prompt, SamplingParams(temperature=temperature, seed=seed),
        max_tokens=max_tokens, plan=compiled.plan, strict_context=compiled.new_context(),
        fill=FillConfig(fill=fill, k=2, trace=True), constraint=constraint,  # type: ignore[arg-type]
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
    for seed in range(50):  # x 4 formats: 200 generations
        result = run(fmt, "strict", seed, 1.0, backend)
        assert result.finish_reason == "stop", result.text  # the grammar ends the turn
        name, args = parsed_call(fmt, result.text)
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


def test_rejected_echo_spans_roll_the_grammar_back() -> None:
    """Echo copies a JSON reply quoted in the prompt; the random model rejects most of
    each copy, so the matcher is rolled back with the cache (checked every step)."""
    tok, _, grammars, _ = setup("hermes")
    quote = '{"label": "alpha beta gamma delta", "note": "epsilon zeta eta theta"}'
    prompt = tok.encode(f"Like {quote} or {quote}. Answer: ", add_special_tokens=False)
    schema = {"type": "object", "additionalProperties": False, "required": ["label", "note"],
              "properties": {"label": {"type": "string", "maxLength": 30},
                             "note": {"type": "string", "maxLength": 30}}}
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    events = rejected = 0
    for seed in range(3):
        backend = backend_for("hermes", seed)
        outputs = []
        for fill in ("off", "echo"):
            result = generate(
                backend, tok, prompt, SamplingParams(temperature=0.0), max_tokens=60,
                plan=FillPlan(), fill=FillConfig(fill=fill, k=2, trace=True),  # type: ignore[arg-type]
                constraint=grammars.for_request([], "none", response_format=rf),
            )
            outputs.append(result.token_ids)
        assert outputs[0] == outputs[1]
        events += result.stats.verify_events
        rejected += result.stats.verify_rejected
    assert events > 0 and rejected > 0
