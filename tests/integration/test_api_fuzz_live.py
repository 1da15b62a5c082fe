"""Schemathesis against a live `ffwd serve` on the embedded model, bounded to fit CI:
the server's own limits keep every generation short (``--max-tokens-limit`` and
``--default-max-tokens`` 8), and each operation gets a few examples. The checks of the
in-process run (tests/engine/test_api_fuzz.py), on the real model's output over HTTP:
no 5xx, and status, media type, headers and bodies (each event of a stream) as
documented."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.integration.live_server import Server

pytestmark = pytest.mark.slow

LIMIT = 8  # output ids per request, the server's
EXAMPLES = 10  # per operation and generation mode
STREAMED = ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages")
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance]
streams: list[bool] = []


@pytest.fixture(scope="module")
def live() -> Iterator[Server]:
    s = Server("--max-tokens-limit", str(LIMIT), "--default-max-tokens", str(LIMIT))
    yield s
    s.stop()


def test_the_live_server_answers_as_documented(live: Server) -> None:
    # Loaded once the server is up (schemathesis' lazy pytest loader predates pytest 9).
    api = schemathesis.openapi.from_url(live.url + "/openapi.json")
    operations = [result.ok() for result in api.get_all_operations()]
    assert len(operations) >= 11
    for operation, mode in itertools.product(operations, GenerationMode):
        fuzz = given(case=operation.as_strategy(generation_mode=mode))(check)
        try:
            settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                     suppress_health_check=list(HealthCheck))(fuzz)()
        except Unsatisfiable:  # an operation that takes nothing cannot be sent invalid input
            assert mode == GenerationMode.NEGATIVE, operation.label


def check(case: Any) -> None:
    valid = case.meta.generation.mode == GenerationMode.POSITIVE
    if valid and case.operation.path in STREAMED and isinstance(case.body, dict):
        case.body["stream"] = len(streams) % 2 == 0  # half the valid bodies stream
        streams.append(case.body["stream"])
    response = case.call(timeout=120)
    case.validate_response(response, checks=CHECKS)
    if 400 <= response.status_code < 500:
        err = response.json()["error"]
        assert err["message"] and err["code"], err
