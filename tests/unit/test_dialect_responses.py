"""The OpenAI Responses API over a scripted service: translation of input items, tools and
options, the response object, the event stream, the response store, errors."""

from __future__ import annotations

import typing
from typing import Any

import pytest
from fastapi.testclient import TestClient
from openai import OpenAI
from openai.types.responses import ResponseIncludable, ResponseInputItemParam

from ffwd.serve.app import create_app
from ffwd.serve.dialects.responses_models import Includable, InputItem
from ffwd.serve.dialects.store import ResponseStore
from ffwd.templates.formats.base import ToolCall
from tests.unit.agent_service import (  # noqa: F401 (fixtures)
    AgentService,
    Script,
    client_fixture,
    hello,
    sse_events,
    svc_fixture,
    text_then_call,
    weather_call,
)
from tests.unit.scripted import call, result
from tests.unit.test_serve_app import Scripted

URL = "/v1/responses"
WEATHER = {"type": "function", "name": "get_weather", "description": "Weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}, "strict": True}
CODEX_TOOLS = [WEATHER, {"type": "web_search"}, {"type": "local_shell"},
               {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}}]


def post(client: TestClient, **body: Any) -> dict[str, Any]:
    r = client.post(URL, json={"model": "tiny", **body})
    assert r.status_code == 200, r.text
    return r.json()


def without_ids(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if k not in ("id", "call_id")} for item in output]


def test_plain_text_response(client: TestClient, svc: AgentService) -> None:
    svc.script = hello(cached=6)
    body = post(client, input="hi", instructions="Be brief.", metadata={"run": "7"})
    assert body["object"] == "response" and body["status"] == "completed"
    assert body["id"].startswith("resp_") and body["incomplete_details"] is None
    assert body["output_text"] == "Hello world" and body["metadata"] == {"run": "7"}
    [item] = body["output"]
    assert item["type"] == "message" and item["role"] == "assistant"
    assert item["content"][0]["type"] == "output_text"
    assert item["content"][0]["text"] == "Hello world"
    assert body["usage"] == {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 6},
                             "output_tokens": 2, "output_tokens_details": {"reasoning_tokens": 0},
                             "total_tokens": 12}
    assert "ffwd" in body and "warnings" not in body
    assert svc.last.messages == [{"role": "system", "content": "Be brief."},
                                 {"role": "user", "content": "hi"}]


def test_items_become_the_conversation(client: TestClient, svc: AgentService) -> None:
    items = [
        {"type": "message", "role": "developer", "content": [{"type": "input_text",
                                                              "text": "Sandbox: on."}]},
        {"role": "user", "content": [{"type": "input_text", "text": "Weather?"},
                                     {"type": "input_text", "text": "In Paris."}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "xyz"},
        {"type": "function_call", "call_id": "c1", "name": "get_weather",
         "arguments": '{"city": "Paris"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "18C, sunny"},
        {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** x"},
        {"type": "custom_tool_call_output", "call_id": "c2", "output": "Done!"},
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text",
                                                              "text": "It is sunny."}]},
    ]
    body = post(client, input=items, instructions="You are Codex.", tools=[WEATHER])
    assert body["warnings"] == ["input[7]: items of type 'web_search_call' are not supported; "
                                "skipped"]
    call1 = {"id": "c1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    call2 = {"id": "c2", "type": "function",
             "function": {"name": "apply_patch", "arguments": '{"input": "*** x"}'}}
    assert svc.last.messages == [
        {"role": "system", "content": "You are Codex.\n\nSandbox: on."},
        {"role": "user", "content": "Weather?\nIn Paris."},
        {"role": "assistant", "content": "", "tool_calls": [call1]},
        {"role": "tool", "tool_call_id": "c1", "content": "18C, sunny"},
        {"role": "assistant", "content": "", "tool_calls": [call2]},
        {"role": "tool", "tool_call_id": "c2", "content": "Done!"},
        {"role": "assistant", "content": "It is sunny."},
    ]


