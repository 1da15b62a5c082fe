"""The embedded weights served with other families' chat templates (written into the
GGUF's ``tokenizer.chat_template``, as a converted model carries it): the format is
recognised from the template, and under `tool_choice` required and named every reply is
a valid call of an allowed tool, streamed equal to whole (``--deterministic``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import openai
import pytest

from tests.integration.live_server import Server
from tests.model_places import embedded_gguf, write_with_template
from tests.unit._collection import need_models

pytestmark = pytest.mark.slow

# format: a template of llama.cpp's collection that writes it.
FAMILIES = {"harmony": "openai-gpt-oss-120b", "glm": "GLM-4.6",
            "mistral_v11": "unsloth-mistral-Devstral-Small-2507",
            "gemma4": "google-gemma-4-31B-it"}
TOOLS: list[Any] = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 20}, "days": {"type": "integer"}},
            "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "The time in a timezone.",
        "parameters": {"type": "object", "properties": {"zone": {"type": "string",
                                                                  "maxLength": 20}},
                       "required": ["zone"], "additionalProperties": False}}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
CHOICES: list[Any] = ["required", {"type": "function", "function": {"name": "get_time"}}]


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[str, Server]]:
    fmt = request.param
    template = (need_models() / "templates" / f"{FAMILIES[fmt]}.jinja").read_text()
    path = write_with_template(embedded_gguf(), tmp_path_factory.mktemp(fmt) / "smol.gguf",
                               template)
    server = Server("--model", str(path), "--deterministic")
    yield fmt, server
    server.stop()


def ask(server: Server, choice: Any, stream: bool) -> tuple[list[tuple[str, str]], str]:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)
    body: dict[str, Any] = {
        "model": "default", "messages": [{"role": "user", "content": "Weather in Oslo?"}],
        "tools": TOOLS, "tool_choice": choice, "max_tokens": 300, "temperature": 0}
    if not stream:
        reply = client.chat.completions.create(**body)
        calls = reply.choices[0].message.tool_calls or []
        return ([(c.function.name, c.function.arguments) for c in calls],
                reply.choices[0].finish_reason)
    parts: dict[int, list[str]] = {}
    names: dict[int, str] = {}
    finish = ""
    for chunk in client.chat.completions.create(**body, stream=True):
        for d in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            if d.function and d.function.name:
                names[d.index] = d.function.name
            parts.setdefault(d.index, []).append((d.function and d.function.arguments) or "")
        if chunk.choices and chunk.choices[0].finish_reason:
            finish = chunk.choices[0].finish_reason
    return [(names[i], "".join(parts[i])) for i in sorted(parts)], finish


def test_the_format_is_recognised_from_the_template(family: tuple[str, Server]) -> None:
    fmt, server = family
    log = server.log.read_text(errors="replace")
    assert f"tool calls: {fmt} (rendered from the chat template)" in log, log[-2000:]


@pytest.mark.parametrize("choice", CHOICES, ids=["required", "named"])
def test_forced_calls_are_valid_and_streamed_equal_to_whole(
        family: tuple[str, Server], choice: Any) -> None:
    _, server = family
    calls, finish = ask(server, choice, stream=False)
    assert finish == "tool_calls" and calls, calls
    for name, arguments in calls:
        assert name in SCHEMAS if choice == "required" else name == "get_time"
        jsonschema.validate(json.loads(arguments), SCHEMAS[name])
    assert ask(server, choice, stream=True) == (calls, finish)
