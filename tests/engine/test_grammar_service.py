"""Grammars through the real `ModelService` and HTTP app (tiny random model, real
tokenizer and template): even a random model returns valid calls and valid JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
from fastapi.testclient import TestClient

from ffwd.config import FillConfig
from ffwd.serve.app import create_app
from tests.engine.tiny_service import tiny_service

CHAT, TEXT = "/v1/chat/completions", "/v1/completions"
MODE = {
    "type": "object",
    "properties": {"mode": {"enum": ["eco", "turbo"]}, "level": {"type": "integer",
                   "minimum": 0, "maximum": 9}, "on": {"type": "boolean"}},
    "required": ["mode", "on"],
}
TOOLS = [
    {"type": "function", "function": {"name": "set_mode", "parameters": MODE, "strict": True}},
    {"type": "function", "function": {"name": "get_time", "strict": True, "parameters": {
        "type": "object", "properties": {"utc": {"type": "boolean"}}, "required": ["utc"]}}},
]
ASK = {"messages": [{"role": "user", "content": "Eco mode on."}], "max_tokens": 64,
       "temperature": 1.0}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(tiny_service(FillConfig(mode="echo"), capped=False))) as c:
        yield c


def valid_call(call: dict[str, Any]) -> None:
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    fn = call["function"]
    jsonschema.validate(json.loads(fn["arguments"]), schemas[fn["name"]])


def streamed(client: TestClient, body: dict[str, Any]) -> tuple[str, dict[int, dict[str, str]]]:
    """Content and calls reassembled from the SSE deltas."""
    content, calls = "", {}
    with client.stream("POST", CHAT, json={**body, "stream": True}) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            delta = json.loads(line[6:])["choices"][0]["delta"]
            content += delta.get("content") or ""
            for d in delta.get("tool_calls") or []:
                call = calls.setdefault(d["index"], {"name": "", "arguments": ""})
                call["name"] += d.get("function", {}).get("name") or ""
                call["arguments"] += d.get("function", {}).get("arguments") or ""
    return content, calls


@pytest.mark.parametrize("choice", ["required", {"type": "function",
                                                 "function": {"name": "get_time"}}])
def test_required_and_named_always_return_a_valid_call(client: TestClient, choice: Any) -> None:
    for seed in range(4):
        body = {**ASK, "tools": TOOLS, "tool_choice": choice, "seed": seed}
        r = client.post(CHAT, json=body)
        assert r.status_code == 200, r.text
        reply = r.json()
        message, finish = reply["choices"][0]["message"], reply["choices"][0]["finish_reason"]
        assert finish in ("tool_calls", "length") and message["tool_calls"], message
        assert message["content"] is None  # no markup leaks into the content, cut or not
        # Cut by max_tokens, the last call is as far as it was written (OpenAI's rule).
        complete = message["tool_calls"][: -1 if finish == "length" else None]
        for call in complete:
            valid_call(call)
        for call in message["tool_calls"]:
            if isinstance(choice, dict):
                assert call["function"]["name"] == "get_time"
        assert reply["ffwd"]["grammar"] is True and reply["ffwd"]["stats"]["grammar"] > 0
        _, calls = streamed(client, body)
        assert [(c["name"], c["arguments"]) for c in calls.values()] == [
            (c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]


def test_response_format_json_schema_on_chat_and_completions(client: TestClient) -> None:
    rf = {"type": "json_schema", "json_schema": {"name": "mode", "schema": MODE,
                                                 "strict": True}}
    for url, body in ((CHAT, ASK), (TEXT, {"prompt": "Mode:", "max_tokens": 64})):
        for seed in range(3):
            r = client.post(url, json={**body, "response_format": rf, "seed": seed})
            assert r.status_code == 200, r.text
            choice = r.json()["choices"][0]
            text = choice["message"]["content"] if url == CHAT else choice["text"]
            jsonschema.validate(json.loads(text), MODE)


def test_a_schema_llguidance_cannot_compile_is_a_400_then_all_is_well(
    client: TestClient,
) -> None:
    bad = {"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"q": {"type": "string", "format": "no-such-format"}}}}}
    r = client.post(CHAT, json={**ASK, "tools": [TOOLS[1], bad], "tool_choice": "required"})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    # One sentence naming the tool and what is wrong; no grammar text (it is in the log).
    assert error["param"] == "tools" and error["message"] == (
        "tool 'lookup': its parameters schema cannot be enforced: "
        "Unknown format: no-such-format")
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "string", "pattern": "(?<=a)b"}}}
    r = client.post(CHAT, json={**ASK, "response_format": rf})
    assert r.status_code == 400 and r.json()["error"]["param"] == "response_format", r.text
    assert r.json()["error"]["message"] == (
        "response_format: its JSON schema cannot be enforced: pattern '(?<=a)b': "
        "look-around, including look-ahead and look-behind, is not supported")
    r = client.post(CHAT, json={**ASK, "response_format": {"type": "yaml"}})
    assert r.status_code == 400 and "response_format" in r.json()["error"]["param"], r.text
    ok = client.post(CHAT, json={**ASK, "tools": TOOLS, "tool_choice": "required"})
    assert ok.status_code == 200 and ok.json()["choices"][0]["message"]["tool_calls"]


def test_grammar_off_leaves_tool_calls_unconstrained(client: TestClient) -> None:
    body = {**ASK, "tools": TOOLS, "tool_choice": "required", "max_tokens": 8,
            "ffwd": {"grammar": False}}
    reply = client.post(CHAT, json=body).json()
    assert reply["ffwd"]["grammar"] is False and reply["ffwd"]["stats"]["grammar"] == 0


def test_a_vanishing_temperature_under_a_grammar_is_greedy_not_a_500(client: TestClient) -> None:
    # Issue 30's schemathesis 500 ("grammar refused id 49151 ... forced bytes: got '{'"):
    # temperature 5e-324 overflowed the scaled logits to NaN and the draw took the
    # vocabulary's last id, which the JSON grammar forbids. Such a temperature is greedy.
    body = {**ASK, "max_tokens": 6, "response_format": {"type": "json_object"}}
    greedy = client.post(CHAT, json={**body, "temperature": 0})
    assert greedy.status_code == 200, greedy.text
    for temperature in (5e-324, 1e-300):
        for extra in ({}, {"tools": TOOLS, "tool_choice": "required"}):
            r = client.post(CHAT, json={**body, **extra, "temperature": temperature, "seed": 1})
            assert r.status_code == 200, r.text
            if not extra:
                text = r.json()["choices"][0]["message"]["content"]
                assert text == greedy.json()["choices"][0]["message"]["content"]
                assert text.startswith("{")
