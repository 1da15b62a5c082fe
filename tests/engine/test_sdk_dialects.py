"""The Responses and Messages APIs through the official SDKs (openai, openai-agents,
anthropic) on the real `ModelService` (tiny random model, real tokenizer and template):
the grammar's promise holds in both dialects, streamed equals whole, tool results round
trip, and a Claude-Code-shaped conversation reads most of its second prompt from the
cache once the per-request billing header is stripped."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Literal

import anthropic
import httpx
import jsonschema
import pytest
from fastapi.testclient import TestClient
from openai import AsyncOpenAI, OpenAI

from ffwd.config import FillConfig
from ffwd.serve.app import create_app
from tests.engine.tiny_service import tiny_service

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                         "days": {"type": "integer", "minimum": 1,
                                                  "maximum": 7}},
        "required": ["city", "days"], "additionalProperties": False}
TIME = {"type": "object", "properties": {"utc": {"type": "boolean"}}, "required": ["utc"],
        "additionalProperties": False}
SCHEMAS = {"get_weather": CITY, "get_time": TIME}
FLAT = [{"type": "function", "name": n, "parameters": s, "strict": True}
        for n, s in SCHEMAS.items()]
ANTHROPIC_TOOLS = [{"name": n, "description": f"{n} tool", "input_schema": s}
                   for n, s in SCHEMAS.items()]
ASK = "What is the weather in Paris for the next two days?"
GREEDY = {"temperature": 0}  # the anthropic SDK no longer names sampling settings


@pytest.fixture(scope="module")
def app() -> Any:
    return create_app(tiny_service(FillConfig(mode="echo"), capped=False, context=8192))


def valid(name: str, arguments: dict[str, Any]) -> None:
    jsonschema.validate(arguments, SCHEMAS[name])


# --- OpenAI Responses ---------------------------------------------------------------
def test_responses_plain_and_streamed_are_the_same(oai: OpenAI) -> None:
    kw: Any = {"model": "default", "input": ASK, "max_output_tokens": 12, "temperature": 0}
    whole = oai.responses.create(**kw)
    assert whole.status in ("completed", "incomplete") and whole.usage is not None
    assert whole.usage.output_tokens <= 12
    events = list(oai.responses.create(**kw, stream=True))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    last = events[-1]  # response.completed, or response.incomplete at max_output_tokens
    assert last.type == f"response.{whole.status}" and last.type != "response.failed"
    final = last.response
    assert text == final.output_text == whole.output_text
    assert [o.model_dump(exclude={"id", "call_id"}) for o in final.output] == [
        o.model_dump(exclude={"id", "call_id"}) for o in whole.output]


@pytest.mark.parametrize("choice", ["required", {"type": "function", "name": "get_time"}])
def test_responses_required_and_named_always_call(oai: OpenAI, choice: Any) -> None:
    for seed in range(3):
        r = oai.responses.create(model="default", input=ASK, tools=FLAT,  # type: ignore[arg-type]
                                 tool_choice=choice, max_output_tokens=80, temperature=1.0,
                                 extra_body={"seed": seed})
        calls = [o for o in r.output if o.type == "function_call"]
        assert calls and all(o.type == "function_call" for o in r.output), r.output
        for c in calls[: -1 if r.status == "incomplete" else None]:
            valid(c.name, json.loads(c.arguments))
            assert isinstance(choice, str) or c.name == "get_time"


def test_responses_function_call_output_round_trip(oai: OpenAI) -> None:
    first = oai.responses.create(model="default", input=ASK, tools=FLAT,  # type: ignore[arg-type]
                                 tool_choice={"type": "function", "name": "get_weather"},
                                 max_output_tokens=80, temperature=0)
    call = next(o for o in first.output if o.type == "function_call")
    follow = [{"role": "user", "content": ASK},
              {"type": "function_call", "call_id": call.call_id, "name": call.name,
               "arguments": call.arguments},
              {"type": "function_call_output", "call_id": call.call_id, "output": "18C"}]
    second = oai.responses.create(model="default", input=follow, tools=FLAT,  # type: ignore[arg-type]
                                  max_output_tokens=8, temperature=0)
    assert second.status in ("completed", "incomplete") and second.usage is not None
    assert second.usage.input_tokens_details.cached_tokens > 0  # the first turn's prefix
    chained = oai.responses.create(model="default", previous_response_id=first.id,
                                   input=follow[2:], max_output_tokens=8, temperature=0)  # type: ignore[arg-type]
    assert chained.usage is not None and chained.usage.input_tokens > 0


def test_responses_json_schema_and_a_non_function_tool(oai: OpenAI) -> None:
    fmt = {"type": "json_schema", "name": "forecast", "schema": CITY, "strict": True}
    r = oai.responses.create(model="default", input=ASK, text={"format": fmt},  # type: ignore[typeddict-item]
                             tools=[{"type": "web_search"}], max_output_tokens=60,  # type: ignore[list-item]
                             temperature=1.0, extra_body={"seed": 1})
    if r.status == "completed":
        jsonschema.validate(json.loads(r.output_text), CITY)
    assert (r.model_extra or {})["warnings"] == [
        "tools[0]: tools of type 'web_search' are not supported (ffwd runs function tools); "
        "skipped"]


def test_openai_agents_default_responses_model_calls_a_function_tool(app: Any) -> None:
    from agents import Agent, ModelSettings, Runner, function_tool, set_tracing_disabled
    from agents.models.openai_responses import OpenAIResponsesModel

    set_tracing_disabled(True)  # its exporter would call the network
    seen: list[dict[str, Any]] = []

    @function_tool
    def get_weather(city: Literal["Paris", "Oslo"], unit: Literal["C", "F"]) -> str:
        """The forecast for a city."""
        seen.append({"city": city, "unit": unit})
        return f"sunny in {city}"

    async def run() -> Any:
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t")
        client = AsyncOpenAI(base_url="http://t/v1", api_key="x", http_client=http)
        agent = Agent(name="forecaster", instructions="Use the tool.", tools=[get_weather],
                      model=OpenAIResponsesModel("default", client),
                      model_settings=ModelSettings(tool_choice="required", max_tokens=80,
                                                   temperature=0.0, parallel_tool_calls=False),
                      tool_use_behavior="stop_on_first_tool")
        return await Runner.run(agent, ASK, max_turns=2)

    result = asyncio.run(run())
    assert len(seen) == 1 and seen[0]["city"] in ("Paris", "Oslo")
    assert result.final_output == f"sunny in {seen[0]['city']}"


# --- Anthropic Messages ---------------------------------------------------------------
def test_messages_plain_and_streamed_are_the_same(claude: anthropic.Anthropic) -> None:
    kw: Any = {"model": "default", "max_tokens": 12, "extra_body": {"temperature": 0},
               "messages": [{"role": "user", "content": ASK}]}
    whole = claude.messages.create(**kw)
    with claude.messages.stream(**kw) as events:
        text = "".join(events.text_stream)
        final = events.get_final_message()
    assert whole.stop_reason in ("end_turn", "max_tokens")
    assert text == "".join(b.text for b in whole.content if b.type == "text")
    assert [b.to_dict(exclude_unset=True) for b in final.content] == [
        b.to_dict(exclude_unset=True) for b in whole.content]
    assert final.stop_reason == whole.stop_reason
    assert final.usage.output_tokens == whole.usage.output_tokens <= 12


@pytest.mark.parametrize("choice", [{"type": "any"}, {"type": "tool", "name": "get_time"}])
def test_messages_any_and_named_tool_always_call(claude: anthropic.Anthropic,
                                                 choice: Any) -> None:
    for seed in range(3):
        msg = claude.messages.create(model="default", max_tokens=80,
                                     tools=ANTHROPIC_TOOLS, tool_choice=choice,  # type: ignore[arg-type]
                                     messages=[{"role": "user", "content": ASK}],
                                     extra_body={"temperature": 1.0, "seed": seed})
        uses = [b for b in msg.content if b.type == "tool_use"]
        assert uses and all(b.type == "tool_use" for b in msg.content), msg.content
        if msg.stop_reason == "tool_use":
            assert all(b.id.startswith("toolu_") for b in uses)
            for b in uses:
                valid(b.name, b.input)  # type: ignore[arg-type]
        assert choice["type"] == "any" or {b.name for b in uses} == {"get_time"}


def test_messages_tool_result_round_trip_and_count_tokens(claude: anthropic.Anthropic) -> None:
    ask: Any = [{"role": "user", "content": ASK}]
    first = claude.messages.create(model="default", max_tokens=80, extra_body=GREEDY,
                                   tools=ANTHROPIC_TOOLS,  # type: ignore[arg-type]
                                   tool_choice={"type": "tool", "name": "get_weather"},
                                   messages=ask)
    use = next(b for b in first.content if b.type == "tool_use")
    turn: Any = [*ask, {"role": "assistant", "content": [b.model_dump() for b in first.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                               "content": "18C and sunny"}]}]
    second = claude.messages.create(model="default", max_tokens=8, extra_body=GREEDY,
                                    tools=ANTHROPIC_TOOLS, messages=turn)  # type: ignore[arg-type]
    assert second.usage.cache_read_input_tokens  # the first turn's prefix was reused
    count = claude.messages.count_tokens(model="default", tools=ANTHROPIC_TOOLS,  # type: ignore[arg-type]
                                         messages=turn)
    u = second.usage
    assert count.input_tokens == u.input_tokens + (u.cache_read_input_tokens or 0)


def test_messages_errors_reach_the_sdk_as_its_exceptions(claude: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as exc:
        claude.messages.create(model="default", max_tokens=0,
                               messages=[{"role": "user", "content": "hi"}])
    assert exc.value.body["error"]["param"] == "max_tokens"  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.create(model="claude-3-haiku", max_tokens=8,
                               messages=[{"role": "user", "content": "hi"}])


# --- cache-friendly agent prompts -----------------------------------------------------
def cache_share(usage: dict[str, Any]) -> float:
    return usage["cache_read_input_tokens"] / (usage["input_tokens"]
                                               + usage["cache_read_input_tokens"])


def claude_code_turns(http: TestClient) -> list[dict[str, Any]]:
    out = []
    for name in ("claude_code_turn1", "claude_code_turn2"):
        body = {**json.loads((FIXTURES / f"{name}.json").read_text()), "max_tokens": 4,
                "stream": False, "model": "default"}
        r = http.post("/v1/messages", json=body)
        assert r.status_code == 200, r.text
        out.append(r.json()["usage"])
    return out


def test_claude_code_turn_two_reads_most_of_its_prompt_from_the_cache(
        http: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as m:  # what the cache sees when the header stays in
        m.setattr("ffwd.serve.dialects.messages.strip_volatile", lambda text: text)
        _, kept = claude_code_turns(http)
    assert cache_share(kept) < 0.05
    _, second = claude_code_turns(http)
    assert cache_share(second) > 0.9, second
    print(f"\nClaude-Code-shaped turn 2: {second['cache_read_input_tokens']} of "
          f"{second['input_tokens'] + second['cache_read_input_tokens']} prompt tokens "
          "read from the cache")


def test_codex_turn_two_reads_most_of_its_prompt_from_the_cache(http: TestClient) -> None:
    usages = []
    for name in ("codex_turn1", "codex_turn2"):
        body = {**json.loads((FIXTURES / f"{name}.json").read_text()),
                "max_output_tokens": 4, "stream": False, "model": "default"}
        r = http.post("/v1/responses", json=body)
        assert r.status_code == 200, r.text
        assert len(r.json()["warnings"]) == 2  # apply_patch (custom) and web_search
        usages.append(r.json()["usage"])
    second = usages[1]
    assert second["input_tokens_details"]["cached_tokens"] > 0.85 * second["input_tokens"]
