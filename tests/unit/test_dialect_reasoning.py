"""A reasoning model's replies on every API, over a scripted service (issue 48): the
reasoning deltas come back as Chat's ``reasoning_content``, Anthropic's ``thinking``
blocks and Responses' ``reasoning`` items, before the content and calls they led to,
streamed and whole alike (generated text), read by the openai and anthropic SDKs,
counted in each usage and described by the served document."""

from __future__ import annotations

import json
from typing import Any

import anthropic
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from openai import OpenAI

from ffwd.engine.events import TokenEvent
from ffwd.serve.app import create_app
from ffwd.templates.formats.base import ToolCall
from tests.unit.agent_service import AgentService, Script, sse_events
from tests.unit.scripted import call, result, text, thought
from tests.unit.test_serve_app import sse

HI = [{"role": "user", "content": "Weather in Oslo?"}]
CHAT_TOOL = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
FLAT_TOOL = [{"type": "function", "name": "get_weather",
              "parameters": CHAT_TOOL[0]["function"]["parameters"]}]
CLAUDE_TOOL = [{"name": "get_weather", "input_schema": CHAT_TOOL[0]["function"]["parameters"]}]
ARGS = '{"city": "Oslo"}'
MARKUP = 2  # ids of <think> and </think>: reasoning ids that wrote no reasoning text


def reasoned(reasoning: list[str], content: list[str], with_call: bool = False) -> Script:
    """Reasoning pieces, then content pieces (and a call): one id each, as the text layer
    emits them."""
    events: list[TokenEvent] = [thought(p) for p in reasoning] + [text(p) for p in content]
    calls: tuple[ToolCall, ...] = ()
    if with_call:
        events += [call(0, "get_weather"), call(0, arguments=ARGS)]
        calls = (ToolCall("get_weather", ARGS),)
    spent = len(reasoning) + MARKUP
    return [*events, result("".join(content), calls=calls,
                            finish="tool_calls" if with_call else "stop",
                            completion=spent + len(content) + 2 * with_call,
                            reasoning="".join(reasoning), reasoning_tokens=spent)]


THINK, SAY = ["The user", " wants Oslo", "'s weather."], ["It is", " sunny."]


def app_for(script: Script) -> TestClient:
    return TestClient(create_app(AgentService(script)))


def chat(c: TestClient, **body: Any) -> Any:
    r = c.post("/v1/chat/completions", json={"model": "tiny", "messages": HI, **body})
    assert r.status_code == 200, r.text
    return sse(r.text) if body.get("stream") else r.json()


def responses(c: TestClient, **body: Any) -> Any:
    r = c.post("/v1/responses", json={"model": "tiny", "input": "hi", **body})
    assert r.status_code == 200, r.text
    return sse_events(r.text) if body.get("stream") else r.json()


def messages(c: TestClient, **body: Any) -> Any:
    r = c.post("/v1/messages", json={"model": "tiny", "max_tokens": 64, "messages": HI, **body})
    assert r.status_code == 200, r.text
    return sse_events(r.text) if body.get("stream") else r.json()


# --- Chat Completions -------------------------------------------------------------------
def test_chat_reasoning_content_before_content_and_counted() -> None:
    with app_for(reasoned(THINK, SAY)) as c:
        body = chat(c)
        chunks = chat(c, stream=True, stream_options={"include_usage": True})
    assert body["choices"][0]["message"] == {
        "role": "assistant", "content": "It is sunny.",
        "reasoning_content": "The user wants Oslo's weather."}
    assert body["usage"]["completion_tokens_details"] == {"reasoning_tokens": 5}
    assert body["usage"]["completion_tokens"] == 7
    deltas = [c["choices"][0]["delta"] for c in chunks[1:-3]]
    assert deltas == [{"reasoning_content": p} for p in THINK] + [{"content": p} for p in SAY]
    assert chunks[-2]["usage"] == body["usage"]


def test_chat_reasoning_then_a_call() -> None:
    with app_for(reasoned(THINK, [], with_call=True)) as c:
        message = chat(c, tools=CHAT_TOOL)["choices"][0]["message"]
        chunks = chat(c, tools=CHAT_TOOL, stream=True)
    assert message["content"] is None and message["reasoning_content"] == "".join(THINK)
    assert [t["function"] for t in message["tool_calls"]] == [
        {"name": "get_weather", "arguments": ARGS}]
    kinds = [next(iter(c["choices"][0]["delta"])) for c in chunks[1:-2]]
    assert kinds == ["reasoning_content"] * 3 + ["tool_calls"] * 2


