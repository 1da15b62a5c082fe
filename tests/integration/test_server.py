"""The OpenAI-compatible server on the embedded model, through the official client."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.integration.live_server import Server

pytestmark = pytest.mark.slow

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Get the local time in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]


def client(server: Server, key: str = "unused") -> OpenAI:
    return OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0, timeout=300)


def test_plain_chat_and_usage(server: Server) -> None:
    r = client(server).chat.completions.create(
        model="default", messages=[{"role": "user", "content": "Name a color."}],
        max_tokens=20, temperature=0,
    )
    choice = r.choices[0]
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    u = r.usage
    assert u is not None and u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert 0 < u.completion_tokens <= 20
    extra: dict[str, Any] = r.model_extra or {}
    assert extra["ffwd"]["stats"]["decode_steps"] + extra["ffwd"]["stats"]["injected"] >= (
        u.completion_tokens)


def test_streaming_chat_matches_the_plain_answer(exact_server: Server) -> None:
    server = exact_server  # --deterministic: the same ids however they are computed
    c = client(server)
    msgs = [{"role": "user", "content": "Count from one to five in words."}]
    whole = c.chat.completions.create(model="default", messages=msgs, max_tokens=30,
                                      temperature=0)
    chunks = list(c.chat.completions.create(
        model="default", messages=msgs, max_tokens=30, temperature=0, stream=True,
        stream_options={"include_usage": True},
    ))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == whole.choices[0].message.content
    finals = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
    assert finals[-1] == whole.choices[0].finish_reason
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens  # type: ignore[union-attr]


def test_tool_round_trip(server: Server) -> None:
    c = client(server)
    r = c.chat.completions.create(
        model="default", messages=ASK, tools=[WEATHER, TIME],  # type: ignore[list-item]
        tool_choice="required", max_tokens=120, temperature=0,
    )
    msg = r.choices[0].message
    # The model calls both tools here (61 ids): the budget leaves room for that.
    assert r.choices[0].finish_reason == "tool_calls"
    assert msg.tool_calls, msg
    call = msg.tool_calls[0]
    assert call.function.name in ("get_weather", "get_time")  # type: ignore[union-attr]
    args = json.loads(call.function.arguments)  # type: ignore[union-attr]
    assert isinstance(args, dict)
    stats = (r.model_extra or {})["ffwd"]["stats"]
    assert stats["strict"] > 0  # the markup came from the strict tier
    follow = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": '{"temp_c": 18, "sky": "clear"}'},
    ]
    r2 = c.chat.completions.create(model="default", messages=follow,  # type: ignore[arg-type]
                                   tools=[WEATHER, TIME], max_tokens=40,  # type: ignore[list-item]
                                   temperature=0, tool_choice="none")
    assert r2.choices[0].message.content and not r2.choices[0].message.tool_calls


def test_a_named_tool_choice_is_one_call_of_that_function(server: Server) -> None:
    # Issue 26: with room for more (400 ids), this model wrote the call three times.
    c = client(server)
    kw: dict[str, Any] = dict(
        model="default", messages=ASK, tools=[WEATHER, TIME], max_tokens=400, temperature=0,
        tool_choice={"type": "function", "function": {"name": "get_time"}},
    )
    deltas = [d for ch in c.chat.completions.create(stream=True, **kw) if ch.choices
              for d in ch.choices[0].delta.tool_calls or []]
    # The name is injected by the strict tier, so the first streamed delta names it.
    assert deltas[0].function is not None and deltas[0].function.name == "get_time"
    assert {d.index for d in deltas} == {0}
    r = c.chat.completions.create(**kw)
    calls = r.choices[0].message.tool_calls or []
    assert [call.function.name for call in calls] == ["get_time"]  # type: ignore[union-attr]
    assert isinstance(json.loads(calls[0].function.arguments), dict)  # type: ignore[union-attr]
    assert r.choices[0].finish_reason == "tool_calls"
    # Nothing follows the call: before, a second one was written (and dropped as a repeat).
    assert (r.model_extra or {})["ffwd"]["dropped_calls"] == 0
    # The Responses API's named choice means the same, plain and streamed.
    tools = [{"type": "function", **t["function"]} for t in (WEATHER, TIME)]
    rkw: dict[str, Any] = dict(
        model="default", input=ASK[0]["content"], tools=tools, max_output_tokens=400,
        temperature=0, tool_choice={"type": "function", "name": "get_time"},
    )
    whole = c.responses.create(**rkw)
    assert [o.name for o in whole.output if o.type == "function_call"] == ["get_time"]
    assert (whole.model_extra or {})["ffwd"]["dropped_calls"] == 0
    added = [e.item for e in c.responses.create(stream=True, **rkw)
             if e.type == "response.output_item.added"]
    assert [i.name for i in added if i.type == "function_call"] == ["get_time"]


def test_streamed_tool_calls_equal_the_whole_ones(exact_server: Server) -> None:
    server = exact_server  # --deterministic: the same ids however they are computed
    c = client(server)
    kw: dict[str, Any] = dict(model="default", messages=ASK, tools=[WEATHER, TIME],
                              tool_choice="required", max_tokens=100, temperature=0.7, seed=6)
    whole = c.chat.completions.create(**kw).choices[0].message.tool_calls or []
    calls: dict[int, dict[str, str]] = {}
    for ch in c.chat.completions.create(stream=True, **kw):
        for d in (ch.choices[0].delta.tool_calls or []) if ch.choices else []:
            entry = calls.setdefault(d.index, {"id": "", "name": "", "arguments": ""})
            if d.id:
                entry["id"] = d.id
            if d.function and d.function.name:
                entry["name"] += d.function.name
            if d.function and d.function.arguments:
                entry["arguments"] += d.function.arguments
    assert whole
    assert [(c["name"], c["arguments"]) for c in calls.values()] == [
        (w.function.name, w.function.arguments) for w in whole  # type: ignore[union-attr]
    ]
    assert all(c["id"].startswith("call_") for c in calls.values())


def test_second_turn_reuses_the_prompt_cache(server: Server) -> None:
    c = client(server)
    turn1 = [{"role": "system", "content": "You are terse."},
             {"role": "user", "content": "Say hello."}]
    r1 = c.chat.completions.create(model="default", messages=turn1, max_tokens=10, temperature=0)
    turn2 = [*turn1, {"role": "assistant", "content": r1.choices[0].message.content},
             {"role": "user", "content": "Now say goodbye."}]
    r2 = c.chat.completions.create(model="default", messages=turn2, max_tokens=10, temperature=0)
    details = r2.usage.prompt_tokens_details  # type: ignore[union-attr]
    assert details is not None and details.cached_tokens and details.cached_tokens > 0


def test_a_tool_turn_reuses_what_the_call_left_in_the_cache(server: Server) -> None:
    # Turn 2 resends turn 1 with the assistant's call and the tool's result: the prompt
    # cache holds turn 1's prompt and output, and only the call's last few ids (the
    # template re-renders the same text, which the tokenizer may split differently from
    # how the model wrote it) and the new part are prefilled again.
    c = client(server)
    kw: dict[str, Any] = dict(model="default", tools=[WEATHER, TIME], max_tokens=60,
                              temperature=0)
    r1 = c.chat.completions.create(messages=ASK, tool_choice="required",
                                   parallel_tool_calls=False, **kw)
    call = r1.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert r1.usage is not None and r1.choices[0].finish_reason == "tool_calls"
    turn2 = [*ASK, {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
             {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 22 C"}]
    r2 = c.chat.completions.create(messages=turn2, **kw)
    cached = r2.usage.prompt_tokens_details.cached_tokens  # type: ignore[union-attr]
    sent = r1.usage.prompt_tokens + r1.usage.completion_tokens
    assert cached is not None and sent - 8 <= cached <= sent, (cached, sent)


def test_completions_endpoint(server: Server) -> None:
    r = client(server).completions.create(model="default", prompt="The capital of France is",
                                          max_tokens=8, temperature=0)
    assert r.choices[0].text and r.usage and r.usage.completion_tokens <= 8


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"messages": []}, 400, "messages"),
        ({"messages": ASK, "n": 2}, 400, "n"),
        ({"messages": ASK, "max_tokens": "many"}, 400, "max_tokens"),
        ({"messages": ASK, "tools": [WEATHER],
          "tool_choice": {"type": "function", "function": {"name": "nope"}}}, 400, "tool_choice"),
        ({"messages": ASK, "tools": [{"type": "function", "function": {
            "name": "bad", "parameters": {"type": "object", "properties": "x"}}}]},
         400, "tools"),
        ({"messages": [{"role": "user", "content": "word " * 9000}]}, 400, "messages"),
        ({"messages": ASK, "ffwd": {"fill": "turbo"}}, 400, "ffwd.fill"),
        ({"messages": ASK, "ffwd": {"trace": "/tmp/ffwd-client/x.jsonl"}}, 400, "ffwd.trace"),
        ({"messages": [{"role": "user", "content": "\ud800 hi"}]}, 400, "messages[0].content"),
        ({"messages": ASK, "logit_bias": {"9" * 5000: 1}}, 400, "logit_bias"),
        ({"messages": ASK, "ffwd": {"k": 1_000_000_000_000}, "stream": True},
         400, "ffwd.k"),
        ({"messages": ASK, "max_tokens": True}, 400, "max_tokens"),
        ({"messages": ASK, "model": "gpt-5"}, 404, "model"),
    ],
)
def test_client_errors_keep_the_server_serving(
    server: Server, body: dict[str, Any], status: int, param: str
) -> None:
    # json.dumps escapes what httpx's UTF-8 encoder refuses (a lone surrogate).
    r = httpx.post(server.url + "/v1/chat/completions", timeout=120,
                   content=json.dumps({"model": "default", **body}).encode(),
                   headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and err["message"] and set(err) >= {"type", "code"}
    ok = httpx.post(server.url + "/v1/chat/completions",
                    json={"model": "default", "messages": ASK, "max_tokens": 3}, timeout=120)
    assert ok.status_code == 200


def test_the_log_has_a_line_per_request_under_its_id(server: Server) -> None:
    r = httpx.post(server.url + "/v1/chat/completions", timeout=120,
                   headers={"x-request-id": "it-log-1"},
                   json={"model": "default", "messages": ASK, "max_tokens": 3})
    assert r.status_code == 200 and r.headers["x-request-id"] == "it-log-1"
    assert r.json()["model"] != "default"  # the served model's name
    assert server.log is not None
    for _ in range(100):  # the line is written once the response has gone
        lines = [ln for ln in server.log.read_text().splitlines() if "request_id=it-log-1" in ln]
        if lines:
            break
        time.sleep(0.05)
    (line,) = lines
    assert "method=POST path=/v1/chat/completions status=200" in line
    assert "completion_tokens=3" in line and "fill_share=" in line


def test_malformed_json_is_400(server: Server) -> None:
    r = httpx.post(server.url + "/v1/chat/completions", content=b'{"model": ',
                   headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]


def test_auth(guarded_server: Server) -> None:
    assert httpx.get(guarded_server.url + "/health").status_code == 200
    with pytest.raises(openai.AuthenticationError):
        client(guarded_server, "wrong").models.list()
    models = client(guarded_server, "s3cret").models.list()
    assert [m.id for m in models.data] == ["SmolLM2-135M-Instruct"]


def test_queue_full_429_and_cancel_on_disconnect(guarded_server: Server) -> None:
    url = guarded_server.url
    head = {"Authorization": "Bearer s3cret"}
    long_req = {"model": "default", "messages": [{"role": "user", "content": "Tell a long story."}],
                "max_tokens": 4000, "temperature": 0.8, "seed": 1, "stream": True}
    results: dict[str, Any] = {}
    with httpx.Client(timeout=300) as h, h.stream("POST", url + "/v1/chat/completions",
                                                  json=long_req, headers=head) as stream:
        lines = stream.iter_lines()
        assert next(lines).startswith("data: ")  # the long request is running

        def queued() -> None:
            results["queued"] = httpx.post(
                url + "/v1/chat/completions", headers=head, timeout=300,
                json={"model": "default", "messages": ASK, "max_tokens": 4, "temperature": 0})

        t = threading.Thread(target=queued)
        t.start()
        for _ in range(600):
            if httpx.get(url + "/health").json()["queue_depth"] == 1:
                break
            threading.Event().wait(0.05)
        full = httpx.post(url + "/v1/chat/completions", headers=head, timeout=30,
                          json={"model": "default", "messages": ASK, "max_tokens": 4})
        assert full.status_code == 429
        assert full.json()["error"]["type"] == "rate_limit_error"
    # Leaving the block closed the stream: the 4000-token generation must stop, so
    # the queued request completes long before it could have finished.
    t.join(120)
    assert not t.is_alive(), "the queued request did not start: disconnect did not cancel"
    assert results["queued"].status_code == 200
    metrics = httpx.get(url + "/metrics", headers=head).text
    assert 'ffwd_requests_total{endpoint="/v1/chat/completions",status="429"} 1.0' in metrics


def test_interleaved_conversations_keep_their_prompt_cache(server: Server) -> None:
    c = client(server)
    a = [{"role": "system", "content": "You answer questions about the sea. " * 8},
         {"role": "user", "content": "What is a tide?"}]
    b = [{"role": "system", "content": "You answer questions about mountains. " * 8},
         {"role": "user", "content": "What is a glacier?"}]
    ra = c.chat.completions.create(model="default", messages=a, max_tokens=8, temperature=0)
    c.chat.completions.create(model="default", messages=b, max_tokens=8, temperature=0)
    a2 = [*a, {"role": "assistant", "content": ra.choices[0].message.content},
          {"role": "user", "content": "And a wave?"}]
    r = c.chat.completions.create(model="default", messages=a2, max_tokens=8, temperature=0)
    cached = r.usage.prompt_tokens_details.cached_tokens  # type: ignore[union-attr]
    # Conversation B replaced A in the live cache; A's prompt came back from the LRU.
    assert cached is not None and cached >= ra.usage.prompt_tokens - 1  # type: ignore[union-attr]


def metric(text: str, name: str) -> float:
    """One sample's value from a Prometheus text page (0 when absent)."""
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def wait_for(predicate: Any, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_non_streaming_client_that_leaves_frees_the_worker_within_one_step(
    server: Server,
) -> None:
    # EOS ids suppressed and fill off: a plain step is one forward, and 2000 would take minutes.
    body = json.dumps({
        "model": "default", "messages": [{"role": "user", "content": "Tell a long story."}],
        "max_tokens": 2000, "temperature": 0.8, "seed": 1, "logit_bias": {"0": -100, "2": -100},
        "ffwd": {"fill": "off"},
    }).encode()
    def health() -> Any:
        return httpx.get(server.url + "/health").json()

    def forwards() -> float:
        return metric(httpx.get(server.url + "/metrics").text, "ffwd_forward_calls_total")

    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: "
                 b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    wait_for(lambda: health()["running"])
    before = httpx.get(server.url + "/metrics").text
    wait_for(lambda: forwards() > metric(before, "ffwd_forward_calls_total") + 2)  # decoding
    sock.close()  # the client gives up
    wait_for(lambda: not health()["running"])
    text = httpx.get(server.url + "/metrics").text
    name = 'ffwd_cancelled_requests_total{endpoint="/v1/chat/completions",stream="false"}'
    assert metric(text, name) - metric(before, name) == 1
    # Counted in forwards, not seconds: at most the step in flight ran after the disconnect.
    count, total = "ffwd_forwards_after_cancel_count", "ffwd_forwards_after_cancel_sum"
    assert metric(text, count) - metric(before, count) == 1
    assert metric(text, total) - metric(before, total) <= 1
    tokens = metric(text, "ffwd_completion_tokens_total") - metric(
        before, "ffwd_completion_tokens_total")
    assert 0 < tokens < 2000


def _greedy(server: Server, path: str, body: dict[str, Any]) -> tuple[int, list[str], str]:
    """(cached prompt tokens, the output's tokens, the text) of one greedy request."""
    full = {"model": "default", "max_tokens": 32, "temperature": 0, **body}
    r = httpx.post(server.url + path, json=full, timeout=300).json()
    choice = r["choices"][0]
    if path.endswith("chat/completions"):
        tokens = [t["token"] + str(t["bytes"]) for t in choice["logprobs"]["content"]]
        text = choice["message"]["content"]
    else:
        tokens = [t for t in choice["logprobs"]["tokens"]]
        text = choice["text"]
    return r["usage"]["prompt_tokens_details"]["cached_tokens"], tokens, text


def test_greedy_output_does_not_depend_on_the_prompt_cache(exact_server: Server) -> None:
    server = exact_server  # --deterministic: the same ids however they are computed
    # The default configuration (fill echo, the default engine) under --deterministic.
    sea = {"messages": [{"role": "user", "content": "Write one sentence about the sea, Ysolde."}],
           "logprobs": True}
    tree = {"messages": [{"role": "user", "content": "Write one poem about a tree, Ysolde."}],
            "logprobs": True}
    cold = _greedy(server, "/v1/chat/completions", sea)
    warm = _greedy(server, "/v1/chat/completions", sea)  # all but the last prompt id cached
    _greedy(server, "/v1/chat/completions", tree)  # another conversation takes the live cache
    restored = _greedy(server, "/v1/chat/completions", sea)  # back from the LRU
    plain = _greedy(server, "/v1/chat/completions", {**sea, "ffwd": {"fill": "off"}})
    assert warm[0] > cold[0] and restored[0] == warm[0]
    assert cold[1] == warm[1] == restored[1] == plain[1] and cold[2] == warm[2]
    # A completion whose first id nothing shares: nothing at all cached, then everything.
    text = {"prompt": "Qwyzx wrote one sentence about the sea:", "logprobs": 0}
    first = _greedy(server, "/v1/completions", text)
    again = _greedy(server, "/v1/completions", text)
    assert first[0] == 0 < again[0] and first[1:] == again[1:]
