"""What Claude Code, Codex and opencode really send, replayed against the embedded model
(issue 41). `tests/fixtures/agents/` holds each CLI's first requests, recorded from the
npm releases run as docs/agents.md sets them up (`tools/agent_record.py`: headers and
bodies as sent, with no ids, paths or credentials). Each request gets what its CLI can
read: a probe its 200; a generation a well-formed answer in its dialect, streamed as the
CLI streams, parsed by that dialect's SDK (anthropic, openai) and capped where the CLI
asks for more output than the server gives; or, for a prompt over the context window,
the clear 400 that says so. Never a 5xx, never a 405. The server caps every output at
``LIMIT`` ids (``--max-tokens-limit``), so the replay costs prefills, not long answers."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import anthropic
import httpx
import openai
import pytest
from anthropic.lib.streaming import MessageStream
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent

from tests.integration.live_server import Server

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agents"
AGENTS = sorted(p.stem for p in FIXTURES.glob("*.json"))
LIMIT = 8  # output ids per request (the server's --max-tokens-limit here)
CONTEXT = 8192  # the embedded model's
# How many of each recording's requests do not fit the embedded model's context: Claude
# Code's whole tool list (about 20,000 ids), and its third turn with --tools Read.
OVER_CONTEXT = {"claude_code": 1, "claude_code_title": 1, "claude_code_read": 1}


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    s = Server("--max-tokens-limit", str(LIMIT), "--default-max-tokens", str(LIMIT))
    yield s
    s.stop()


def recorded(agent: str) -> list[dict[str, Any]]:
    requests: list[dict[str, Any]] = json.loads((FIXTURES / f"{agent}.json").read_text())[
        "requests"]
    return requests


def test_every_cli_is_recorded_without_secrets_or_ids() -> None:
    assert {"claude_code", "claude_code_read", "codex", "opencode", "continue"} <= set(AGENTS)
    for agent in AGENTS:
        text = (FIXTURES / f"{agent}.json").read_text()
        assert "/home/user/project" in text, agent  # the working directory, scrubbed
        ids = re.findall(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", text)
        assert all(i.startswith("00000000-0000-4000-8000-") for i in ids), agent
        for r in recorded(agent):
            assert not {"authorization", "x-api-key", "cookie"} & set(r["headers"]), agent


@pytest.mark.parametrize("agent", AGENTS)
def test_a_recorded_cli_gets_answers_it_can_read(agent: str, server: Server) -> None:
    prompts = []
    for i, r in enumerate(recorded(agent)):
        got = replay(server, r)
        prompts.append(got.get("prompt"))
        print(f"\n{agent} request {i + 1}: {r['method']} {r['path']} -> {got}")
    posts = [p for r, p in zip(recorded(agent), prompts, strict=True) if r["method"] == "POST"]
    assert posts.count(None) == OVER_CONTEXT.get(agent, 0), prompts
    if agent == "claude_code_read":  # turn 2 resends turn 1: read from the prompt cache
        first, second = prompts[1], prompts[2]
        assert second["cached"] >= first["tokens"] - 8, prompts


def replay(server: Server, r: dict[str, Any]) -> dict[str, Any]:
    """Send one recorded request as its CLI did; what the answer was, checked."""
    if r["method"] != "POST":
        reply = httpx.request(r["method"], server.url + r["path"], headers=r["headers"])
        assert reply.status_code == 200, (r["method"], r["path"], reply.status_code)
        return {"status": 200}
    body, path = r["body"], r["path"]
    options: Any = {"headers": r["headers"], "params": dict(parse_qsl(r["query"]))}
    try:
        if path == "/v1/messages":
            return messages(server, body, options)
        if path == "/v1/responses":
            return responses(server, body, options)
        assert path == "/v1/chat/completions", path
        return chat(server, body, options)
    except (anthropic.APIStatusError, openai.APIStatusError) as exc:
        return refused(exc, body)


def refused(exc: anthropic.APIStatusError | openai.APIStatusError, body: Any) -> dict[str, Any]:
    """An error reply: only the prompt over the context, a 400 in the API's own shape."""
    err = exc.body["error"] if isinstance(exc.body, dict) and "error" in exc.body else exc.body
    assert exc.status_code == 400, (exc.status_code, err)
    assert isinstance(err, dict) and err["code"] == "context_length_exceeded", err
    said = re.match(r"the prompt is (\d+) tokens, and the model's context window is (\d+) "
                    "tokens", err["message"])
    assert said and int(said[1]) >= int(said[2]) == CONTEXT, err
    return {"status": 400, "message": err["message"]}