def test_chat_without_reasoning_has_no_reasoning_content() -> None:
    with app_for(reasoned([], SAY)) as c:
        message = chat(c)["choices"][0]["message"]
        chunks = chat(c, stream=True)
    assert "reasoning_content" not in message
    assert not any("reasoning_content" in c["choices"][0]["delta"] for c in chunks[:-1])


def test_the_openai_sdk_reads_chat_reasoning() -> None:
    with app_for(reasoned(THINK, SAY)) as c:
        sdk = OpenAI(base_url="http://testserver/v1", api_key="x", http_client=c)
        r = sdk.chat.completions.create(model="tiny", messages=HI)  # type: ignore[arg-type]
        stream = sdk.chat.completions.create(model="tiny", messages=HI, stream=True,  # type: ignore[arg-type]
                                             stream_options={"include_usage": True})
        parts = [(getattr(ch.choices[0].delta, "reasoning_content", None) or "",
                  ch.choices[0].delta.content or "", ch.usage) if ch.choices
                 else ("", "", ch.usage) for ch in stream]
    assert getattr(r.choices[0].message, "reasoning_content", None) == "".join(THINK)
    assert r.choices[0].message.content == "".join(SAY)
    assert r.usage and r.usage.completion_tokens_details
    assert r.usage.completion_tokens_details.reasoning_tokens == 5
    assert "".join(p[0] for p in parts) == "".join(THINK)
    assert "".join(p[1] for p in parts) == "".join(SAY)
    last = parts[-1][2]
    assert last and last.completion_tokens_details
    assert last.completion_tokens_details.reasoning_tokens == 5


# --- Anthropic Messages -----------------------------------------------------------------
def blocks_of(events: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The content blocks a client assembles from a stream's events."""
    blocks: dict[int, dict[str, Any]] = {}
    for name, data in events:
        if name == "content_block_start":
            blocks[data["index"]] = dict(data["content_block"], json="")
        elif name == "content_block_delta":
            b, d = blocks[data["index"]], data["delta"]
            if d["type"] == "signature_delta":
                b["signature"] = d["signature"]
            elif d["type"] == "input_json_delta":
                b["json"] += d["partial_json"]
            else:  # text_delta, thinking_delta
                key = d["type"].removesuffix("_delta")
                b[key] += d[key]
    out = []
    for i in sorted(blocks):
        b = blocks[i]
        raw = b.pop("json")
        out.append(b | ({"input": json.loads(raw or "{}")} if b["type"] == "tool_use" else {}))
    return out


def test_messages_thinking_blocks_first_and_streamed_the_same() -> None:
    with app_for(reasoned(THINK, SAY)) as c:
        whole = messages(c)
        events = messages(c, stream=True)
    assert whole["content"] == [
        {"type": "thinking", "thinking": "".join(THINK), "signature": ""},
        {"type": "text", "text": "".join(SAY)}]
    assert whole["usage"]["output_tokens"] == 7 and whole["stop_reason"] == "end_turn"
    names = [(n, d.get("delta", {}).get("type")) for n, d in events]
    assert names[2:9] == [("content_block_start", None)] + [
        ("content_block_delta", "thinking_delta")] * 3 + [
        ("content_block_delta", "signature_delta"), ("content_block_stop", None),
        ("content_block_start", None)]
    assert blocks_of(events) == whole["content"]


def test_messages_thinking_then_tool_use() -> None:
    with app_for(reasoned(THINK, [], with_call=True)) as c:
        whole = messages(c, tools=CLAUDE_TOOL)
        events = messages(c, tools=CLAUDE_TOOL, stream=True)
    assert [b["type"] for b in whole["content"]] == ["thinking", "tool_use"]
    assert whole["content"][1]["input"] == {"city": "Oslo"} and whole["stop_reason"] == "tool_use"
    streamed = blocks_of(events)
    assert [{k: v for k, v in b.items() if k != "id"} for b in streamed] == [
        {k: v for k, v in b.items() if k != "id"} for b in whole["content"]]


def test_the_anthropic_sdk_reads_thinking() -> None:
    with app_for(reasoned(THINK, SAY, with_call=True)) as c:
        sdk = anthropic.Anthropic(base_url="http://testserver", api_key="x", http_client=c,
                                  max_retries=0)
        kw: Any = {"model": "tiny", "max_tokens": 2048, "messages": HI, "tools": CLAUDE_TOOL,
                   "thinking": {"type": "enabled", "budget_tokens": 1024}}
        msg = sdk.messages.create(**kw)
        with sdk.messages.stream(**kw) as events:
            thinking = "".join(e.thinking for e in events if e.type == "thinking")
            final = events.get_final_message()
    for m in (msg, final):
        assert [b.type for b in m.content] == ["thinking", "text", "tool_use"]
        first = m.content[0]
        assert first.type == "thinking" and first.thinking == "".join(THINK)
        assert first.signature == ""
    assert thinking == "".join(THINK)


# --- Responses --------------------------------------------------------------------------
def without_ids(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in item.items() if k not in ("id", "call_id")} for item in output]


