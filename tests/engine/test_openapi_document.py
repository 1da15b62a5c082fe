"""The served OpenAPI document says what the server does (issue 26): what a Responses
request must carry, the output limit the operator set, a response body for every 200
(JSON and events), the request id on every response. Checked against the real
`ModelService` on a tiny model, the document read by a JSON Schema validator."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator

from ffwd.config import TokenLimits
from ffwd.serve.app import create_app
from tests.engine.tiny_service import tiny_service

LIMIT = 16
HI = [{"role": "user", "content": "hi"}]
# path -> (a valid body without its output limit, the limit's field)
LIMITED = {
    "/v1/chat/completions": ({"model": "default", "messages": HI}, "max_tokens"),
    "/v1/completions": ({"model": "default", "prompt": "hi"}, "max_tokens"),
    "/v1/responses": ({"model": "default", "input": "hi"}, "max_output_tokens"),
    "/v1/messages": ({"model": "default", "messages": HI}, "max_tokens"),
}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(tiny_service(limits=TokenLimits(default=4, limit=LIMIT)))) as c:
        yield c


@pytest.fixture(scope="module")
def doc(client: TestClient) -> dict[str, Any]:
    document: dict[str, Any] = client.get("/openapi.json").json()
    return document


def valid(doc: dict[str, Any], component: str, body: object) -> bool:
    schema = {"$ref": f"#/components/schemas/{component}", "components": doc["components"]}
    return bool(Draft202012Validator(schema).is_valid(body))


def test_a_responses_request_needs_input_or_a_previous_response(
        doc: dict[str, Any], client: TestClient) -> None:
    for body in ({"model": "default"}, {"input": None}):
        assert not valid(doc, "ResponsesRequest", body)
        reply = client.post("/v1/responses", json=body)
        assert reply.status_code == 400 and reply.json()["error"]["param"] == "input"
    assert valid(doc, "ResponsesRequest", {"input": "hi"})
    assert client.post("/v1/responses", json={"input": "hi"}).status_code == 200
    # Without input, the stored response's conversation is continued (404: none stored).
    previous = {"previous_response_id": "resp_none"}
    assert valid(doc, "ResponsesRequest", previous)
    reply = client.post("/v1/responses", json=previous)
    assert reply.status_code == 404
    assert reply.json()["error"]["param"] == "previous_response_id"


@pytest.mark.parametrize("path", LIMITED)
def test_the_output_limit_is_the_servers(path: str, doc: dict[str, Any],
                                         client: TestClient) -> None:
    # Above the limit a request is capped (valid, and answered), as the document says.
    body, field = LIMITED[path]
    component = request_component(doc, path)
    assert valid(doc, component, {**body, field: LIMIT + 1})
    assert f"capped at {LIMIT}" in doc["components"]["schemas"][component]["properties"][
        field]["description"], "does model_info() report max_tokens_limit?"
    reply = client.post(path, json={**body, field: LIMIT + 1})
    assert reply.status_code == 200 and reply.json()["usage"]["ffwd"]["max_tokens"] == LIMIT


@pytest.mark.parametrize("path", LIMITED)
def test_a_strict_limit_is_the_documents_maximum(path: str) -> None:
    limits = TokenLimits(default=4, limit=LIMIT, strict=True)
    with TestClient(create_app(tiny_service(limits=limits))) as strict:
        doc = strict.get("/openapi.json").json()
        body, field = LIMITED[path]
        component = request_component(doc, path)
        assert valid(doc, component, {**body, field: LIMIT})
        assert not valid(doc, component, {**body, field: LIMIT + 1}), (
            f"the document lets {field} exceed the server's strict limit {LIMIT}")
        assert strict.post(path, json={**body, field: LIMIT}).status_code == 200
        reply = strict.post(path, json={**body, field: LIMIT + 1})
        assert reply.status_code == 400 and reply.json()["error"]["param"] == field


def request_component(doc: dict[str, Any], path: str) -> str:
    request = doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]
    return str(request["schema"]["$ref"].rsplit("/", 1)[-1])


def test_every_200_has_a_typed_body_and_every_response_the_request_id(
        doc: dict[str, Any]) -> None:
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            ok = op["responses"]["200"]["content"]
            for media, spec in ok.items():
                schema = spec["schema"]
                assert schema != {} and schema.get("additionalProperties") is not True, (
                    method, path, media)
            streams = path in LIMITED
            assert ("text/event-stream" in ok) == streams, (method, path)
            for status, response in op["responses"].items():
                headers = response["headers"]
                assert "x-request-id" in headers, (method, path, status)
                assert ("request-id" in headers) == path.startswith("/v1/messages")


def test_generated_bodies_name_their_required_fields(doc: dict[str, Any]) -> None:
    schemas = doc["components"]["schemas"]
    assert {"id", "object", "created", "model", "choices", "usage"} <= set(
        schemas["ChatCompletion"]["required"])
    assert {"id", "status", "output", "usage"} <= set(schemas["Response"]["required"])
    assert {"id", "content", "stop_reason", "usage"} <= set(
        schemas["MessageResponse"]["required"])
    chunk = doc["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]["content"][
        "text/event-stream"]["schema"]["properties"]["data"]
    assert chunk["if"] == {"const": "[DONE]"}
    assert chunk["else"]["contentSchema"]["anyOf"][0]["$ref"].endswith("/ChatCompletionChunk")


def test_the_document_says_what_the_server_takes_of_issue_32(doc: dict[str, Any],
                                                            client: TestClient) -> None:
    """A tokenized prompt (ids within the vocabulary), a json_schema format without its
    schema, and a browser page's origins: the document and the server agree."""
    top = 49151  # the embedded tokenizer's last id (the tiny model has its vocabulary)
    cases = [
        ("CompletionRequest", "/v1/completions", {"prompt": [1, 2, 3]}, True),
        ("CompletionRequest", "/v1/completions", {"prompt": [[1, 2, 3]]}, True),
        ("CompletionRequest", "/v1/completions", {"prompt": [top]}, True),
        ("CompletionRequest", "/v1/completions", {"prompt": [top + 1]}, False),
        ("CompletionRequest", "/v1/completions", {"prompt": [-1]}, False),
        ("CompletionRequest", "/v1/completions", {"prompt": ["a", "b"]}, False),
        ("CompletionRequest", "/v1/completions", {"prompt": [[1], [2]]}, False),
        ("ChatCompletionRequest", "/v1/chat/completions", {"messages": HI, "response_format": {
            "type": "json_schema", "json_schema": {"name": "any"}}}, True),
        ("ResponsesRequest", "/v1/responses", {"input": "hi", "text": {"format": {
            "type": "json_schema", "name": "any"}}}, True),
    ]
    for component, path, body, ok in cases:
        assert valid(doc, component, {"model": "default", **body}) == ok, (component, body)
        status = client.post(path, json={"model": "default", "max_tokens": 2, **body}
                             if path != "/v1/responses" else body).status_code
        assert (status == 200) == ok, (path, body, status)
    # Browser origins: every response may carry the CORS headers, and 403 is the answer
    # to a page from another origin.
    for ops in doc["paths"].values():
        for op in ops.values():
            assert "403" in op["responses"]
            for response in op["responses"].values():
                assert "access-control-allow-origin" in response["headers"]
    assert "--cors-origins" in doc["info"]["description"]
    r = client.post("/v1/chat/completions", json={"model": "default", "messages": HI},
                    headers={"Origin": "https://elsewhere.example"})
    assert r.status_code == 403 and valid(doc, "ErrorResponse", r.json())


CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
ARGS_OBJECT = {**CALL, "tool_calls": [  # the arguments as an object, not a JSON text
    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": {}}}]}
ANSWER = {"role": "tool", "tool_call_id": "call_1", "content": "42"}
TOOL = [{"type": "function", "function": {"name": "f"}}]


@pytest.mark.parametrize(("component", "path", "body", "ok"), [
    ("ChatCompletionRequest", "/v1/chat/completions", {"messages": HI, "metadata": "x"}, False),
    ("ChatCompletionRequest", "/v1/chat/completions",
     {"messages": HI, "metadata": {"k": "v"}}, True),
    ("ChatCompletionRequest", "/v1/chat/completions",
     {"messages": [*HI, CALL, {"role": "tool", "content": "42"}]}, False),
    ("ChatCompletionRequest", "/v1/chat/completions", {"messages": [*HI, CALL, ANSWER]}, True),
    ("ChatCompletionRequest", "/v1/chat/completions",
     {"messages": [*HI, ARGS_OBJECT, ANSWER]}, False),
    ("ResponsesRequest", "/v1/responses", {"input": []}, False),
    ("ResponsesRequest", "/v1/responses", {"input": [{"type": "hologram", "x": 1}]}, False),
    ("ResponsesRequest", "/v1/responses", {"input": "hi", "include": ["everything"]}, False),
    ("ResponsesRequest", "/v1/responses",
     {"input": "hi", "include": ["message.output_text.logprobs"]}, True),
    ("ResponsesRequest", "/v1/responses", {"input": "hi", "n": 2}, False),
    ("MessagesRequest", "/v1/messages", {"messages": HI, "n": 2}, False),
    ("CountTokensRequest", "/v1/messages/count_tokens",
     {"messages": HI, "temperature": "hot"}, False),
    ("CountTokensRequest", "/v1/messages/count_tokens", {"messages": HI, "top_k": -1}, False),
    ("CountTokensRequest", "/v1/messages/count_tokens", {"messages": HI}, True),
    ("CompletionRequest", "/v1/completions", {"prompt": "hi", "tools": TOOL}, False),
    ("CompletionRequest", "/v1/completions", {"prompt": "hi", "tool_choice": "auto"}, False),
])
def test_the_document_refuses_what_the_server_refuses_of_issue_52(
        component: str, path: str, body: dict[str, Any], ok: bool, doc: dict[str, Any],
        client: TestClient) -> None:
    """Each body the real API refuses is invalid in the document and a 400 naming its
    field; its well-formed twin is valid and answered."""
    limit = {"/v1/responses": "max_output_tokens"}.get(path, "max_tokens")
    sent = {"model": "default", limit: 2, **body}
    assert valid(doc, component, sent) == ok, (component, sent)
    reply = client.post(path, json=sent)
    assert (reply.status_code == 200) == ok, (path, sent, reply.text)
    if not ok:
        assert reply.status_code == 400 and reply.json()["error"]["param"], reply.text
