"""The request path through the real `ModelService` (tiny model, real tokenizer and
template): per-request settings never reach a server resource, logprobs cover injected
tokens, a cancelled run stops within a step, and `ffwd generate` renders as the server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ffwd.config import FillConfig, TokenLimits
from ffwd.engine.core.generate import drive
from ffwd.engine.events import TokenEvent
from ffwd.fill import read_trace
from ffwd.serve.app import create_app
from ffwd.serve.dialects.chat import parse_chat
from ffwd.serve.service import ModelService
from ffwd.templates.choose import encode_prompt
from tests.engine.tiny_service import tiny_service, tokenizer

URL = "/v1/chat/completions"
ASK = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}]}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(tiny_service())) as c:
        yield c


def test_a_request_cannot_write_a_server_file(client: TestClient, tmp_path: Path) -> None:
    target = tmp_path / "made" / "by" / "client.jsonl"
    for trace in (str(target), True):
        for stream in (False, True):
            r = client.post(URL, json={**ASK, "stream": stream, "ffwd": {"trace": trace}})
            assert r.status_code == 400 and r.json()["error"]["param"] == "ffwd.trace", r.text
    assert not (tmp_path / "made").exists()


def test_tracing_is_the_operator_s_and_a_request_may_switch_it(tmp_path: Path) -> None:
    path = tmp_path / "server.jsonl"
    svc = tiny_service(FillConfig(mode="strict", trace=str(path)))
    body = {**ASK, "tools": [WEATHER], "tool_choice": "required", "max_tokens": 4}
    with TestClient(create_app(svc)) as c:
        assert c.post(URL, json={**body, "ffwd": {"trace": False}}).status_code == 200
        assert not path.exists()
        assert c.post(URL, json={**body, "ffwd": {"trace": True}}).status_code == 200
        assert c.post(URL, json=body).status_code == 200
    assert len(read_trace(path)) >= 2  # the forced opening of each traced request


@pytest.mark.parametrize(
    ("extra", "param"),
    [({"ffwd": {"k": 1_000_000_000_000}}, "ffwd.k"),
     ({"ffwd": {"index_max": 10**30}}, "ffwd.index_max"),
     ({"logit_bias": {"49152": 5}}, "logit_bias"),
     ({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function"}]},
      "tools")],
)
def test_bad_overrides_are_400_before_any_stream(
    client: TestClient, extra: dict[str, Any], param: str
) -> None:
    r = client.post(URL, json={**ASK, **extra, "stream": True})
    assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text


def test_logprobs_cover_injected_tokens(client: TestClient) -> None:
    body = {**ASK, "tools": [WEATHER], "tool_choice": "required", "logprobs": True,
            "top_logprobs": 2, "temperature": 0}
    r = client.post(URL, json=body).json()
    content = r["choices"][0]["logprobs"]["content"]
    assert len(content) == r["usage"]["completion_tokens"] == 4
    assert r["ffwd"]["injected_by_origin"]  # the forced opening was injected
    opening = b"".join(bytes(t["bytes"]) for t in content).decode()
    assert "<tool_call>".startswith(opening) or opening.startswith("<tool_call>"), opening
    assert all(t["logprob"] <= 0 and len(t["top_logprobs"]) == 2 for t in content)
    text = client.post("/v1/completions", json={"prompt": "Once upon", "logprobs": 0}).json()
    assert len(text["choices"][0]["logprobs"]["tokens"]) == text["usage"]["completion_tokens"]


def test_a_cancelled_run_stops_within_one_step() -> None:
    svc = tiny_service(FillConfig(mode="off"), capped=False)
    prep = svc.prepare(parse_chat({**ASK, "max_tokens": 200}))
    backend = svc.backend
    start = backend.forward_calls
    cancel_at = start + 6  # the client leaves during the sixth forward of this request
    steps = svc.steps(prep, backend, lambda: backend.forward_calls >= cancel_at)
    events: list[TokenEvent] = list(drive(backend, steps))
    fin = events[-1].result
    assert fin is not None and fin.finish_reason == "cancelled"
    # The id from the forward that saw the cancel is the last: no forward after it.
    assert backend.forward_calls == cancel_at
    assert fin.completion_tokens == 6


def test_generate_renders_the_prompt_as_the_server_does() -> None:
    svc: ModelService = tiny_service()
    req = parse_chat({"messages": [{"role": "user", "content": "Name a color."}]})
    served = svc.prepare(req).prompt_ids
    assert encode_prompt(tokenizer(), "Name a color.") == served


def test_every_request_has_a_bounded_output() -> None:
    # No max_tokens (legal in both APIs) gets the server's default, not the whole context;
    # more than the server's limit is capped (tests/engine/test_max_tokens_cap.py).
    svc = tiny_service(FillConfig(mode="off"), capped=False, limits=TokenLimits(5, 50))
    with TestClient(create_app(svc)) as c:
        r = c.post(URL, json={**ASK, "logit_bias": {str(tokenizer().eos_token_id): -100}})
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 5
        assert r.json()["choices"][0]["finish_reason"] == "length"
        assert "ffwd" not in r.json()["usage"]  # the default is no cap


# --- a named tool choice --------------------------------------------------------------
ONE_CITY = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo", "Rome"]}},
            "required": ["city"], "additionalProperties": False}
PING = {"type": "function", "function": {"name": "ping", "parameters": ONE_CITY}}
NAMED = {  # per dialect: the URL and a greedy request that names the tool "ping"
    "chat": ("/v1/chat/completions", {
        **ASK, "tools": [PING], "max_tokens": 120, "temperature": 0,
        "tool_choice": {"type": "function", "function": {"name": "ping"}},
        "stream_options": {"include_usage": True}}),
    "responses": ("/v1/responses", {
        "input": ASK["messages"][0]["content"], "max_output_tokens": 120, "temperature": 0,
        "tools": [{"type": "function", "name": "ping", "parameters": ONE_CITY}],
        "tool_choice": {"type": "function", "name": "ping"}}),
    "messages": ("/v1/messages", {
        "model": "tiny", **ASK, "max_tokens": 120, "temperature": 0,
        "tools": [{"name": "ping", "input_schema": ONE_CITY}],
        "tool_choice": {"type": "tool", "name": "ping", "disable_parallel_tool_use": True}}),
}


def calls_and_tokens(dialect: str, r: Any, stream: bool) -> tuple[list[str], int]:
    """The calls' arguments a reply carries and its completion tokens."""
    if not stream:
        body = r.json()
        if dialect == "chat":
            calls = body["choices"][0]["message"]["tool_calls"]
            return [c["function"]["arguments"] for c in calls], body["usage"]["completion_tokens"]
        if dialect == "responses":
            return ([o["arguments"] for o in body["output"] if o["type"] == "function_call"],
                    body["usage"]["output_tokens"])
        return ([json.dumps(b["input"]) for b in body["content"] if b["type"] == "tool_use"],
                body["usage"]["output_tokens"])
    if dialect == "chat":
        chunks = [json.loads(b[6:]) for b in r.text.strip().split("\n\n") if b != "data: [DONE]"]
        args: dict[int, str] = {}
        for ch in chunks:
            for d in (ch["choices"][0]["delta"].get("tool_calls") or []) if ch["choices"] else []:
                args[d["index"]] = args.get(d["index"], "") + d["function"]["arguments"]
        return list(args.values()), chunks[-1]["usage"]["completion_tokens"]
    events = [json.loads(b.split("\ndata: ", 1)[1]) for b in r.text.strip().split("\n\n")]
    if dialect == "responses":
        done = events[-1]["response"]
        return ([o["arguments"] for o in done["output"] if o["type"] == "function_call"],
                done["usage"]["output_tokens"])
    starts = [e for e in events if e["type"] == "content_block_start"
              and e["content_block"]["type"] == "tool_use"]
    return ["" for _ in starts], events[-2]["usage"]["output_tokens"]


@pytest.mark.parametrize("dialect", sorted(NAMED))
def test_a_named_tool_choice_is_one_call_streamed_and_whole(dialect: str) -> None:
    # Greedy, this model writes a second call after the first when more may follow (the
    # same call again: dropped as a repeat). A named choice ends the reply at the first.
    url, body = NAMED[dialect]
    with TestClient(create_app(tiny_service(capped=False))) as c:
        whole = c.post(url, json=body)
        streamed = c.post(url, json={**body, "stream": True})
    assert whole.json()["ffwd"]["dropped_calls"] == 0  # no second call was written
    calls, tokens = calls_and_tokens(dialect, whole, stream=False)
    assert len(calls) == 1 and json.loads(calls[0])["city"] in ("Paris", "Oslo", "Rome")
    s_calls, s_tokens = calls_and_tokens(dialect, streamed, stream=True)
    assert len(s_calls) == 1 and s_tokens == tokens