def test_responses_reasoning_item_first_and_counted() -> None:
    with app_for(reasoned(THINK, SAY)) as c:
        body = responses(c, reasoning={"effort": "high"})
    reasoning, message = body["output"]
    assert reasoning["id"].startswith("rs_") and message["type"] == "message"
    assert without_ids([reasoning]) == [{
        "type": "reasoning", "summary": [], "status": "completed",
        "content": [{"type": "reasoning_text", "text": "".join(THINK)}]}]
    assert body["output_text"] == "".join(SAY)
    assert body["usage"]["output_tokens_details"] == {"reasoning_tokens": 5}
    assert body["reasoning"] == {"effort": "high", "summary": None}


def test_responses_stream_events_and_streamed_equals_whole() -> None:
    with app_for(reasoned(THINK, [], with_call=True)) as c:
        whole = responses(c, tools=FLAT_TOOL)
        events = responses(c, tools=FLAT_TOOL, stream=True)
    assert [n for n, _ in events][2:10] == [
        "response.output_item.added", "response.content_part.added",
        "response.reasoning_text.delta", "response.reasoning_text.delta",
        "response.reasoning_text.delta", "response.reasoning_text.done",
        "response.content_part.done", "response.output_item.done"]
    added = events[2][1]["item"]
    assert added["type"] == "reasoning" and added["content"] == []
    assert events[3][1]["part"] == {"type": "reasoning_text", "text": ""}
    deltas = "".join(d["delta"] for n, d in events if n == "response.reasoning_text.delta")
    done = next(d for n, d in events if n == "response.reasoning_text.done")
    assert deltas == done["text"] == "".join(THINK)
    final = events[-1][1]["response"]
    assert [i["type"] for i in final["output"]] == ["reasoning", "function_call"]
    assert without_ids(final["output"]) == without_ids(whole["output"])
    assert final["usage"] == whole["usage"]


def test_reasoning_tokens_give_no_output_text_logprobs() -> None:
    script = [thought("Hm", logprob=-1.0), thought("m.", logprob=-2.0),
              text("Hi", logprob=-0.5), result("Hi", reasoning="Hmm.", reasoning_tokens=2,
                                               completion=3)]
    with app_for(script) as c:
        asked: Any = {"include": ["message.output_text.logprobs"]}
        body = responses(c, **asked)
        events = responses(c, stream=True, **asked)
    part = body["output"][1]["content"][0]
    assert [lp["logprob"] for lp in part["logprobs"]] == [-0.5]
    [delta] = [d for n, d in events if n == "response.output_text.delta"]
    assert [lp["logprob"] for lp in delta["logprobs"]] == [-0.5]


def test_the_openai_sdk_reads_reasoning_items() -> None:
    with app_for(reasoned(THINK, SAY)) as c:
        sdk = OpenAI(base_url="http://testserver/v1", api_key="x", http_client=c)
        r = sdk.responses.create(model="tiny", input="hi", reasoning={"effort": "low"})
        with sdk.responses.stream(model="tiny", input="hi") as events:
            deltas = [e.delta for e in events if e.type == "response.reasoning_text.delta"]
            final = events.get_final_response()
    for resp in (r, final):
        item = resp.output[0]
        assert item.type == "reasoning" and item.content
        assert item.content[0].text == "".join(THINK)
        assert resp.output_text == "".join(SAY)
        assert resp.usage and resp.usage.output_tokens_details.reasoning_tokens == 5
    assert "".join(deltas) == "".join(THINK)
    assert r.reasoning and r.reasoning.effort == "low"


