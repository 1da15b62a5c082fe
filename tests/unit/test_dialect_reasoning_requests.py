"""What a client asks of a reasoning model, on every API, as the `GenerationRequest` the
service gets (issue 48): Chat's ``reasoning_effort`` and ``chat_template_kwargs``,
Anthropic's ``thinking`` (validated as Anthropic validates it, its errors in Anthropic's
shape), Responses' ``reasoning.effort``; and earlier reasoning sent back (an assistant
message's ``reasoning_content``, ``thinking`` blocks, ``reasoning`` items) as the
``reasoning_content`` of the assistant turn it belongs to."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ffwd.serve.app import create_app
from ffwd.serve.request import Reasoning
from tests.unit.agent_service import (  # noqa: F401 (fixtures)
    AgentService,
    client_fixture,
    svc_fixture,
)
from tests.unit.test_dialect_reasoning import THINK, reasoned

HI = {"role": "user", "content": "hi"}
CALL = {"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}


def post(client: TestClient, path: str, body: dict[str, Any], status: int = 200) -> Any:
    base = {"/v1/chat/completions": {"model": "tiny", "messages": [HI]},
            "/v1/responses": {"model": "tiny", "input": "hi"},
            "/v1/messages": {"model": "tiny", "max_tokens": 4096, "messages": [HI]}}
    r = client.post(path, json=base.get(path.removesuffix("/count_tokens"), {}) | body)
    assert r.status_code == status, r.text
    return r.json()


# --- Chat Completions -------------------------------------------------------------------
@pytest.mark.parametrize(("body", "reasoning"), [
    ({}, None),
    ({"reasoning_effort": "high"}, Reasoning(effort="high")),
    ({"reasoning_effort": "minimal"}, Reasoning(effort="minimal")),
    ({"reasoning_effort": "none"}, Reasoning(on=False, effort="none")),
])
def test_chat_reasoning_effort(client: TestClient, svc: AgentService, body: dict[str, Any],
                               reasoning: Reasoning | None) -> None:
    post(client, "/v1/chat/completions", body)
    assert svc.last.reasoning == reasoning


def test_chat_template_kwargs_reach_the_template(client: TestClient, svc: AgentService) -> None:
    kwargs = {"enable_thinking": False, "reasoning_effort": "low", "custom": [1, {"a": None}]}
    post(client, "/v1/chat/completions", {"chat_template_kwargs": kwargs})
    assert svc.last.template_kwargs == kwargs
    post(client, "/v1/chat/completions", {})
    assert svc.last.template_kwargs == {}


def test_chat_earlier_reasoning_is_the_assistant_s_reasoning_content(
        client: TestClient, svc: AgentService) -> None:
    messages = [HI, {"role": "assistant", "content": "", "tool_calls": [CALL],
                     "reasoning_content": "Oslo, then."},
                {"role": "tool", "tool_call_id": "c1", "content": "18C"},
                {"role": "assistant", "content": "18C.", "reasoning": "vLLM's name."},
                {"role": "user", "content": "And?", "reasoning_content": "not the model's"}]
    post(client, "/v1/chat/completions", {"messages": messages})
    sent = svc.last.messages
    assert sent[1]["reasoning_content"] == "Oslo, then." and sent[1]["tool_calls"]
    assert sent[3] == {"role": "assistant", "content": "18C.", "reasoning_content": "vLLM's name."}
    assert "reasoning_content" not in sent[4] and "reasoning_content" not in sent[0]


@pytest.mark.parametrize(("body", "param", "needle"), [
    ({"reasoning_effort": "extreme"}, "reasoning_effort", "'low'"),
    ({"reasoning_effort": 3}, "reasoning_effort", ""),
    ({"chat_template_kwargs": "enable_thinking=false"}, "chat_template_kwargs",
     "expected an object"),
    ({"messages": [HI, {"role": "assistant", "content": "x", "reasoning_content": 7}]},
     "messages[1].reasoning_content", "expected a string"),
    ({"messages": [HI, {"role": "assistant", "content": "x", "reasoning": ["a"]}]},
     "messages[1].reasoning", "expected a string"),
])
def test_chat_bad_reasoning_fields_are_400s_naming_them(client: TestClient,
                                                        body: dict[str, Any], param: str,
                                                        needle: str) -> None:
    err = post(client, "/v1/chat/completions", body, status=400)["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["param"] == param and needle in err["message"], err


# --- Anthropic Messages -----------------------------------------------------------------
@pytest.mark.parametrize(("body", "reasoning"), [
    ({}, None),
    ({"thinking": {"type": "enabled", "budget_tokens": 2048}},
     Reasoning(on=True, budget=2048)),
    ({"thinking": {"type": "enabled", "budget_tokens": 1024.0, "display": "omitted"}},
     Reasoning(on=True, budget=1024)),
    ({"thinking": {"type": "disabled"}}, Reasoning(on=False)),
    ({"thinking": {"type": "adaptive"}}, Reasoning(on=True)),
    ({"output_config": {"effort": "low"}}, Reasoning(effort="low")),
    ({"thinking": {"type": "disabled"}, "output_config": {"effort": "max"}},
     Reasoning(on=False, effort="max")),
])
def test_messages_thinking_settings(client: TestClient, svc: AgentService,
                                    body: dict[str, Any], reasoning: Reasoning | None) -> None:
    post(client, "/v1/messages", body)
    assert svc.last.reasoning == reasoning
    post(client, "/v1/messages/count_tokens", body)  # the same request
    assert svc.last.reasoning == reasoning


THINKING_REFUSED = [
    ({"thinking": {"type": "enabled"}}, "thinking.budget_tokens", "is required"),
    ({"thinking": {"type": "enabled", "budget_tokens": 1023}}, "thinking.budget_tokens",
     "greater than or equal to 1024"),
    ({"thinking": {"type": "enabled", "budget_tokens": "2048"}}, "thinking.budget_tokens",
     "expected an integer"),
    ({"thinking": {"type": "enabled", "budget_tokens": 4096}}, "thinking.budget_tokens",
     "less than max_tokens (4096)"),
    ({"thinking": {"type": "always"}}, "thinking.type", "'enabled'"),
    ({"thinking": "enabled"}, "thinking", "expected"),
    ({"output_config": {"effort": "huge"}}, "output_config.effort", "'low'"),
    ({"messages": [{"role": "user", "content": [
        {"type": "thinking", "thinking": "x", "signature": ""}]}]}, "messages[0]",
     "assistant messages"),
    ({"messages": [HI, {"role": "assistant", "content": [{"type": "thinking",
                                                          "thinking": 5}]}]},
     "messages[1].content[0].thinking", "expected a string"),
]


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
@pytest.mark.parametrize(("body", "param", "needle"), THINKING_REFUSED)
def test_bad_thinking_is_a_400_in_anthropic_s_shape(client: TestClient, path: str,
                                                   body: dict[str, Any], param: str,
                                                   needle: str) -> None:
    out = post(client, path, body | {"max_tokens": 4096}, status=400)
    assert out["type"] == "error" and out["error"]["type"] == "invalid_request_error"
    assert out["error"]["param"] == param and needle in out["error"]["message"], out


def test_count_tokens_needs_no_max_tokens_for_a_budget(client: TestClient) -> None:
    body = {"model": "tiny", "messages": [HI],
            "thinking": {"type": "enabled", "budget_tokens": 9000}}
    r = client.post("/v1/messages/count_tokens", json=body)
    assert r.status_code == 200 and r.json() == {"input_tokens": 1}


def test_thinking_blocks_are_the_assistant_s_reasoning_content(
        client: TestClient, svc: AgentService) -> None:
    turn = {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "First, ", "signature": "sig"},
        {"type": "redacted_thinking", "data": "opaque"},
        {"type": "text", "text": "Checking."},
        {"type": "thinking", "thinking": "then Oslo.", "signature": ""},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}]}
    answer = {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"}]}
    bare = {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "x"},
                                             {"type": "text", "text": "Done."}]}
    post(client, "/v1/messages", {"messages": [HI, turn, answer, bare, HI]})
    sent = svc.last.messages
    assert sent[1]["content"] == "Checking." and sent[1]["reasoning_content"] == "First, then Oslo."
    assert sent[3] == {"role": "assistant", "content": "Done."}


# --- Responses --------------------------------------------------------------------------
@pytest.mark.parametrize(("body", "reasoning", "echo"), [
    ({}, None, {"effort": None, "summary": None}),
    ({"reasoning": {"effort": "medium", "summary": "auto"}}, Reasoning(effort="medium"),
     {"effort": "medium", "summary": "auto"}),
    ({"reasoning": {"effort": "none"}}, Reasoning(on=False, effort="none"),
     {"effort": "none", "summary": None}),
    ({"reasoning": {}}, None, {"effort": None, "summary": None}),
])
def test_responses_reasoning_effort(client: TestClient, svc: AgentService,
                                    body: dict[str, Any], reasoning: Reasoning | None,
                                    echo: dict[str, Any]) -> None:
    assert post(client, "/v1/responses", body)["reasoning"] == echo
    assert svc.last.reasoning == reasoning


@pytest.mark.parametrize(("body", "param"), [
    ({"reasoning": {"effort": "extreme"}}, "reasoning.effort"),
    ({"reasoning": "high"}, "reasoning"),
    ({"input": [{"type": "reasoning", "summary": [], "content": [
        {"type": "reasoning_text", "text": 3}]}, HI]}, "input[0].content[0].text"),
    ({"input": [{"type": "reasoning", "summary": "x"}, HI]}, "input[0].summary"),
])
def test_responses_bad_reasoning_is_a_400_naming_the_field(client: TestClient,
                                                           body: dict[str, Any],
                                                           param: str) -> None:
    assert post(client, "/v1/responses", body, status=400)["error"]["param"] == param


def rs(text: str, summary: str = "") -> dict[str, Any]:
    return {"type": "reasoning", "id": "rs_1", "content": [
        {"type": "reasoning_text", "text": text}] if text else None,
        "summary": [{"type": "summary_text", "text": summary}] if summary else []}


def test_reasoning_items_go_to_the_assistant_turn_after_them(client: TestClient,
                                                             svc: AgentService) -> None:
    items = [
        HI, rs("Look "), rs("it up."),
        {"type": "function_call", "call_id": "c1", "name": "get_weather",
         "arguments": '{"city": "Oslo"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "18C"},
        rs("", summary="Summed up."),
        {"type": "message", "role": "assistant", "content": "18C."},
        rs("A thought that led to no turn."), {"role": "user", "content": "Thanks"},
        {"type": "message", "role": "assistant", "content": "Welcome."},
    ]
    post(client, "/v1/responses", {"input": items})
    assert svc.last.messages == [
        HI, {"role": "assistant", "content": "", "tool_calls": [CALL],
             "reasoning_content": "Look it up."},
        {"role": "tool", "tool_call_id": "c1", "content": "18C"},
        {"role": "assistant", "content": "18C.", "reasoning_content": "Summed up."},
        {"role": "user", "content": "Thanks"},
        {"role": "assistant", "content": "Welcome."}]


def test_reasoning_before_a_call_joins_the_call_s_turn(client: TestClient,
                                                      svc: AgentService) -> None:
    """A reply written as reasoning, text, reasoning, call (items in that order) is one
    assistant turn, its reasoning the two joined, as the model wrote them."""
    items = [HI, rs("First."), {"type": "message", "role": "assistant", "content": "Let me see."},
             rs(" Now call."), {"type": "function_call", "call_id": "c1",
                                "name": "get_weather", "arguments": '{"city": "Oslo"}'},
             {"type": "function_call_output", "call_id": "c1", "output": "18C"}]
    post(client, "/v1/responses", {"input": items})
    assert svc.last.messages[1:] == [
        {"role": "assistant", "content": "Let me see.", "tool_calls": [CALL],
         "reasoning_content": "First. Now call."},
        {"role": "tool", "tool_call_id": "c1", "content": "18C"}]


def test_a_stored_reply_keeps_its_reasoning_for_the_next_turn(client: TestClient,
                                                            svc: AgentService) -> None:
    svc.script = reasoned(THINK, ["Sunny."])
    first = post(client, "/v1/responses", {"input": "Weather?"})
    post(client, "/v1/responses", {"input": "Thanks", "previous_response_id": first["id"]})
    assert svc.last.messages[1] == {"role": "assistant", "content": "Sunny.",
                                    "reasoning_content": "".join(THINK)}


TEXT = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=12)


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(thoughts=st.lists(TEXT, min_size=1, max_size=3), answer=TEXT)
def test_sent_back_reasoning_is_the_reasoning_given(thoughts: list[str], answer: str) -> None:
    """Each API's way of sending earlier reasoning back reaches the template as the one
    ``reasoning_content`` of that assistant turn, its text unchanged."""
    svc = AgentService()
    joined = "".join(thoughts)
    chat = {"messages": [HI, {"role": "assistant", "content": answer,
                              "reasoning_content": joined}, HI]}
    claude = {"messages": [HI, {"role": "assistant", "content": [
        *({"type": "thinking", "thinking": t, "signature": ""} for t in thoughts),
        {"type": "text", "text": answer}]}, HI]}
    items = {"input": [HI, *(rs(t) for t in thoughts),
                       {"type": "message", "role": "assistant", "content": answer}, HI]}
    with TestClient(create_app(svc)) as c:
        for path, body in (("/v1/chat/completions", chat), ("/v1/messages", claude),
                           ("/v1/responses", items)):
            post(c, path, body)
            assert svc.last.messages[1] == {"role": "assistant", "content": answer,
                                            "reasoning_content": joined}, path