def messages(server: Server, body: Any, options: Any) -> dict[str, Any]:
    client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0,
                                 timeout=900)
    raw = client.post("/v1/messages", body=body, cast_to=anthropic.types.Message,
                      stream=True, options=options,
                      stream_cls=anthropic.Stream[anthropic.types.RawMessageStreamEvent])
    stream = MessageStream(raw, anthropic.NOT_GIVEN)
    deltas = [e for e in stream if e.type == "message_delta"]  # the SDK assembles the rest
    message = stream.get_final_message()
    assert message.role == "assistant" and message.content, message
    assert message.stop_reason in ("end_turn", "max_tokens", "tool_use"), message.stop_reason
    usage = message.usage
    assert 0 < usage.output_tokens <= LIMIT and len(deltas) == 1
    capped(deltas[0].usage.model_extra, body["max_tokens"])
    return {"status": 200, "stop": message.stop_reason, "prompt": {
        "tokens": usage.input_tokens + (usage.cache_read_input_tokens or 0),
        "cached": usage.cache_read_input_tokens or 0}}


def responses(server: Server, body: Any, options: Any) -> dict[str, Any]:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                           timeout=900)
    events = list(client.post("/responses", body=body, cast_to=Response, stream=True,
                              options=options, stream_cls=openai.Stream[ResponseStreamEvent]))
    assert events[0].type == "response.created", events[0]
    last = events[-1]
    assert last.type in ("response.completed", "response.incomplete"), last.type
    response = last.response
    assert response.output and response.usage is not None
    assert 0 < response.usage.output_tokens <= LIMIT
    capped(response.usage.model_extra, body.get("max_output_tokens"))
    return {"status": 200, "stop": response.status, "prompt": {
        "tokens": response.usage.input_tokens,
        "cached": response.usage.input_tokens_details.cached_tokens}}


def chat(server: Server, body: Any, options: Any) -> dict[str, Any]:
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0,
                           timeout=900)
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    usage = None
    for chunk in client.post("/chat/completions", body=body, cast_to=ChatCompletion,
                             stream=True, options=options,
                             stream_cls=openai.Stream[ChatCompletionChunk]):
        state.handle_chunk(chunk)
        usage = chunk.usage or usage
    choice = state.current_completion_snapshot.choices[0]  # as assembled, a length finish too
    assert choice.finish_reason in ("stop", "length", "tool_calls"), choice
    assert choice.message.content or choice.message.tool_calls, choice
    assert usage is not None and 0 < usage.completion_tokens <= LIMIT  # include_usage
    capped(usage.model_extra, body.get("max_tokens"))
    return {"status": 200, "stop": choice.finish_reason, "prompt": {
        "tokens": usage.prompt_tokens, "cached": usage.prompt_tokens_details.cached_tokens
        if usage.prompt_tokens_details else 0}}


def capped(extra: dict[str, Any] | None, asked: int | None) -> None:
    """Asked for more than the server's limit: the usage says it was capped to it."""
    note = (extra or {}).get("ffwd")
    if asked is None or asked <= LIMIT:
        assert note is None, note
        return
    assert note == {"max_tokens_asked": asked, "max_tokens": LIMIT,
                    "capped_by": "max_tokens_limit"}, note