# --- all three: generated text, streamed equals whole --------------------------------------
PIECE = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=6)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(reasoning=st.lists(PIECE, max_size=4), content=st.lists(PIECE, max_size=3),
       with_call=st.booleans())
def test_every_api_returns_the_reasoning_as_written(reasoning: list[str], content: list[str],
                                                    with_call: bool) -> None:
    """Whole and streamed, each API gives back the reasoning and the content exactly as
    the deltas carried them, the reasoning before anything else."""
    think, say = "".join(reasoning), "".join(content)
    with app_for(reasoned(reasoning, content, with_call)) as c:
        tools: dict[str, Any] = {"tools": CHAT_TOOL} if with_call else {}
        msg = chat(c, **tools)["choices"][0]["message"]
        chunks = chat(c, stream=True, **tools)
        assert msg.get("reasoning_content", "") == think
        assert "".join(ch["choices"][0]["delta"].get("reasoning_content", "")
                       for ch in chunks[:-1]) == think
        claude: dict[str, Any] = {"tools": CLAUDE_TOOL} if with_call else {}
        whole = messages(c, **claude)["content"]
        assert [b["thinking"] for b in whole if b["type"] == "thinking"] == (
            [think] if think else [])
        assert not think or whole[0]["type"] == "thinking"
        streamed = blocks_of(messages(c, stream=True, **claude))
        assert without_ids(streamed) == without_ids(whole)
        flat: dict[str, Any] = {"tools": FLAT_TOOL} if with_call else {}
        output = responses(c, **flat)["output"]
        final = responses(c, stream=True, **flat)[-1][1]["response"]
        assert without_ids(final["output"]) == without_ids(output)
        kinds = [i["type"] for i in output]
        assert kinds == ["reasoning"] * bool(think) + ["message"] * bool(say) + [
            "function_call"] * with_call


# --- capability and document ---------------------------------------------------------------
class Reasoner(AgentService):
    def model_info(self) -> dict[str, Any]:
        return super().model_info() | {"reasoning": True}


def test_models_say_whether_the_model_reasons() -> None:
    for svc, reasons in ((AgentService(), False), (Reasoner(), True)):
        with TestClient(create_app(svc)) as c:
            [entry] = c.get("/v1/models").json()["data"]
        assert entry["capabilities"]["reasoning"] is reasons


def stream_validator(doc: dict[str, Any], path: str) -> Draft202012Validator:
    """The validator of one event's data on `path`'s stream, as the document declares it."""
    content = doc["paths"][path]["post"]["responses"]["200"]["content"]
    event = content["text/event-stream"]["schema"]["properties"]["data"]["contentSchema"]
    return Draft202012Validator(event | {"components": doc["components"]})


def test_the_document_describes_reasoning_replies() -> None:
    """Every reasoning body and event is valid against the served OpenAPI document."""
    with app_for(reasoned(THINK, SAY, with_call=True)) as c:
        doc = c.get("/openapi.json").json()

        def check(component: str, body: object) -> None:
            schema = {"$ref": f"#/components/schemas/{component}",
                      "components": doc["components"]}
            errors = list(Draft202012Validator(schema).iter_errors(body))
            assert not errors, (component, body, errors[0].message)

        check("ChatCompletion", chat(c, tools=CHAT_TOOL))
        for chunk in chat(c, tools=CHAT_TOOL, stream=True,
                          stream_options={"include_usage": True})[:-1]:
            check("ChatCompletionChunk", chunk)
        check("MessageResponse", messages(c, tools=CLAUDE_TOOL))
        check("Response", responses(c, tools=FLAT_TOOL))
        for path, events in (("/v1/messages", messages(c, tools=CLAUDE_TOOL, stream=True)),
                             ("/v1/responses", responses(c, tools=FLAT_TOOL, stream=True))):
            validator = stream_validator(doc, path)
            for _, data in events:
                assert validator.is_valid(data), data
