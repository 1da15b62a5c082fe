"""The agents' APIs on the embedded model behind `ffwd serve`, through the official SDKs:
OpenAI Responses (openai, openai-agents) and Anthropic Messages (anthropic). Kept short:
the dialects' details are the unit and engine tiers' (tests/engine/test_sdk_dialects.py
also shows the prompt cache on turn 2 of the recorded Claude-Code-shaped conversation)."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

import anthropic
import httpx
import pytest
from openai import AsyncOpenAI, OpenAI

from tests.integration.live_server import Server

pytestmark = pytest.mark.slow

WEATHER_SCHEMA = {"type": "object", "properties": {
    "city": {"type": "string", "description": "City name"},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city"]}
WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather.",
           "parameters": WEATHER_SCHEMA}
WEATHER_TOOL = {"name": "get_weather", "description": "Current weather.",
                "input_schema": WEATHER_SCHEMA}
ASK = "What is the weather in Paris right now?"


def openai_client(server: Server) -> OpenAI:
    return OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=300)


def claude(server: Server, key: str = "unused") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0, timeout=300)


def test_responses_plain_stream_tools_and_formats(server: Server) -> None:
    c = openai_client(server)
    kw: Any = {"model": "default", "input": "Name a color.", "max_output_tokens": 16,
               "temperature": 0}
    whole = c.responses.create(**kw)
    assert whole.output_text and whole.status in ("completed", "incomplete")
    events = list(c.responses.create(**kw, stream=True))
    last = events[-1]  # the stream's own deltas add up to the response it ends with
    assert last.type in ("response.completed", "response.incomplete")
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == (
        last.response.output_text) != ""
    tools: Any = [WEATHER, {"type": "web_search"}]
    first = c.responses.create(model="default", input=ASK, tools=tools, max_output_tokens=64,
                               tool_choice={"type": "function", "name": "get_weather"},
                               parallel_tool_calls=False)
    [call] = [o for o in first.output if o.type == "function_call"]
    assert call.name == "get_weather" and json.loads(call.arguments)["city"]
    assert "web_search" in (first.model_extra or {})["warnings"][0]
    done = c.responses.create(model="default", previous_response_id=first.id, input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "18C, sunny"}],
        max_output_tokens=24, temperature=0)
    assert done.output_text and done.usage is not None
    assert done.usage.input_tokens_details.cached_tokens > 0
    schema = {"type": "object", "properties": {"color": {"type": "string", "maxLength": 20}},
              "required": ["color"]}
    fmt: Any = {"type": "json_schema", "name": "color", "schema": schema, "strict": True}
    r = c.responses.create(model="default", input="Name a color.", text={"format": fmt},
                           max_output_tokens=40, temperature=0)
    assert isinstance(json.loads(r.output_text)["color"], str)


def test_openai_agents_runs_a_function_tool(server: Server) -> None:
    from agents import Agent, ModelSettings, Runner, function_tool, set_tracing_disabled
    from agents.models.openai_responses import OpenAIResponsesModel

    set_tracing_disabled(True)  # no traces leave the machine
    seen: list[str] = []

    @function_tool
    def get_weather(city: str, unit: Literal["celsius", "fahrenheit"]) -> str:
        """Current weather in a city."""
        seen.append(city)
        return f"18 degrees {unit} in {city}"

    async def run() -> Any:
        client = AsyncOpenAI(base_url=server.url + "/v1", api_key="unused",
                             http_client=httpx.AsyncClient(timeout=300))
        agent = Agent(name="weather", instructions="Answer with the tool.", tools=[get_weather],
                      model=OpenAIResponsesModel("default", client),
                      model_settings=ModelSettings(tool_choice="required", max_tokens=64,
                                                   temperature=0.0, parallel_tool_calls=False),
                      tool_use_behavior="stop_on_first_tool")
        return await Runner.run(agent, ASK, max_turns=2)

    result = asyncio.run(run())
    assert seen and result.final_output.endswith(f"in {seen[0]}")


def test_messages_plain_stream_tools_round_trip_and_errors(server: Server) -> None:
    c = claude(server)
    kw: Any = {"model": "default", "max_tokens": 16, "extra_body": {"temperature": 0},
               "messages": [{"role": "user", "content": "Name a color."}]}
    whole = c.messages.create(**kw)
    assert whole.content[0].text  # type: ignore[union-attr]
    with c.messages.stream(**kw) as stream:  # its deltas add up to the message it ends with
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and text == final.content[0].text  # type: ignore[union-attr]
    assert final.stop_reason in ("end_turn", "max_tokens")
    ask: Any = [{"role": "user", "content": ASK}]
    msg = c.messages.create(model="default", max_tokens=64, tools=[WEATHER_TOOL],  # type: ignore[list-item]
                            tool_choice={"type": "any", "disable_parallel_tool_use": True},
                            messages=ask)
    assert msg.stop_reason == "tool_use"
    [use] = [b for b in msg.content if b.type == "tool_use"]
    assert use.name == "get_weather" and isinstance(use.input["city"], str)  # type: ignore[index]
    turn: Any = [*ask, {"role": "assistant", "content": [b.model_dump() for b in msg.content]},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                               "content": "18C and sunny"}]}]
    reply = c.messages.create(model="default", max_tokens=24, tools=[WEATHER_TOOL],  # type: ignore[list-item]
                              messages=turn)
    assert reply.content and reply.usage.cache_read_input_tokens
    count = c.messages.count_tokens(model="default", tools=[WEATHER_TOOL], messages=turn)  # type: ignore[list-item]
    assert count.input_tokens == reply.usage.input_tokens + reply.usage.cache_read_input_tokens
    with pytest.raises(anthropic.NotFoundError):
        c.messages.create(model="claude-sonnet-4-5", max_tokens=8, messages=ask)


def test_x_api_key(guarded_server: Server) -> None:
    body: Any = {"model": "default", "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(anthropic.AuthenticationError):
        claude(guarded_server, "wrong").messages.count_tokens(**body)
    assert claude(guarded_server, "s3cret").messages.count_tokens(**body).input_tokens > 0
