"""The token view (``"ffwd": {"tokens": true}``) and the playground page that shows it,
over a scripted service: which tokens each chunk lists, the whole response's list, the
switch kept apart from the fill overrides, and the page's routes (open without a key)."""

from __future__ import annotations

import re
from typing import Any, get_args

import pytest
from fastapi.testclient import TestClient

from ffwd.config import REQUEST_FILL_TYPES
from ffwd.deploy.app import REPLICA_HEADER, Accepted, RayExecutor
from ffwd.engine.events import TokenEvent, TokenOrigin
from ffwd.serve.app import create_app
from ffwd.serve.playground import ASSETS, PAGE, PAGE_PATHS, static_file
from ffwd.serve.protocol import FfwdSettings
from ffwd.templates.formats.base import ContentDelta, Delta, ToolCall, ToolCallDelta
from tests.unit.agent_service import AgentService, Script
from tests.unit.scripted import result
from tests.unit.test_deploy_app import Handle
from tests.unit.test_serve_app import sse

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
ASK = {"model": "tiny", "messages": [{"role": "user", "content": "Weather in Paris?"}],
       "tools": TOOLS, "tool_choice": "required"}
ARGS = '{"city": "Paris"}'


def tok(id: int, origin: TokenOrigin, piece: str, *deltas: Delta,
        logprob: float | None = None) -> TokenEvent:
    released = "".join(d.text if isinstance(d, ContentDelta) else d.arguments for d in deltas)
    return TokenEvent(id, origin, logprob, (), piece, piece.encode(), released, deltas)


def weather(logprob: float | None = None) -> Script:
    """A call whose markup is held until its name is known, and closing markup at the end."""
    return [
        tok(1, "template", "<tool_call>\n", logprob=logprob),
        tok(2, "template", '{"name": "get_weather", ', logprob=logprob),
        tok(3, "schema", '"arguments": {"city": "', ToolCallDelta(0, "get_weather"),
            ToolCallDelta(0, None, '{"city": "'), logprob=logprob),
        tok(4, "echo", "Paris", ToolCallDelta(0, None, "Paris"), logprob=logprob),
        tok(5, "sampled", '"}}', ToolCallDelta(0, None, '"}'), logprob=logprob),
        tok(6, "grammar", "\n</tool_call>", logprob=logprob),
        result(calls=(ToolCall("get_weather", ARGS),), finish="tool_calls", completion=6),
    ]


def served(script: Script, **app: Any) -> tuple[TestClient, AgentService]:
    service = AgentService(script)
    return TestClient(create_app(service, **app)), service


