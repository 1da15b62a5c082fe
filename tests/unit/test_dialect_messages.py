"""The Anthropic Messages API over a scripted service: translation of blocks, tools and
options, the message, the event stream, errors in Anthropic's shape, auth, count_tokens."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ffwd.serve.app import create_app
from ffwd.serve.dialects.messages_models import MessagesRequest
from ffwd.serve.request import GenerationRequest, Reasoning
from tests.unit.agent_service import (  # noqa: F401 (fixtures)
    AgentService,
    client_fixture,
    hello,
    sse_events,
    svc_fixture,
    text_then_call,
    weather_call,
)
from tests.unit.scripted import result, text
from tests.unit.test_serve_app import Scripted

URL = "/v1/messages"
ASK = {"model": "tiny", "max_tokens": 64,
       "messages": [{"role": "user", "content": "Weather in Paris?"}]}
WEATHER = {"name": "get_weather", "description": "Weather in a city.", "input_schema": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
BILLING = "x-anthropic-billing-header: cc_version=2.1.37.a1b; cc_entrypoint=cli; cch=5e2f1;"


def post(client: TestClient, **body: Any) -> dict[str, Any]:
    r = client.post(URL, json={**ASK, **body})
    assert r.status_code == 200, r.text
    return r.json()


def test_plain_message(client: TestClient, svc: AgentService) -> None:
    svc.script = hello(cached=6)
    body = post(client, system="Be brief.", temperature=0.5, top_k=20, top_p=0.9,
                metadata={"user_id": "u1"}, thinking={"type": "disabled"})
    assert body["type"] == "message" and body["role"] == "assistant"
    assert body["id"].startswith("msg_") and body["model"] == "tiny"
    assert body["content"] == [{"type": "text", "text": "Hello world"}]
    assert body["stop_reason"] == "end_turn" and body["stop_sequence"] is None
    assert body["usage"] == {"input_tokens": 4, "cache_creation_input_tokens": 0,
                             "cache_read_input_tokens": 6, "output_tokens": 2}
    req = svc.last
    assert req.messages == [{"role": "system", "content": "Be brief."},
                            {"role": "user", "content": "Weather in Paris?"}]
    assert (req.max_tokens, req.sampling.temperature, req.sampling.top_k) == (64, 0.5, 20)
    assert req.tool_choice == "none" and req.tools == []
    assert req.reasoning == Reasoning(on=False)


def test_the_billing_header_is_stripped_from_the_system_prompt(client: TestClient,
                                                               svc: AgentService) -> None:
    system = [{"type": "text", "text": BILLING},
              {"type": "text", "text": "You are Claude Code.", "cache_control": {
                  "type": "ephemeral"}}]
    post(client, system=system)
    assert svc.last.messages[0] == {"role": "system", "content": "You are Claude Code."}
    post(client, system=f"{BILLING}\nYou are Claude Code.")
    assert svc.last.messages[0] == {"role": "system", "content": "You are Claude Code."}


def test_blocks_become_the_conversation(client: TestClient, svc: AgentService) -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "<system-reminder>x"
                                      "</system-reminder>"},
                                     {"type": "text", "text": "Weather in Paris and Oslo?"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "s"},
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
             "input": {"city": "Paris"}},
            {"type": "tool_use", "id": "toolu_2", "name": "get_weather",
             "input": {"city": "Oslo"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
             "content": [{"type": "text", "text": "no station"}]},
            {"type": "text", "text": "And tomorrow?"}]},
    ]
    post(client, messages=messages, tools=[WEATHER])
    calls = [{"id": f"toolu_{i}", "type": "function", "function": {
        "name": "get_weather", "arguments": f'{{"city": "{c}"}}'}}
        for i, c in ((1, "Paris"), (2, "Oslo"))]
    assert svc.last.messages == [
        {"role": "user", "content": "<system-reminder>x</system-reminder>\n"
                                    "Weather in Paris and Oslo?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": calls,
         "reasoning_content": "hmm"},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: no station"},
        {"role": "user", "content": "And tomorrow?"},
    ]
    assert svc.last.tools == [{"type": "function", "function": {
        "name": "get_weather", "parameters": WEATHER["input_schema"],
        "description": "Weather in a city."}}]


def test_mid_conversation_system_messages(client: TestClient, svc: AgentService) -> None:
    messages = [{"role": "user", "content": "hi"},
                {"role": "system", "content": [{"type": "text", "text": f"{BILLING}\nAgents: x"}]}]
    post(client, messages=messages)  # as Claude Code sends its reminders
    assert svc.last.messages[1:] == [{"role": "system", "content": "Agents: x"}]


@pytest.mark.parametrize(("choice", "expected", "parallel"), [
    ({"type": "any"}, "required", True),
    # Anthropic's forced tool: disable_parallel_tool_use, not the choice, limits the calls.
    ({"type": "tool", "name": "get_weather"},
     {"type": "function", "function": {"name": "get_weather"}}, True),
    ({"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
     {"type": "function", "function": {"name": "get_weather"}}, False),
    ({"type": "auto", "disable_parallel_tool_use": True}, "auto", False),
    ({"type": "none"}, "none", True),
    (None, "auto", True),
])
def test_tool_choice(client: TestClient, svc: AgentService, choice: Any, expected: Any,
                     parallel: bool) -> None:
    post(client, tools=[WEATHER], **({"tool_choice": choice} if choice else {}))
    assert svc.last.tool_choice == expected and svc.last.parallel_tool_calls is parallel


def test_a_call_is_a_tool_use_block(client: TestClient, svc: AgentService) -> None:
    svc.script = weather_call()
    body = post(client, tools=[WEATHER, {"type": "web_search_20250305", "name": "web_search"}],
                tool_choice={"type": "any"})
    [block] = body["content"]
    assert block["type"] == "tool_use" and block["id"].startswith("toolu_")
    assert (block["name"], block["input"]) == ("get_weather", {"city": "Paris"})
    assert body["stop_reason"] == "tool_use"
    assert body["warnings"] == ["tools[1]: tools of type 'web_search_20250305' run on "
                                "Anthropic's servers, not here; skipped"]


@pytest.mark.parametrize(("script", "reason", "sequence"), [
    ([text("Hi"), result("Hi", finish="length")], "max_tokens", None),
    ([text("Hi"), result("Hi")], "end_turn", None),
])
def test_stop_reasons(client: TestClient, svc: AgentService, script: Any, reason: str,
                      sequence: str | None) -> None:
    svc.script = script
    body = post(client)
    assert (body["stop_reason"], body["stop_sequence"]) == (reason, sequence)


def test_a_stop_sequence_is_reported(client: TestClient, svc: AgentService) -> None:
    svc.script = [text("Hi"), result("Hi", stop_sequence="END")]
    body = post(client, stop_sequences=["END"])
    assert svc.last.stop == ("END",)
    assert (body["stop_reason"], body["stop_sequence"]) == ("stop_sequence", "END")


def test_stream_events_and_streamed_equals_whole(client: TestClient, svc: AgentService) -> None:
    svc.script = text_then_call()
    r = client.post(URL, json={**ASK, "stream": True, "tools": [WEATHER]})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    events = sse_events(r.text)
    assert [n for n, _ in events] == [
        "message_start", "ping", "content_block_start", "content_block_delta",
        "content_block_delta", "content_block_stop", "content_block_start",
        "content_block_delta", "content_block_stop", "content_block_start",
        "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
    assert all(name == data["type"] for name, data in events)
    blocks: dict[int, dict[str, Any]] = {}
    for name, data in events:
        if name == "content_block_start":
            blocks[data["index"]] = dict(data["content_block"], partial="")
        elif name == "content_block_delta":
            d = data["delta"]
            blocks[data["index"]]["partial"] += d.get("text", d.get("partial_json", ""))
    whole = post(client, tools=[WEATHER])
    assert [b["type"] for b in whole["content"]] == ["text", "tool_use", "text"]
    assert [b["partial"] for b in blocks.values()] == [
        "Let me look.", '{"city": "Oslo"}', " Done."]
    assert whole["content"][1]["input"] == {"city": "Oslo"}
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    assert delta["usage"] == whole["usage"]


def test_a_failed_stream_ends_with_an_error_event() -> None:
    with TestClient(create_app(Scripted(fail=True))) as c:
        r = c.post(URL, json={**ASK, "stream": True})
    name, data = sse_events(r.text)[-1]
    assert name == "error" and data["type"] == "error"
    assert data["error"]["type"] == "api_error"


USE = {"role": "assistant", "content": [
    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]}


def answer(tool_use_id: str) -> dict[str, Any]:
    return {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": tool_use_id, "content": "18C"}]}


# Bodies both /v1/messages and /v1/messages/count_tokens refuse: (body, status, error type,
# param, a piece of the message).
REFUSED = [
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
     400, "invalid_request_error", "messages[0].content[0].type", "text only"),
    ({"messages": [{"role": "assistant", "content": [
        {"type": "tool_result", "tool_use_id": "t", "content": "x"}]}]},
     400, "invalid_request_error", "messages[0]", "user messages"),
    ({"temperature": 1.5}, 400, "invalid_request_error", "temperature", "less than or equal"),
    ({"temperature": "hot"}, 400, "invalid_request_error", "temperature", "expected a number"),
    ({"top_k": -1}, 400, "invalid_request_error", "top_k", "greater than or equal to 0"),
    ({"stop_sequences": "x"}, 400, "invalid_request_error", "stop_sequences",
     "an array of strings"),
    ({"tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}}, 400,
     "invalid_request_error", "tool_choice", "'nope', which is not in tools"),
    ({"tool_choice": {"type": "any"}}, 400, "invalid_request_error", "tool_choice",
     "requires tools"),
    ({"model": "claude-opus-4"}, 404, "not_found_error", "model", "does not exist"),
    # What Anthropic's API refuses (issue 52): Chat Completions' n; a tool_result that
    # answers no tool_use of the assistant message before it.
    ({"n": 2}, 400, "invalid_request_error", "n", "not a known parameter"),
    ({"messages": [{"role": "user", "content": "hi"}, answer("toolu_9")]}, 400,
     "invalid_request_error", "messages[1].content[0].tool_use_id", "'toolu_9'"),
    ({"messages": [{"role": "user", "content": "hi"}, USE, answer("toolu_1"),
                   {"role": "assistant", "content": "ok"}, answer("toolu_1")]}, 400,
     "invalid_request_error", "messages[4].content[0].tool_use_id", "unexpected tool_use_id"),
]


# Only a generation needs (and may exceed) max_tokens: count_tokens takes it optional.
GENERATION_ONLY = [
    ({"max_tokens": None}, 400, "invalid_request_error", "max_tokens", "required"),
    ({"max_tokens": 5000}, 400, "invalid_request_error", "max_tokens", "too many"),
]


@pytest.mark.parametrize(("path", "body", "status", "kind", "param", "needle"), [
    *[(path, *case) for path in (URL, URL + "/count_tokens") for case in REFUSED],
    *[(URL, *case) for case in GENERATION_ONLY]])
def test_errors_have_anthropic_s_shape(client: TestClient, path: str, body: dict[str, Any],
                                       status: int, kind: str, param: str, needle: str) -> None:
    r = client.post(path, json={k: v for k, v in {**ASK, **body}.items() if v is not None})
    assert r.status_code == status, r.text
    out = r.json()
    assert out["type"] == "error" and out["error"]["type"] == kind
    assert out["error"]["param"] == param and needle in out["error"]["message"], out


class Uncapped(AgentService):
    """Refuses nothing itself: what differs between the endpoints is their validation."""

    def prepare(self, req: GenerationRequest) -> GenerationRequest:
        return req


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 70_000) | st.floats(-3, 3) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["type", "text", "id", "name", "input", "tool_use_id", "content",
                         "role", "schema", "x"]), inner, max_size=3), max_leaves=8)
BLOCKS = st.fixed_dictionaries({"type": st.sampled_from(["text", "tool_use", "tool_result"]),
                                "text": st.just("a"), "id": st.sampled_from(["t1", "t2"]),
                                "name": st.just("f"), "input": st.just({}),
                                "tool_use_id": st.sampled_from(["t1", "t2"])})
TURNS = st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]),
                                        "content": st.lists(BLOCKS, min_size=1, max_size=2)}),
                 min_size=1, max_size=4)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(field=st.sampled_from([*sorted(MessagesRequest.model_fields), "x"]), value=JSON,
       turns=TURNS | st.none())
def test_count_tokens_refuses_exactly_what_messages_refuses(field: str, value: Any,
                                                            turns: Any) -> None:
    """The same body, one field anything (and the turns, tool blocks in any order): both
    endpoints answer alike, a refusal naming the same field."""
    body = {**ASK, **({"messages": turns} if turns else {}), field: value}
    body["max_tokens"] = body["max_tokens"] if field == "max_tokens" else 8
    with TestClient(create_app(Uncapped())) as c:
        generated = c.post(URL, json=body)
        counted = c.post(URL + "/count_tokens", json=body)
    if field == "max_tokens" and value is None:  # required for a generation only
        assert generated.status_code == 400 and counted.status_code == 200
        return
    assert generated.status_code == counted.status_code, (body, generated.text, counted.text)
    if counted.status_code != 200:
        assert generated.json()["error"] == counted.json()["error"]


def test_a_tool_result_answers_the_tool_use_before_it(client: TestClient) -> None:
    turns = [{"role": "user", "content": "hi"}, USE,
             {"role": "system", "content": "Be brief."}, answer("toolu_1")]
    for path in (URL, URL + "/count_tokens"):
        assert client.post(path, json={**ASK, "messages": turns}).status_code == 200, path


def test_unknown_paths_below_messages_have_anthropic_s_shape(client: TestClient) -> None:
    r = client.post(URL + "/batches", json={})
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    r = client.get("/v1/nope")
    assert r.status_code == 404 and "type" not in r.json()  # OpenAI's shape elsewhere


def test_x_api_key_and_bearer_both_authorize() -> None:
    with TestClient(create_app(AgentService(), api_key="s3cret")) as c:
        r = c.post(URL, json=ASK)
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        assert "x-api-key" in r.json()["error"]["message"]
        assert c.post(URL, json=ASK, headers={"x-api-key": "wrong"}).status_code == 401
        assert c.post(URL, json=ASK, headers={"x-api-key": "s3cret"}).status_code == 200
        head = {"Authorization": "Bearer s3cret"}
        assert c.post(URL, json=ASK, headers=head).status_code == 200
        assert c.get("/v1/models", headers={"x-api-key": "s3cret"}).status_code == 200
        r = c.get("/v1/models")
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"


def test_count_tokens(client: TestClient, svc: AgentService) -> None:
    body = {"model": "tiny", "system": [{"type": "text", "text": BILLING}],
            "messages": [{"role": "user", "content": "one two three"}], "tools": [WEATHER]}
    r = client.post(URL + "/count_tokens", json=body)
    assert r.status_code == 200 and r.json() == {"input_tokens": 4}
    assert svc.last.messages == [{"role": "user", "content": "one two three"}]
    r = client.post(URL + "/count_tokens", json={"model": "tiny", "messages": []})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"


def test_models_list_and_retrieve(client: TestClient) -> None:
    [entry] = client.get("/v1/models").json()["data"]
    assert entry["id"] == "tiny" and entry["aliases"] == ["default"]
    assert entry["capabilities"]["tool_calling"] is True
    assert "/v1/messages" in entry["endpoints"] and "/v1/responses" in entry["endpoints"]
    for name in ("tiny", "default"):
        assert client.get(f"/v1/models/{name}").json() == entry
    r = client.get("/v1/models/gpt-9")
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


def test_the_anthropic_sdk_reads_messages_events_and_errors(svc: AgentService) -> None:
    with TestClient(create_app(svc)) as c:
        sdk = anthropic.Anthropic(base_url="http://testserver", api_key="x", http_client=c,
                                  max_retries=0)
        msg = sdk.messages.create(model="tiny", max_tokens=64,
                                  messages=[{"role": "user", "content": "hi"}])
        assert msg.content[0].type == "text" and msg.content[0].text == "Hello world"
        svc.script = text_then_call()
        with sdk.messages.stream(model="tiny", max_tokens=64, tools=[WEATHER],  # type: ignore[list-item]
                                 messages=[{"role": "user", "content": "hi"}]) as events:
            final = events.get_final_message()
        assert [b.type for b in final.content] == ["text", "tool_use", "text"]
        assert final.stop_reason == "tool_use" and final.usage.input_tokens == 10
        count = sdk.messages.count_tokens(model="tiny",
                                          messages=[{"role": "user", "content": "a b"}])
        assert count.input_tokens == 2
        with pytest.raises(anthropic.NotFoundError) as exc:
            sdk.messages.create(model="claude-x", max_tokens=8,
                                messages=[{"role": "user", "content": "hi"}])
        assert exc.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
