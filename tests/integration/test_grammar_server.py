"""Guaranteed tool calls and structured outputs on the embedded model, through the
official `openai` client against a live server (grammar on: the server default)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import openai
import pytest

from tests.integration.live_server import Server

pytestmark = pytest.mark.slow

TOOLS: list[Any] = [
    {"type": "function", "function": {
        "name": "convert_currency", "description": "Convert an amount between currencies.",
        "parameters": {"type": "object", "properties": {
            "amount": {"type": "number"}, "from_currency": {"type": "string"},
            "to_currency": {"type": "string"}},
            "required": ["amount", "from_currency", "to_currency"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "The current time in a timezone.",
        "parameters": {"type": "object", "properties": {"timezone": {"type": "string"}},
                       "required": ["timezone"]}}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
WHY: dict[str, Any] = {
    "model": "default", "messages": [{"role": "user", "content": "How many yen is 250 euros?"}],
    "tools": TOOLS, "tool_choice": "required", "max_tokens": 80, "temperature": 0,
}


def client(server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def assert_valid(calls: list[tuple[str, str]], finish: str | None) -> None:
    """Every call names a declared tool and its arguments match that tool's schema; a reply
    cut by max_tokens may end inside its last call."""
    assert calls
    for name, arguments in calls[: -1 if finish == "length" else None]:
        jsonschema.validate(json.loads(arguments), SCHEMAS[name])


def test_required_returns_a_valid_call_plain_and_streamed(server: Server) -> None:
    # On the default (f16 KV) the streamed reply may differ from the plain one (the prompt
    # cache is warm by then); each must hold valid calls. Identity is --deterministic's:
    # test_server.test_streamed_tool_calls_equal_the_whole_ones.
    reply = client(server).chat.completions.create(**WHY)
    choice = reply.choices[0]
    assert choice.message.tool_calls, choice.message
    assert_valid([(c.function.name, c.function.arguments)
                  for c in choice.message.tool_calls], choice.finish_reason)
    streamed: dict[int, list[str]] = {}
    finish = None
    for chunk in client(server).chat.completions.create(**WHY, stream=True):
        for d in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            name, args = streamed.setdefault(d.index, ["", ""]), d.function
            name[0] += (args.name or "") if args else ""
            name[1] += (args.arguments or "") if args else ""
        finish = (chunk.choices[0].finish_reason if chunk.choices else None) or finish
    assert finish in ("tool_calls", "length")
    assert_valid([(streamed[i][0], streamed[i][1]) for i in sorted(streamed)], finish)


def test_response_format_json_schema_content_validates(server: Server) -> None:
    schema = {"type": "object", "additionalProperties": False, "required": ["city", "country"],
              "properties": {"city": {"type": "string", "maxLength": 24},
                             "country": {"type": "string", "maxLength": 24}}}
    bad = {"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"q": {"type": "string", "format": "no-such-format"}}}}}
    with pytest.raises(openai.BadRequestError) as err:
        client(server).chat.completions.create(**{**WHY, "tools": [TOOLS[1], bad]})
    said = str(err.value)  # one sentence naming the tool; the grammar is in the log only
    assert "tool 'lookup': its parameters schema cannot be enforced: Unknown format" in said
    assert "%json" not in said and "start:" not in said
    reply = client(server).chat.completions.create(
        model="default", max_tokens=60, temperature=0,
        messages=[{"role": "user", "content": "Where is the Eiffel Tower?"}],
        response_format={"type": "json_schema",
                         "json_schema": {"name": "place", "schema": schema, "strict": True}},
    )
    jsonschema.validate(json.loads(reply.choices[0].message.content or ""), schema)


def test_an_instructor_style_schema_gets_exactly_its_keys(server: Server) -> None:
    """instructor sends the model's JSON Schema without additionalProperties: the reply has
    the listed keys and ends there, through Chat Completions and Responses alike."""
    schema = {"title": "Pet", "type": "object", "required": ["name", "species"],
              "properties": {"name": {"title": "Name", "type": "string"},
                             "species": {"title": "Species", "type": "string"}}}
    ask = "Rex is a dog who lives with Ada. Extract the pet."
    reply = client(server).chat.completions.create(
        model="default", max_tokens=60, temperature=0,
        messages=[{"role": "user", "content": ask}],
        response_format={"type": "json_schema", "json_schema": {"name": "Pet", "schema": schema}},
    )
    assert reply.choices[0].finish_reason == "stop", reply.choices[0].message.content
    assert set(json.loads(reply.choices[0].message.content or "")) == {"name", "species"}
    response = client(server).responses.create(
        model="default", max_output_tokens=60, temperature=0, input=ask,
        text={"format": {"type": "json_schema", "name": "Pet", "schema": schema}},
    )
    assert response.status == "completed", response.output_text
    assert set(json.loads(response.output_text)) == {"name", "species"}
