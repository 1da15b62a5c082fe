"""Schemathesis against the app's own OpenAPI document, in process (ASGI), on the real
`ModelService` over a tiny model (generation capped at 4 tokens), on all three APIs:
valid and invalid requests alike get no 5xx; every response matches the document
(status, media type, headers, and its body: the JSON, or each server-sent event's
data); every 4xx carries the error shape with a non-null code. Every generation route
answers a plain valid body 200 both as JSON and as an event stream, each checked
against the document too, and each body of issue 52 that the real APIs refuse is a
documented 400 naming its field.

The suite's run is derandomized (the same cases each time); `FUZZ_SEED=N` draws
another set, for runs that look further (`for n in $(seq 20); do FUZZ_SEED=$n ...`)."""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, seed, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from ffwd.serve.app import create_app
from tests.engine.tiny_service import tiny_service

EXAMPLES = 60  # per operation and generation mode (valid, invalid)
SEED = os.environ.get("FUZZ_SEED")
STREAMED = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages")
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance]
seen: Counter[int] = Counter()
answered: Counter[tuple[str, str]] = Counter()  # (path, media type) of each 200


# Built at collection: schemathesis generates the tests from the served document.
schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(tiny_service()))
schema.config.generation.update(max_examples=EXAMPLES)


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    total = sum(seen.values())
    fives = sum(n for s, n in seen.items() if s >= 500)
    print(f"\nAPI fuzz: {total} cases, {fives} 5xx, statuses {dict(sorted(seen.items()))}, "
          f"200s {dict(sorted(answered.items()))}", file=sys.stderr)


@schema.parametrize()
@settings(deadline=None, derandomize=SEED is None, suppress_health_check=list(HealthCheck))
@(seed(int(SEED)) if SEED else lambda f: f)
def test_no_5xx_and_the_documented_responses(case: Any) -> None:
    valid = case.meta.generation.mode == GenerationMode.POSITIVE
    if valid and case.operation.path in STREAMED and isinstance(case.body, dict):
        # A fuzzer seldom sends the optional `stream`: every other valid body streams.
        case.body["stream"] = sum(seen.values()) % 2 == 0
    response = case.call()
    seen[response.status_code] += 1
    if response.status_code == 200:
        media = response.headers.get("content-type", [""])[0].split(";")[0]
        answered[case.operation.path, media] += 1
    case.validate_response(response, checks=CHECKS)
    if 400 <= response.status_code < 500:
        err = response.json()["error"]
        assert set(err) == {"message", "type", "param", "code"}
        assert err["message"] and err["code"], err


PLAIN = {"/v1/chat/completions": {"messages": [{"role": "user", "content": "hi"}]},
         "/v1/completions": {"prompt": "hi"},
         "/v1/responses": {"input": "hi"},
         "/v1/messages": {"max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}}


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("path", STREAMED)
def test_every_generation_route_answers_whole_and_streamed(path: str, stream: bool) -> None:
    case = schema[path]["POST"].Case(body={"model": "default", **PLAIN[path], "stream": stream},
                                     media_type="application/json")
    response = case.call()
    assert response.status_code == 200, response.text
    media = response.headers.get("content-type", [""])[0].split(";")[0]
    assert media == ("text/event-stream" if stream else "application/json")
    case.validate_response(response, checks=CHECKS)


USER = {"role": "user", "content": "hi"}
CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}]}
# Issue 52's bodies, each a 200 once, that the real APIs refuse: (path, body, the param).
REFUSED = [
    ("/v1/chat/completions", {"messages": [USER], "metadata": "x"}, "metadata"),
    ("/v1/chat/completions", {"messages": [USER, {"role": "tool", "content": "42"}]},
     "messages[1].tool_call_id"),
    ("/v1/chat/completions", {"messages": [USER, CALL]},
     "messages[1].tool_calls[0].function.arguments"),
    ("/v1/responses", {"input": [], "max_output_tokens": 4}, "input"),
    ("/v1/responses", {"input": [{"type": "hologram", "x": 1}]}, "input[0].type"),
    ("/v1/responses", {"input": "hi", "include": ["everything"]}, "include[0]"),
    ("/v1/responses", {"input": "hi", "n": 2}, "n"),
    ("/v1/messages", {"max_tokens": 4, "messages": [USER], "n": 2}, "n"),
    ("/v1/messages", {"max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}]}]},
     "messages[0].content[0].tool_use_id"),
    ("/v1/messages/count_tokens", {"messages": [USER], "temperature": "hot"}, "temperature"),
    ("/v1/messages/count_tokens", {"messages": [USER], "temperature": 5}, "temperature"),
    ("/v1/messages/count_tokens", {"messages": [USER], "top_k": -1}, "top_k"),
    ("/v1/completions", {"prompt": "hi", "tools": [{"type": "function", "function": {
        "name": "f", "parameters": 7}}]}, "tools"),
    ("/v1/completions", {"prompt": "hi", "tool_choice": "auto"}, "tool_choice"),
]


@pytest.mark.parametrize(("path", "body", "param"), REFUSED)
def test_what_the_real_apis_refuse_is_a_documented_400(path: str, body: dict[str, Any],
                                                      param: str) -> None:
    """Issue 52: each is a 400 in its API's error shape naming the field, as documented."""
    case = schema[path]["POST"].Case(body={"model": "default", **body},
                                     media_type="application/json")
    response = case.call()
    assert response.status_code == 400, response.text
    case.validate_response(response, checks=CHECKS)
    err = response.json()["error"]
    assert err["param"] == param and err["message"] and err["code"], err
    if path.startswith("/v1/messages"):
        assert response.json()["type"] == "error" and err["type"] == "invalid_request_error"