def test_other_tool_types_are_skipped_and_named(client: TestClient, svc: AgentService) -> None:
    body = post(client, input="hi", tools=CODEX_TOOLS, tool_choice="auto",
                parallel_tool_calls=False)
    assert body["warnings"] == [
        f"tools[{i}]: tools of type {t!r} are not supported (ffwd runs function tools); skipped"
        for i, t in ((1, "web_search"), (2, "local_shell"), (3, "custom"))]
    assert svc.last.tools == [{"type": "function", "function": {
        "name": "get_weather", "parameters": WEATHER["parameters"],
        "description": "Weather in a city.", "strict": True}}]
    assert svc.last.tool_choice == "auto" and svc.last.parallel_tool_calls is False
    assert [t["name"] for t in body["tools"]] == ["get_weather"]


@pytest.mark.parametrize(("choice", "expected"), [
    ("required", "required"), ("none", "none"), (None, "auto"),
    ({"type": "function", "name": "get_weather"},
     {"type": "function", "function": {"name": "get_weather"}}),
    ({"type": "allowed_tools", "mode": "required",
      "tools": [{"type": "function", "name": "get_weather"}]}, "required"),
])
def test_tool_choice(client: TestClient, svc: AgentService, choice: Any, expected: Any) -> None:
    other = {**WEATHER, "name": "get_time"}
    post(client, input="hi", tools=[WEATHER, other], **({"tool_choice": choice} if choice
                                                         else {}))
    assert svc.last.tool_choice == expected
    # A named function is exactly one call; parallel_tool_calls (true) governs the rest.
    assert svc.last.parallel_tool_calls is not isinstance(expected, dict)
    names = [t["function"]["name"] for t in svc.last.tools]
    allowed = isinstance(choice, dict) and choice["type"] == "allowed_tools"
    assert names == (["get_weather"] if allowed else ["get_weather", "get_time"])


def test_text_format_and_sampling_reach_the_request(client: TestClient,
                                                    svc: AgentService) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    fmt = {"type": "json_schema", "name": "place", "schema": schema, "strict": True}
    body = post(client, input="hi", text={"format": fmt}, max_output_tokens=30, temperature=0,
                top_p=0.5, stop=["\n\n"], ffwd={"fill": "strict"})
    req = svc.last
    assert req.response_format == {"type": "json_schema", "json_schema": {
        "name": "place", "description": None, "schema": schema, "strict": True}}
    assert (req.max_tokens, req.sampling.temperature, req.sampling.top_p) == (30, 0.0, 0.5)
    assert req.stop == ("\n\n",) and req.fill == {"fill": "strict"}
    assert body["text"] == {"format": fmt} and body["max_output_tokens"] == 30
    post(client, input="hi", text={"format": {"type": "json_object"}})
    assert svc.last.response_format == {"type": "json_object", "json_schema": None}


def test_calls_are_function_call_items(client: TestClient, svc: AgentService) -> None:
    svc.script = weather_call()
    body = post(client, input="Weather in Paris?", tools=[WEATHER], tool_choice="required")
    [item] = body["output"]
    assert item["type"] == "function_call" and item["status"] == "completed"
    assert item["name"] == "get_weather" and item["arguments"] == '{"city": "Paris"}'
    assert item["call_id"].startswith("call_") and item["id"].startswith("fc_")
    assert body["status"] == "completed" and body["output_text"] == ""


def test_cut_by_max_output_tokens_is_incomplete(client: TestClient, svc: AgentService) -> None:
    svc.script = weather_call(finish="length")
    body = post(client, input="hi", tools=[WEATHER], max_output_tokens=7)
    assert body["status"] == "incomplete"
    assert body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["output"][-1]["status"] == "incomplete"


def stream(client: TestClient, **body: Any) -> list[tuple[str, dict[str, Any]]]:
    r = client.post(URL, json={"model": "tiny", "stream": True, **body})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    return sse_events(r.text)


