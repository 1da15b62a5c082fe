"""The promises on the default path (embedded model, llama.cpp, default threads, fill echo,
grammar on) with inputs nobody picked: hypothesis draws tool schemas, prompts, seeds,
temperatures, tool_choice, parallel calls and response formats (`tools.conformance`).
Each reply is a 200 with valid calls (no keys outside the schema) or an honest length cut,
no call twice, streamed and whole; under --deterministic also streamed == plain and
greedy cold == warm."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings

from tools import conformance

pytestmark = pytest.mark.slow
EXAMPLES = 8  # `python -m tools.conformance --examples 500` runs many more


@pytest.fixture(scope="module")
def app() -> Iterator[conformance.InProcess]:
    yield conformance.InProcess()


@pytest.fixture(scope="module")
def exact_app() -> Iterator[conformance.InProcess]:
    yield conformance.InProcess(exact=True)


@settings(max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(body=conformance.requests())
def test_every_reply_keeps_the_promises(app: conformance.InProcess, body: dict[str, Any]) -> None:
    assert not app.exact
    outcome = conformance.check(body, app.post, app.stream, app.cold, app.exact)
    assert outcome.problems == [], body


@settings(max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(body=conformance.requests())
def test_deterministic_replies_are_the_same_however_computed(
    exact_app: conformance.InProcess, body: dict[str, Any]
) -> None:
    assert exact_app.exact
    outcome = conformance.check(body, exact_app.post, exact_app.stream, exact_app.cold)
    assert outcome.problems == [], body


def test_the_checks_catch_a_broken_reply() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}}]
    body = {"tools": tools, "tool_choice": "required", "temperature": 0.0}
    ok = conformance.Reply("", (("f", '{"a": 1}'),), "tool_calls")
    assert conformance.problems(body, ok) == []
    for bad in (conformance.Reply("", (("f", '{"a": 1, "type": "x"}'),), "tool_calls"),
                conformance.Reply("", (("f", '{"a": 1}'), ("f", '{"a": 1}')), "tool_calls"),
                conformance.Reply("", (("g", "{}"),), "tool_calls"),
                conformance.Reply("hi", (), "stop")):
        assert conformance.problems(body, bad), bad
    cut = conformance.Reply("", (("f", '{"a": 1}'), ("f", '{"a": ')), "length")
    assert conformance.problems(body, cut) == []  # the last call of a cut reply is partial
