"""Schemathesis against the app's own OpenAPI document, in process (ASGI), on the real
`ModelService` over a tiny model (generation capped at 4 tokens), on all three APIs:
valid and invalid requests alike get no 5xx; every response matches the document
(status, media type, headers, and its body: the JSON, or each server-sent event's
data); every 4xx carries the error shape with a non-null code. Every generation route
answers a plain valid body 200 both as JSON and as an event stream, each checked
against the document too.

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
