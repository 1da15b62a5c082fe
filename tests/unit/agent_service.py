"""A scripted service for the agent dialects' HTTP tests: it records each request it was
given (as translated) and plays the script a test sets (a plain module, no model)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ffwd.engine.events import TokenEvent
from ffwd.serve.app import create_app
from ffwd.serve.errors import bad_request
from ffwd.serve.request import GenerationRequest
from ffwd.templates.formats.base import ContentDelta, ToolCall
from tests.unit.scripted import ScriptedModel, call, result, text

Script = list[TokenEvent]


def hello(cached: int = 0) -> Script:
    return [text("Hello"), text(" world"), result("Hello world", cached=cached)]


def weather_call(city: str = "Paris", finish: Any = "tool_calls") -> Script:
    args = json.dumps({"city": city})
    return [call(0, "get_weather"), call(0, arguments=args[:9]), call(0, arguments=args[9:]),
            result(calls=(ToolCall("get_weather", args),), finish=finish, completion=7)]


def text_then_call() -> Script:
    """Content, then a call, with a piece of content held back until the end."""
    args = '{"city": "Oslo"}'
    done = result("Let me look.", calls=(ToolCall("get_weather", args),), finish="tool_calls",
                  tail=(ContentDelta(" Done."),))
    return [text("Let me"), text(" look."), call(0, "get_weather"), call(0, arguments=args),
            done]


class AgentService(ScriptedModel):
    """Plays `script` (or `script_for(request)`); keeps every request in `seen`."""

    def __init__(self, script: Script | None = None) -> None:
        self.script: Script = script if script is not None else hello()
        self.script_for: Callable[[GenerationRequest], Script] | None = None
        self.seen: list[GenerationRequest] = []

    @property
    def last(self) -> GenerationRequest:
        return self.seen[-1]

    def prepare(self, req: GenerationRequest) -> GenerationRequest:
        self.seen.append(req)
        if req.max_tokens is not None and req.max_tokens > 4096:
            raise bad_request(f"{req.param('max_tokens')}={req.max_tokens} is too many",
                              param=req.param("max_tokens"))
        return req

    def run(self, prepared: GenerationRequest,
            cancelled: Callable[[], bool]) -> Iterator[TokenEvent]:
        script = self.script_for(prepared) if self.script_for else self.script
        yield from script

    def count_tokens(self, req: GenerationRequest) -> int:
        self.seen.append(req)
        return super().count_tokens(req)


def sse_events(body: str) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of each server-sent event of a stream with named events."""
    out = []
    for block in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        out.append((lines["event"], json.loads(lines["data"])))
    return out


@pytest.fixture(name="svc")
def svc_fixture() -> AgentService:
    return AgentService()


@pytest.fixture(name="client")
def client_fixture(svc: AgentService) -> Iterator[TestClient]:
    """The app over `svc` (imported by the dialects' test modules as a fixture)."""
    with TestClient(create_app(svc)) as c:
        yield c