def test_stream_events_and_streamed_equals_whole(client: TestClient, svc: AgentService) -> None:
    svc.script = text_then_call()
    events = stream(client, input="hi", tools=[WEATHER])
    names = [name for name, _ in events]
    assert names == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.done", "response.output_item.done",
        "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done",
        "response.content_part.done", "response.output_item.done", "response.completed"]
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert all(name == data["type"] for name, data in events)
    final = events[-1][1]["response"]
    whole = post(client, input="hi", tools=[WEATHER])
    assert without_ids(final["output"]) == without_ids(whole["output"])
    assert final["output_text"] == whole["output_text"] == "Let me look. Done."
    text = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
    args = "".join(d["delta"] for n, d in events if n.endswith("arguments.delta"))
    assert (text, args) == ("Let me look. Done.", '{"city": "Oslo"}')
    added = [d["item"]["id"] for n, d in events if n == "response.output_item.added"]
    assert added == [item["id"] for item in final["output"]]


def test_an_incomplete_stream_ends_with_response_incomplete(client: TestClient,
                                                            svc: AgentService) -> None:
    svc.script = [call(0, "get_weather"), call(0, arguments='{"ci'),
                  result(calls=(ToolCall("get_weather", '{"ci'),), finish="length")]
    name, data = stream(client, input="hi", tools=[WEATHER])[-1]
    assert name == "response.incomplete"
    assert data["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_a_failed_stream_ends_with_response_failed() -> None:
    with TestClient(create_app(Scripted(fail=True))) as c:
        r = c.post(URL, json={"input": "hi", "stream": True})
    name, data = sse_events(r.text)[-1]
    assert name == "response.failed" and data["response"]["status"] == "failed"
    assert data["response"]["error"]["code"] == "internal_error"


def test_previous_response_id_continues_the_conversation(client: TestClient,
                                                         svc: AgentService) -> None:
    svc.script = weather_call()
    first = post(client, input="Weather in Paris?", instructions="Be brief.", tools=[WEATHER])
    call_id = first["output"][0]["call_id"]
    svc.script = hello()
    follow = [{"type": "function_call_output", "call_id": call_id, "output": "18C"}]
    second = post(client, input=follow, previous_response_id=first["id"], tools=[WEATHER])
    assert second["previous_response_id"] == first["id"]
    assert svc.last.messages == [  # instructions are not inherited
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": call_id, "content": "18C"}]
    third = post(client, input="Thanks!", previous_response_id=second["id"])
    assert svc.last.messages[-2:] == [{"role": "assistant", "content": "Hello world"},
                                      {"role": "user", "content": "Thanks!"}]
    assert client.get(f"{URL}/{third['id']}").json() == third
    assert client.delete(f"{URL}/{third['id']}").json()["deleted"] is True
    assert client.get(f"{URL}/{third['id']}").status_code == 404


def test_an_empty_input_continues_a_stored_conversation(client: TestClient,
                                                      svc: AgentService) -> None:
    first = post(client, input="hi")
    post(client, input=[], previous_response_id=first["id"])
    assert svc.last.messages == [{"role": "user", "content": "hi"},
                                 {"role": "assistant", "content": "Hello world"}]


def literals(tp: Any) -> set[str]:
    """The strings of the Literals in a type (through unions, Optional, Required)."""
    args = typing.get_args(tp)
    return {a for a in args if isinstance(a, str)} | {
        v for a in args if not isinstance(a, str) for v in literals(a)}


def test_the_item_types_and_include_values_are_the_sdk_s() -> None:
    """What the API takes, as its SDK types it: an item of any of these types is read or
    skipped, never refused; anything else is a 400 (above)."""
    models = [typing.get_args(m)[0] for m in typing.get_args(typing.get_args(InputItem)[0])]
    ours = {v for m in models for v in literals(m.model_fields["type"].annotation)}
    sdk = {v for t in typing.get_args(ResponseInputItemParam)
           for v in literals(typing.get_type_hints(t)["type"])}
    assert ours == sdk
    assert literals(Includable) == literals(ResponseIncludable)


def test_unknown_or_unstored_previous_response_is_404(client: TestClient) -> None:
    kept = post(client, input="hi", store=False)
    for rid in ("resp_nope", kept["id"]):
        r = client.post(URL, json={"input": "hi", "previous_response_id": rid})
        assert r.status_code == 404
        err = r.json()["error"]
        assert err["param"] == "previous_response_id"
        assert err["code"] == "previous_response_not_found" and err["type"]


def test_the_store_is_bounded_by_count_bytes_and_age() -> None:
    now = [0.0]
    store = ResponseStore(max_entries=2, max_age_s=10, max_bytes=10_000, clock=lambda: now[0])
    for i in range(3):
        store.put("", f"r{i}", {"i": i}, [])
    assert store.get("", "r0") is None and store.get("", "r2") is not None and len(store) == 2
    store.put("", "big", {"x": "y" * 20_000}, [])  # larger than the whole store
    assert store.get("", "big") is None
    store.put("a", "k", {"x": "y" * 6_000}, [])
    store.put("a", "k2", {"x": "y" * 6_000}, [])
    assert store.bytes <= 10_000 and store.get("a", "k") is None
    assert store.get("b", "k2") is None  # another API key's namespace sees nothing
    now[0] = 11.0
    assert store.get("a", "k2") is None and len(store) == 0


@pytest.mark.parametrize(("body", "status", "param", "needle"), [
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     400, "input[0].content", "text only"),
    ({"input": [{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{x"}]},
     400, "input[0].arguments", "not valid JSON"),
    ({"input": [7]}, 400, "input[0]", "input item"),
    ({}, 400, "input", "required"),
    ({"input": "hi", "background": True}, 400, "background", "not supported"),
    ({"input": "hi", "max_output_tokens": 5000}, 400, "max_output_tokens", "too many"),
    ({"input": "hi", "temperature": "hot"}, 400, "temperature", "expected a number"),
    ({"input": "hi", "model": "gpt-9"}, 404, "model", "does not exist"),
    ({"input": "hi", "tools": [{"type": "web_search"}], "tool_choice": "required"},
     400, "tool_choice", "requires tools"),
    ({"input": "hi", "tools": [WEATHER], "tool_choice": {"type": "function", "name": "x"}},
     400, "tool_choice", "'x', which is not in tools"),
    ({"input": "hi", "tools": [WEATHER], "tool_choice": {"type": "web_search"}},
     400, "tool_choice", "not supported"),
    ({"input": "hi", "text": {"format": {"type": "json_schema", "schema": "x"}}}, 400,
     "text.format.schema", "expected an object"),
    # What the API refuses (issue 52): nothing to answer, an item type or an include value
    # it does not have, Chat Completions' n.
    ({"input": [], "max_output_tokens": 4}, 400, "input", "no message for the model"),
    ({"input": [{"type": "reasoning", "summary": []}]}, 400, "input",
     "no message for the model"),
    ({"input": [{"type": "hologram", "x": 1}]}, 400, "input[0].type",
     "'hologram' is not an input item type"),
    ({"input": "hi", "include": ["everything"]}, 400, "include[0]",
     "'message.output_text.logprobs'"),
    ({"input": "hi", "n": 2}, 400, "n", "not a known parameter"),
    ({"input": "hi", "metadata": {"k": 7}}, 400, "metadata.k", "expected a string"),
])
def test_client_errors_name_the_field(client: TestClient, body: dict[str, Any], status: int,
                                      param: str, needle: str) -> None:
    r = client.post(URL, json=body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["param"] == param and needle in err["message"], err


def test_the_openai_sdk_reads_responses_and_events(svc: AgentService) -> None:
    scripts: dict[str, Script] = {"plain": hello(), "call": weather_call()}
    svc.script_for = lambda req: scripts["call" if req.tools else "plain"]
    with TestClient(create_app(svc)) as c:
        sdk = OpenAI(base_url="http://testserver/v1", api_key="x", http_client=c)
        r = sdk.responses.create(model="tiny", input="hi")
        assert r.output_text == "Hello world" and r.usage is not None
        assert r.usage.input_tokens_details.cached_tokens == 0
        r = sdk.responses.create(model="tiny", input="hi", tools=[WEATHER],  # type: ignore[list-item]
                                 tool_choice="required")
        assert r.output[0].type == "function_call" and r.output[0].name == "get_weather"
        with sdk.responses.stream(model="tiny", input="hi") as events:
            deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
            final = events.get_final_response()
        assert "".join(deltas) == final.output_text == "Hello world"
