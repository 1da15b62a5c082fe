"""The HTTP layer with a scripted service: shapes, auth, errors, queueing, SSE."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ffwd.serve.app import create_app
from ffwd.serve.dialects.chat import parse_chat
from ffwd.serve.errors import bad_request
from ffwd.serve.protocol import ChatCompletionRequest
from ffwd.serve.request import GenerationRequest
from ffwd.templates.formats.base import ToolCall
from tests.unit.scripted import STEP, ScriptedModel, call, result, text

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}


class Scripted(ScriptedModel):
    """Plays a fixed script; `gate` (if set) holds runs until released."""

    def __init__(self, gate: threading.Event | None = None, fail: bool = False) -> None:
        self.gate = gate
        self.fail = fail
        self.started = threading.Semaphore(0)
        self.cancel_seen = threading.Event()

    def prepare(self, req: GenerationRequest) -> Any:
        if req.messages and req.messages[0]["content"] == "too long":
            raise bad_request("prompt is 5000 tokens, the context window is 2048", "messages")
        return req

    def run(self, prepared: Any, cancelled: Callable[[], bool]) -> Iterator[Any]:
        self.started.release()
        if self.gate is not None:
            while not self.gate.is_set():
                if cancelled():
                    self.cancel_seen.set()
                    yield result(finish="cancelled", completion=0)
                    return
                yield STEP
        if self.fail:
            raise RuntimeError("boom")
        if prepared.tools:
            yield call(0, "get_weather")
            yield call(0, arguments='{"city": ')
            yield call(0, arguments='"Paris"}')
            done = ToolCall("get_weather", '{"city": "Paris"}')
            yield result(calls=(done,), finish="tool_calls", completion=7)
            return
        yield text("Hello")
        yield STEP
        yield text(" world")
        yield STEP
        yield result("Hello world", cached=4, forward_calls=2)


@pytest.fixture
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Scripted())) as c:
        yield c


def sse(text: str) -> list[Any]:
    out: list[Any] = []
    for block in text.strip().split("\n\n"):
        assert block.startswith("data: ")
        data = block[len("data: "):]
        out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_chat_completion_shape(client: TestClient) -> None:
    r = client.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "chat.completion" and body["model"] == "tiny"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "Hello world"}
    assert body["choices"][0]["finish_reason"] == "stop"
    assert body["usage"] == {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12,
                             "prompt_tokens_details": {"cached_tokens": 4},
                             "completion_tokens_details": {"reasoning_tokens": 0}}
    assert body["ffwd"]["forward_calls"] == 2 and body["ffwd"]["fill"] == "off"


def test_chat_stream_chunks(client: TestClient) -> None:
    body = {**CHAT, "stream": True, "stream_options": {"include_usage": True}}
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    chunks = sse(r.text)
    assert chunks[-1] == "[DONE]"
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[1:-3])
    assert text == "Hello world"
    assert chunks[-3]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-2]["choices"] == [] and chunks[-2]["usage"]["total_tokens"] == 12


def test_streamed_tool_call_deltas(client: TestClient) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    r = client.post("/v1/chat/completions",
                    json={**CHAT, "stream": True, "tools": tools, "tool_choice": "required"})
    chunks = sse(r.text)
    deltas = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks
              if c != "[DONE]" and c["choices"] and "tool_calls" in c["choices"][0]["delta"]]
    assert deltas[0]["id"].startswith("call_")
    assert deltas[0] == {"index": 0, "id": deltas[0]["id"], "type": "function",
                         "function": {"name": "get_weather", "arguments": ""}}
    assert "".join(d["function"]["arguments"] for d in deltas) == '{"city": "Paris"}'
    assert all("id" not in d and "name" not in d["function"] for d in deltas[1:])
    assert chunks[-2]["choices"][0]["finish_reason"] == "tool_calls"


def test_completions_endpoint(client: TestClient) -> None:
    r = client.post("/v1/completions", json={"model": "tiny", "prompt": "Say"})
    assert r.status_code == 200
    assert r.json()["choices"][0]["text"] == "Hello world"
    assert r.json()["object"] == "text_completion"


def test_models_health_metrics(client: TestClient) -> None:
    assert client.get("/v1/models").json()["data"][0]["id"] == "tiny"
    assert client.get("/health").json()["status"] == "ok"
    client.post("/v1/chat/completions", json=CHAT)
    text = client.get("/metrics").text
    assert 'ffwd_requests_total{endpoint="/v1/chat/completions",status="200"} 1.0' in text
    assert "ffwd_request_latency_seconds_count 1.0" in text
    assert "ffwd_completion_tokens_total 2.0" in text and "ffwd_forward_calls_total 2.0" in text


@pytest.mark.parametrize(
    ("body", "status", "param", "needle"),
    [
        ({**CHAT, "n": 3}, 400, "n", "n=3"),
        ({**CHAT, "temperature": "hot"}, 400, "temperature", "expected a number, got string"),
        ({"model": "tiny", "messages": []}, 400, "messages", "at least 1"),
        ({**CHAT, "model": "gpt-9"}, 404, "model", "'gpt-9' does not exist"),
        ({**CHAT, "tool_choice": "required"}, 400, "tool_choice", "requires tools"),
        ({**CHAT, "tools": [{"type": "function", "function": {"name": "a"}}],
          "tool_choice": {"type": "function", "function": {"name": "b"}}},
         400, "tool_choice", "'b', which is not in tools (tools: a)"),
        ({**CHAT, "messages": [{"role": "user", "content": "too long"}]}, 400, "messages",
         "context window"),
        ({**CHAT, "stop": ["a", "b", "c", "d", "e"]}, 400, "stop", "at most 4"),
        ({**CHAT, "logit_bias": {"x": 1}}, 400, "logit_bias", "not a token id"),
        ({**CHAT, "seed": 2**64}, 400, "seed", "less than"),
    ],
)
def test_client_errors(client: TestClient, body: dict[str, Any], status: int, param: str,
                       needle: str) -> None:
    r = client.post("/v1/chat/completions", json=body)
    assert r.status_code == status
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["param"] == param and needle in err["message"]
    assert client.post("/v1/chat/completions", json=CHAT).status_code == 200


def test_malformed_json_and_wrong_body(client: TestClient) -> None:
    r = client.post("/v1/chat/completions", content=b"{not json",
                    headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
    r = client.post("/v1/chat/completions", json=[1, 2])
    assert r.status_code == 400 and "JSON object" in r.json()["error"]["message"]
    r = client.get("/v1/nope")
    assert r.status_code == 404 and "error" in r.json()


def test_auth() -> None:
    with TestClient(create_app(Scripted(), api_key="s3cret")) as c:
        assert c.get("/health").status_code == 200
        r = c.get("/v1/models")
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        r = c.get("/v1/models", headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401
        r = c.get("/v1/models", headers={"Authorization": "Bearer s3cret"})
        assert r.status_code == 200
        assert c.get("/metrics").status_code == 401


def test_head_is_the_get_without_its_body() -> None:
    # Agents probe the server with HEAD / (Claude Code on every start): the page's 200, as
    # every GET route answers HEAD; without a key only where the GET needs none.
    with TestClient(create_app(Scripted(), api_key="s3cret")) as c:
        key = {"Authorization": "Bearer s3cret"}
        for path, headers in (("/", {}), ("/playground", {}), ("/health", {}),
                              ("/v1/models", key), ("/v1/models/default", key),
                              ("/metrics", key), ("/openapi.json", key)):
            got, head = c.get(path, headers=headers), c.head(path, headers=headers)
            assert head.status_code == got.status_code == 200, (path, head.text)
            assert head.content == b"" and got.content
            assert head.headers["content-type"] == got.headers["content-type"], path
            if path != "/metrics":  # its counts move between the two requests
                assert head.headers["content-length"] == got.headers["content-length"], path
        assert c.head("/v1/models").status_code == 401
        assert c.head("/v1/chat/completions", headers=key).status_code == 405  # POST only
        assert c.head("/v1/nope", headers=key).status_code == 404
        lines = c.get("/metrics", headers=key).text
        assert 'ffwd_requests_total{endpoint="/",status="200"} 2.0' in lines


def test_queue_full_is_429_and_server_recovers() -> None:
    gate = threading.Event()
    svc = Scripted(gate)
    app = create_app(svc, max_queue=1)
    results: list[int] = []
    with TestClient(app) as c:
        def call() -> None:
            results.append(c.post("/v1/chat/completions", json=CHAT).status_code)

        first = threading.Thread(target=call)
        first.start()
        assert svc.started.acquire(timeout=5)  # the first is running
        second = threading.Thread(target=call)
        second.start()
        for _ in range(200):  # wait until the second is queued
            if app.state.executor.depth == 1:
                break
            threading.Event().wait(0.01)
        r = c.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 429 and "busy" in r.json()["error"]["message"]
        gate.set()
        first.join(5)
        second.join(5)
        assert results == [200, 200]
        assert c.post("/v1/chat/completions", json=CHAT).status_code == 200


def test_failed_run_is_500_resets_and_next_request_works() -> None:
    svc = Scripted(fail=True)
    with TestClient(create_app(svc)) as c:
        r = c.post("/v1/chat/completions", json=CHAT)
        assert r.status_code == 500 and r.json()["error"]["type"] == "server_error"
        assert svc.resets == 1
        svc.fail = False
        assert c.post("/v1/chat/completions", json=CHAT).status_code == 200


def test_developer_role_is_rendered_as_system() -> None:
    req = ChatCompletionRequest.model_validate(
        {"messages": [{"role": "developer", "content": [{"type": "text", "text": "Be brief."}]}]})
    assert req.messages[0].as_template_message() == {"role": "system", "content": "Be brief."}


@pytest.mark.parametrize(("choice", "parallel", "expected"), [
    ({"type": "function", "function": {"name": "get_weather"}}, True, False),
    ("required", True, True), ("auto", True, True), ("required", False, False),
])
def test_a_named_tool_choice_is_one_call(choice: Any, parallel: bool, expected: bool) -> None:
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    req = parse_chat({**CHAT, "tools": tools, "tool_choice": choice,
                      "parallel_tool_calls": parallel})
    assert req.parallel_tool_calls is expected
