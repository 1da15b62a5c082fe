"""A forced Hermes tool call on the embedded model: strict rows fire and the call parses."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ffwd.config import FillConfig
from ffwd.engine.generate import generate
from ffwd.models import load_backend, load_tokenizer
from ffwd.templates.render import render_chat, resolve_template
from ffwd.templates.rows import compile_tools, default_eos_ids

pytestmark = pytest.mark.slow

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        }, "required": ["city"]},
    }},
    {"type": "function", "function": {
        "name": "get_time", "description": "Current time in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    }},
]


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return load_tokenizer("default")


@pytest.fixture(scope="module")
def backend() -> Any:
    return load_backend("default", dtype="float32")


@pytest.mark.parametrize(
    "tool_choice", ["required", {"type": "function", "function": {"name": "get_weather"}}],
    ids=["required", "named"],
)
def test_forced_hermes_call_with_strict_rows_parses(
    tool_choice: Any, tmp_path: Any, tokenizer: Any, backend: Any
) -> None:
    template, fmt = resolve_template(tokenizer, "hermes")
    assert fmt == "hermes"
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    text = render_chat(template, messages, tools=TOOLS, add_generation_prompt=True,
                       tokenizer=tokenizer)
    ids = tokenizer.encode(text, add_special_tokens=False)
    compiled = compile_tools(tokenizer, template, TOOLS, tool_choice, default_eos_ids(tokenizer))
    trace = tmp_path / "trace.jsonl"
    res = generate(
        backend, tokenizer, ids, max_tokens=36, plan=compiled.plan,
        fill=FillConfig(fill="strict", trace=str(trace)), strict_context=compiled.new_context(),
    )
    parser = compiled.format.new_parser(TOOLS)
    parser.feed(res.text)
    parser.finish()
    assert parser.calls, res.text
    call = parser.calls[0]
    assert call.name == "get_weather"
    assert json.loads(call.arguments).get("city") == "Paris"
    assert res.text.startswith("<tool_call>")
    assert res.stats.strict > 0 and res.origins[0] == "template"
    assert trace.exists()
