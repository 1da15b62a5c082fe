"""Hostile and careless clients against the HTTP layer (scripted service): every bad input
is a 4xx in the OpenAI shape that names the parameter, nothing is a 5xx, metrics stay
bounded, and a client that leaves a non-streaming request cancels it."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ffwd.engine.events import Alternative
from ffwd.serve.app import create_app
from ffwd.serve.request import GenerationRequest
from tests.unit.scripted import STEP, held, result, text
from tests.unit.test_serve_app import CHAT, Scripted, sse

URL = "/v1/chat/completions"
USER = {"role": "user", "content": "hi"}
CALLED = {"role": "assistant", "tool_calls": [  # a call, as the assistant made it
    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]}


@pytest.fixture
def client() -> Any:
    with TestClient(create_app(Scripted(), max_body_bytes=64 * 1024)) as c:
        yield c


def error_of(r: Any, status: int = 400) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["code"], err
    return dict(err)


def post_raw(client: TestClient, raw: bytes | str) -> Any:
    data = raw.encode() if isinstance(raw, str) else raw
    return client.post(URL, content=data, headers={"content-type": "application/json"})


@pytest.mark.parametrize(
    ("raw", "param", "needle"),
    [
        ('{"messages": [{"role": "user", "content": "\\ud800 hi"}]}', "messages[0].content",
         "lone UTF-16 surrogate, U+D800"),
        ('{"messages": [{"role": "user", "content": "hi"}], "temperature": NaN}', None,
         "NaN is not a JSON number"),
        ('{"messages": [{"role": "user", "content": "hi"}], "top_p": 1e999}', "top_p",
         "too large"),
        ('{"messages": [{"role": "user", "content": "hi"}], "seed": ' + "9" * 5000 + "}", None,
         "not valid JSON"),
        ('{"messages": [{"role": "user", "content": "hi"}], "x": ' + "[" * 10000 + "]" * 10000
         + "}", None, "more than 64 deep"),
        ('{"messages": [{"role": "user", "content": "hi"}], "tools": ' + "[" * 80 + "]" * 80
         + "}", "tools[0][0][0]", "more than 64 deep"),
    ],
)
def test_malformed_json_is_400_naming_where(
    client: TestClient, raw: str, param: str | None, needle: str
) -> None:
    err = error_of(post_raw(client, raw))
    assert err["param"] == param or (param and err["param"].startswith(param)), err
    assert needle in err["message"] and err["code"] in ("invalid_json", "invalid_unicode")
    assert client.post(URL, json=CHAT).status_code == 200


def test_body_size_limit_is_413(client: TestClient) -> None:
    big = {**CHAT, "user": "x" * 70_000}
    err = error_of(client.post(URL, json=big), 413)
    assert err["code"] == "request_too_large" and "65536 bytes" in err["message"]


@pytest.mark.parametrize(
    ("extra", "param", "needle", "code"),
    [
        ({"max_tokens": True}, "max_tokens", "expected an integer, got boolean", "invalid_type"),
        ({"max_tokens": "10"}, "max_tokens", "expected an integer, got string", "invalid_type"),
        ({"stream": "yes"}, "stream", "expected a boolean", "invalid_type"),
        ({"parallel_tool_calls": "no"}, "parallel_tool_calls", "expected a boolean",
         "invalid_type"),
        ({"temperature": 3}, "temperature", "less than or equal to 2", "invalid_value"),
        ({"repetition_penalty": 1e308}, "repetition_penalty", "less than or equal to 10",
         "invalid_value"),
        ({"logit_bias": {"9" * 5000: 1}}, "logit_bias", "not a token id", "invalid_value"),
        ({"stop": 5}, "stop", "a string or an array", "invalid_value"),
        ({"stop": ["x" * 1001]}, "stop", "1 to 1000 characters", "invalid_value"),
        ({"tool_choice": "sometimes"}, "tool_choice", "'none', 'auto', 'required'",
         "invalid_value"),
        ({"tool_choice": {"type": "function", "function": {}}}, "tool_choice.function.name",
         "is required", "missing_required_parameter"),
        ({"messages": [{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]},
         "messages[0].content", "this model takes text only", "invalid_value"),
        ({"messages": [{"role": "user", "content": 7}]}, "messages[0].content",
         "a string or an array of text parts", "invalid_value"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages[0].role", "'user'",
         "invalid_value"),
        ({"ffwd": {"trace": "/tmp/ffwd-owned/new/file.jsonl"}}, "ffwd.trace",
         "cannot choose a trace file", "invalid_value"),
        ({"ffwd": {"k": "4"}}, "ffwd.k", "expected an integer", "invalid_type"),
        ({"ffwd": {"spam": 1}}, "ffwd.spam", "not a known parameter", "unknown_parameter"),
        ({"top_logprobs": 3}, "top_logprobs", "requires logprobs: true", "invalid_value"),
        ({"tools": [{"type": "function", "function": {"name": f"f{i}"}} for i in range(129)]},
         "tools", "at most 128 items", "invalid_value"),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs", "less than or equal to 20",
         "invalid_value"),
        # What OpenAI's document types strictly (issue 52): metadata is a map of strings,
        # a tool message names its call, a call's arguments are a JSON text.
        ({"metadata": "x"}, "metadata", "expected an object, got string", "invalid_type"),
        ({"metadata": {"k": 1}}, "metadata.k", "expected a string, got number", "invalid_type"),
        ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata", "at most 16 items",
         "invalid_value"),
        ({"messages": [USER, CALLED, {"role": "tool", "content": "42"}]},
         "messages[2].tool_call_id", "is required", "missing_required_parameter"),
        ({"messages": [USER, {**CALLED, "tool_calls": [{**CALLED["tool_calls"][0], "function": {
            "name": "f", "arguments": {"a": 1}}}]}]},
         "messages[1].tool_calls[0].function.arguments", "expected a string, got object",
         "invalid_type"),
    ],
)
def test_bad_fields_are_400_with_the_api_name(
    client: TestClient, extra: dict[str, Any], param: str, needle: str, code: str
) -> None:
    err = error_of(client.post(URL, json={**CHAT, **extra}))
    assert (err["param"], err["code"]) == (param, code) and needle in err["message"], err


def test_what_the_strict_fields_take_is_answered(client: TestClient) -> None:
    answer = {"role": "tool", "tool_call_id": "call_1", "content": "42"}
    body = {**CHAT, "messages": [USER, CALLED, answer], "metadata": {"user": "u1"}}
    assert client.post(URL, json=body).status_code == 200
    assert client.post("/v1/completions", json={"prompt": "Say", "tools": None}).status_code == 200


@pytest.mark.parametrize(
    ("extra", "param", "needle"),
    [
        ({"suffix": "end"}, "suffix", "no fill-in-the-middle"),
        ({"best_of": 3}, "best_of", "best_of=3 is not supported"),
        ({"echo": True, "logprobs": 2}, "echo", "does not score prompt tokens"),
        ({"logprobs": True}, "logprobs", "expected an integer, got boolean"),
        # More than one prompt is refused for n > 1's reason, in its words.
        ({"prompt": ["a", "b"]}, "prompt", "2 prompts are not supported: ffwd returns exactly "
         "one choice per request"),
        ({"prompt": [[1, 2], [3]]}, "prompt", "2 prompts are not supported: ffwd returns "
         "exactly one choice per request"),
        ({"n": 2}, "n", "n=2 is not supported: ffwd returns exactly one choice per request"),
        ({"prompt": []}, "prompt", "the prompt is empty"),
        ({"prompt": [1, "a"]}, "prompt", "an array of token ids"),
        ({"prompt": [1, 2], "echo": True}, "echo", "echo with a token-id prompt"),
        # Tool calls are Chat Completions': refused, broken schemas or not (issue 52).
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools",
         "send tools to /v1/chat/completions"),
        ({"tools": [{"type": "function", "function": {"parameters": 7}}]}, "tools",
         "send tools to /v1/chat/completions"),
        ({"tool_choice": "auto"}, "tool_choice", "send tools to /v1/chat/completions"),
    ],
)
def test_completions_refuses_what_it_does_not_do(
    client: TestClient, extra: dict[str, Any], param: str, needle: str
) -> None:
    body = {"model": "tiny", "prompt": "Say", **extra}
    err = error_of(client.post("/v1/completions", json=body))
    assert err["param"] == param and needle in err["message"], err


def test_completions_echo_prepends_the_prompt(client: TestClient) -> None:
    body = {"model": "tiny", "prompt": "Say", "echo": True}
    assert client.post("/v1/completions", json=body).json()["choices"][0]["text"] == (
        "SayHello world")
    chunks = sse(client.post("/v1/completions", json={**body, "stream": True}).text)
    assert "".join(c["choices"][0]["text"] for c in chunks[:-1]) == "SayHello world"


def test_405_has_allow_and_unknown_paths_share_one_metrics_label(client: TestClient) -> None:
    r = client.get(URL)
    assert error_of(r, 405)["code"] == "method_not_allowed" and r.headers["allow"] == "POST"
    for i in range(5):
        error_of(client.get(f"/random/{i}"), 404)
    text = client.get("/metrics").text
    assert 'ffwd_requests_total{endpoint="other",status="404"} 5.0' in text
    assert "/random/" not in text
    assert f'ffwd_requests_total{{endpoint="{URL}",status="405"}} 1.0' in text


def test_bearer_scheme_is_case_insensitive_and_401s_are_bounded() -> None:
    with TestClient(create_app(Scripted(), api_key="s3cret")) as c:
        assert c.get("/v1/models", headers={"Authorization": "bearer s3cret"}).status_code == 200
        r = c.get("/nope/1", headers={"Authorization": "Basic s3cret"})
        assert error_of(r, 401)["code"] == "invalid_api_key"
        assert r.headers["www-authenticate"] == "Bearer"
        text = c.get("/metrics", headers={"Authorization": "Bearer s3cret"}).text
        assert 'ffwd_requests_total{endpoint="other",status="401"} 1.0' in text


class Crashing(Scripted):
    def prepare(self, req: GenerationRequest) -> Any:
        raise TypeError("a bug")


def test_an_unexpected_error_is_a_counted_500_in_the_error_shape() -> None:
    with TestClient(create_app(Crashing()), raise_server_exceptions=False) as c:
        err = error_of(c.post(URL, json=CHAT), 500)
        assert err["type"] == "server_error" and "TypeError" in err["message"]
        text = c.get("/metrics").text
        assert f'ffwd_requests_total{{endpoint="{URL}",status="500"}} 1.0' in text


def test_a_failed_stream_is_counted() -> None:
    svc = Scripted(fail=True)
    with TestClient(create_app(svc)) as c:
        chunks = sse(c.post(URL, json={**CHAT, "stream": True}).text)
        assert chunks[-2]["error"]["type"] == "server_error"
        assert f'ffwd_stream_errors_total{{endpoint="{URL}"}} 1.0' in c.get("/metrics").text


class WithLogprobs(Scripted):
    def run(self, prepared: Any, cancelled: Any) -> Iterator[Any]:
        alt = (Alternative(1, -1.5, "Hi", bytes([72, 105])),)
        yield text("Hello", -0.25, alt)
        yield STEP
        yield held(" w", -0.5, alt)  # its text comes out with the next token's
        yield text("orld", -0.125, alt, released=" world")
        yield STEP
        yield result("Hello world", prompt=3, completion=3)


def test_logprobs_shapes_for_chat_and_completions() -> None:
    with TestClient(create_app(WithLogprobs())) as c:
        body = c.post(URL, json={**CHAT, "logprobs": True, "top_logprobs": 1}).json()
        content = body["choices"][0]["logprobs"]["content"]
        assert [t["token"] for t in content] == ["Hello", " w", "orld"]
        assert content[0] == {"token": "Hello", "logprob": -0.25, "bytes": list(b"Hello"),
                              "top_logprobs": [{"token": "Hi", "logprob": -1.5,
                                                "bytes": [72, 105]}]}
        chunks = sse(c.post(URL, json={**CHAT, "logprobs": True, "stream": True}).text)
        per_chunk = [[t["token"] for t in ch["choices"][0]["logprobs"]["content"]]
                     for ch in chunks[1:-2]]
        assert per_chunk == [["Hello"], [" w", "orld"]]  # each delta with its tokens
        assert chunks[-2]["choices"][0]["logprobs"] is None  # the finish chunk: none left
        text = c.post("/v1/completions", json={"prompt": "x", "logprobs": 1}).json()
        lp = text["choices"][0]["logprobs"]
        assert lp["tokens"] == ["Hello", " w", "orld"] and lp["text_offset"] == [0, 5, 7]
        assert lp["token_logprobs"] == [-0.25, -0.5, -0.125]
        assert lp["top_logprobs"][1] == {" w": -0.5, "Hi": -1.5}
        assert c.post(URL, json=CHAT).json()["choices"][0]["logprobs"] is None


def test_a_disconnected_non_streaming_client_cancels_its_generation() -> None:
    gate = threading.Event()  # never set: the generation runs until cancelled
    svc = Scripted(gate)
    app = create_app(svc)
    sent: list[dict[str, Any]] = []

    async def call() -> None:
        body = json.dumps(CHAT).encode()
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop()
            while not svc.started.acquire(blocking=False):  # the worker has the job
                await asyncio.sleep(0.005)
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": URL, "raw_path": URL.encode(),
                 "query_string": b"", "headers": [(b"content-type", b"application/json")],
                 "http_version": "1.1", "scheme": "http", "server": ("t", 80),
                 "client": ("c", 1), "root_path": "", "app": app}
        await app(scope, receive, send)
        for _ in range(500):  # the run's end reaches this loop once the engine ends it
            if not app.state.executor.active:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)

    asyncio.run(call())
    assert svc.cancel_seen.wait(5), "the generation was not cancelled"
    assert sent[0]["status"] == 499
    with TestClient(app) as c:
        text = c.get("/metrics").text
    assert f'ffwd_cancelled_requests_total{{endpoint="{URL}",stream="false"}} 1.0' in text
    assert f'ffwd_requests_total{{endpoint="{URL}",status="499"}} 1.0' in text
    assert "ffwd_forwards_after_cancel_count 1.0" in text  # observed when the job ended
    # Its own sequence's forwards after the client left: the step in flight at most.
    after = float(text.split("ffwd_forwards_after_cancel_sum ")[1].split()[0])
    assert after <= 1.0


def test_openapi_declares_bodies_errors_and_text_metrics(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    for path, model in (("/v1/chat/completions", "ChatCompletionRequest"),
                        ("/v1/completions", "CompletionRequest")):
        op = doc["paths"][path]["post"]
        schema = op["requestBody"]["content"]["application/json"]["schema"]
        assert op["requestBody"]["required"] and schema["$ref"].endswith("/" + model)
        assert {"200", "400", "401", "404", "413", "429", "500"} <= set(op["responses"])
        assert "text/event-stream" in op["responses"]["200"]["content"]
        assert "422" not in op["responses"]
    assert {"messages", "logprobs", "top_logprobs", "ffwd"} <= set(
        doc["components"]["schemas"]["ChatCompletionRequest"]["properties"])
    metrics = doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert list(metrics) == ["text/plain"]
