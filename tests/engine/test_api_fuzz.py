"""Schemathesis against the app's own OpenAPI document, in process (ASGI), on the real
`ModelService` over a tiny model (generation capped at 4 tokens): valid and invalid
requests alike get no 5xx, every response matches the document, and every 4xx carries
the OpenAI error shape with a non-null code."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from ffwd.serve.app import create_app
from tests.engine.tiny_service import tiny_service

EXAMPLES = 60  # per operation and generation mode (valid, invalid)
seen: Counter[int] = Counter()


# Built at collection: schemathesis generates the tests from the served document.
schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(tiny_service()))
schema.config.generation.update(max_examples=EXAMPLES)


@pytest.fixture(scope="module", autouse=True)
def report() -> Iterator[None]:
    yield
    total = sum(seen.values())
    fives = sum(n for s, n in seen.items() if s >= 500)
    print(f"\nAPI fuzz: {total} cases, {fives} 5xx, statuses {dict(sorted(seen.items()))}",
          file=sys.stderr)


@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_no_5xx_and_the_error_shape(case: Any) -> None:
    response = case.call()
    seen[response.status_code] += 1
    case.validate_response(response, checks=[
        not_a_server_error, status_code_conformance, content_type_conformance,
        response_schema_conformance,
    ])
    if 400 <= response.status_code < 500:
        err = response.json()["error"]
        assert set(err) == {"message", "type", "param", "code"}
        assert err["message"] and err["code"], err