def test_each_chunk_lists_the_tokens_since_the_previous_one() -> None:
    client, _ = served(weather())
    r = client.post("/v1/chat/completions",
                    json={**ASK, "stream": True, "ffwd": {"tokens": True}})
    chunks = [c for c in sse(r.text) if c != "[DONE]"]
    assert all("ffwd" in c for c in chunks)
    listed = [[t["id"] for t in c["ffwd"]["tokens"]] for c in chunks]
    # role; name (with the held markup); the rest of token 3; 4; 5; the finish with 6
    assert listed == [[], [1, 2, 3], [], [4], [5], [6]]
    assert chunks[1]["choices"][0]["delta"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    entries = [t for c in chunks for t in c["ffwd"]["tokens"]]
    assert entries[0] == {"id": 1, "origin": "template", "text": "<tool_call>\n"}
    assert entries[2] == {"id": 3, "origin": "schema", "text": '"arguments": {"city": "',
                          "part": "call", "call": 0}
    assert [t["origin"] for t in entries] == ["template", "template", "schema", "echo",
                                              "sampled", "grammar"]
    assert "".join(t["text"] for t in entries) == (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')


def test_logprobs_ride_on_the_entries_when_asked() -> None:
    client, _ = served(weather(logprob=-0.25))
    body = {**ASK, "stream": True, "logprobs": True, "ffwd": {"tokens": True}}
    chunks = [c for c in sse(client.post("/v1/chat/completions", json=body).text)
              if c != "[DONE]"]
    for c in chunks:  # the entries and OpenAI's logprobs list the same tokens
        lp = c["choices"][0]["logprobs"]
        assert len(c["ffwd"]["tokens"]) == (len(lp["content"]) if lp else 0)
    assert {t["logprob"] for c in chunks for t in c["ffwd"]["tokens"]} == {-0.25}


def test_a_whole_response_lists_every_token_beside_the_block() -> None:
    client, _ = served(weather(logprob=-1.5))
    body = client.post("/v1/chat/completions",
                       json={**ASK, "logprobs": True, "ffwd": {"tokens": True}}).json()
    tokens = body["ffwd"]["tokens"]
    assert [t["id"] for t in tokens] == [1, 2, 3, 4, 5, 6]
    assert tokens[3] == {"id": 4, "origin": "echo", "text": "Paris", "part": "call", "call": 0,
                         "logprob": -1.5}
    assert "part" not in tokens[5]  # closing markup: no text came out of it
    assert body["ffwd"]["forward_calls"] == 0 and "stats" in body["ffwd"]
    assert body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == ARGS


def test_content_tokens_and_completions() -> None:
    script: Script = [tok(7, "sampled", "Hi", ContentDelta("Hi")),
                      tok(8, "echo", " there", ContentDelta(" there")), result("Hi there")]
    client, _ = served(script)
    body = {"model": "tiny", "prompt": "Say hi", "ffwd": {"tokens": True}}
    tokens = client.post("/v1/completions", json=body).json()["ffwd"]["tokens"]
    assert tokens == [{"id": 7, "origin": "sampled", "text": "Hi", "part": "content"},
                      {"id": 8, "origin": "echo", "text": " there", "part": "content"}]
    chunks = sse(client.post("/v1/completions", json={**body, "stream": True}).text)
    assert [[t["id"] for t in c["ffwd"]["tokens"]] for c in chunks[:-1]] == [[7], [8], []]


def test_without_the_switch_the_reply_is_plain_openai() -> None:
    client, _ = served(weather(logprob=-0.5))
    chunks = sse(client.post("/v1/chat/completions",
                             json={**ASK, "stream": True, "logprobs": True}).text)
    assert not any("ffwd" in c for c in chunks if c != "[DONE]")
    assert "tokens" not in client.post("/v1/chat/completions", json=ASK).json()["ffwd"]


def test_the_switch_is_no_fill_setting() -> None:
    assert set(FfwdSettings.model_fields) == {*REQUEST_FILL_TYPES, "tokens"}
    client, service = served(weather())
    client.post("/v1/chat/completions", json={**ASK, "ffwd": {"tokens": True, "fill": "off"}})
    assert service.last.fill == {"fill": "off"}
    client.post("/v1/chat/completions", json={**ASK, "ffwd": {"tokens": True}})
    assert service.last.fill == {}
    r = client.post("/v1/chat/completions", json={**ASK, "ffwd": {"tokens": "yes"}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "ffwd.tokens"


@pytest.mark.parametrize("key", [None, "s3cret"])
def test_the_page_and_its_files_load_without_a_key(key: str | None) -> None:
    client, _ = served(weather(), api_key=key)
    for path in ("/", "/playground"):
        r = client.get(path)
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        assert "default-src 'none'" in r.headers["content-security-policy"]
        assert r.content == static_file(PAGE)
    for name, media in ASSETS.items():
        r = client.get(f"/playground/{name}?name=../../config.py")  # the handlers take nothing
        assert r.status_code == 200 and r.headers["content-type"] == media
        assert r.content == static_file(name)
    assert {"/", "/playground", *(f"/playground/{n}" for n in ASSETS)} == PAGE_PATHS
    if key:
        assert client.get("/v1/models").status_code == 401
        assert client.get("/metrics").status_code == 401
        assert client.get("/v1/models", headers={"Authorization": f"Bearer {key}"}).is_success
    assert not PAGE_PATHS & set(client.get("/openapi.json", headers={
        "Authorization": f"Bearer {key}"}).json()["paths"])


def test_the_page_uses_its_own_files_and_nothing_from_elsewhere() -> None:
    html = static_file(PAGE).decode()
    linked = set(re.findall(r'(?:src|href)="([^"]+)"', html))
    assert linked == {"data:,", *(f"/playground/{name}" for name in ASSETS)}
    for name in (PAGE, *ASSETS):
        assert not re.search(r"https?://|//cdn|@import", static_file(name).decode()), name
    assert any("ffwd: { tokens: true }" in static_file(name).decode() for name in ASSETS)
    css = static_file("playground.css").decode()
    assert all(f".o-{origin} " in css for origin in get_args(TokenOrigin))


def test_behind_replicas_the_page_and_the_token_view_are_the_same() -> None:
    """`ffwd serve --replicas`: the ingress is `create_app` over a Ray executor."""
    handle = Handle([Accepted("r1"), [*weather(), None]])
    app = create_app(executor=RayExecutor(handle, "tiny"), api_key="k")  # type: ignore[arg-type]
    with TestClient(app) as client:
        assert client.get("/").content == static_file(PAGE)
        r = client.post("/v1/chat/completions", headers={"Authorization": "Bearer k"},
                        json={**ASK, "ffwd": {"tokens": True}})
    assert r.headers[REPLICA_HEADER] == "r1"
    assert [t["id"] for t in r.json()["ffwd"]["tokens"]] == [1, 2, 3, 4, 5, 6]
