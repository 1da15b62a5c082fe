"""The served OpenAPI document: request bodies, response bodies, errors, headers, limits.

Handlers read their bodies themselves (`body.read_json`: size, depth and
Unicode checks come before validation), and write theirs as plain dicts, so
FastAPI sees neither; `install_openapi` declares them. Requests: the dialects'
own models (`protocol`, `dialects.*_models`), ``model`` one of the served
names, every output limit described by the server's ``--max-tokens-limit``
(capped above it; its maximum under ``--strict-max-tokens``).
Responses: each 200 as JSON (`openapi_openai`, `openapi_agents`) and, for
the generation routes, as server-sent events, one schema per event whose
``data`` is JSON of the declared shape (``contentSchema``, which API fuzzers
check) or Chat Completions' closing ``[DONE]``. Every error the server sends
has OpenAI's shape, and Anthropic's on ``/v1/messages*``. Every response may
carry the CORS headers (to a browser page from an allowed origin), and a page
from any other origin gets 403 (`cors`).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, TypeAdapter

from ffwd.serve.openapi_agents import (
    MessageResponse,
    MessageStreamEvent,
    Response,
    ResponseDeleted,
    ResponseStreamEvent,
    TokenCount,
)
from ffwd.serve.openapi_openai import (
    AnthropicErrorResponse,
    ChatCompletion,
    ChatCompletionChunk,
    ErrorResponse,
    Health,
    ModelEntry,
    ModelList,
    TextCompletion,
    TextCompletionChunk,
)

_COMMON: dict[int | str, dict[str, Any]] = {
    401: {"description": "Missing or wrong API key (only when the server has one)"},
    403: {"description": "A browser page from an origin this server does not allow (CORS: "
                         "its own and localhost origins, and those --cors-origins lists)"},
    404: {"description": "Unknown path, or a model (or stored response) this server does "
                         "not have"},
    405: {"description": "Method not allowed on this path (see the Allow header)"},
    500: {"description": "Server error"},
}
POST_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"description": "Invalid request: malformed JSON or a parameter out of its type "
                         "or range"},
    413: {"description": "Request body larger than the server accepts"},
    429: {"description": "Too many requests waiting (see Retry-After)"},
    **_COMMON,
}
GET_RESPONSES: dict[int | str, dict[str, Any]] = dict(_COMMON)
HEALTH_RESPONSES: dict[int | str, dict[str, Any]] = {
    503: {"description": "Draining: a shutdown signal came, the server takes no new requests "
                         "(the body says \"status\": \"draining\")"}, **GET_RESPONSES}
DELETE_RESPONSES = GET_RESPONSES
ANTHROPIC_POST_RESPONSES = POST_RESPONSES  # the error shape is chosen by path
METRICS_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {"description": "Prometheus text exposition format",
          "content": {"text/plain": {"schema": {"type": "string"}}}},
    **_COMMON,
}

# (path, method) -> the 200 body as JSON, and one event of its stream (None: no stream).
BODIES: dict[tuple[str, str], tuple[Any, Any]] = {
    ("/v1/chat/completions", "post"): (ChatCompletion, ChatCompletionChunk),
    ("/v1/completions", "post"): (TextCompletion, TextCompletionChunk),
    ("/v1/responses", "post"): (Response, ResponseStreamEvent),
    ("/v1/responses/{response_id}", "get"): (Response, None),
    ("/v1/responses/{response_id}", "delete"): (ResponseDeleted, None),
    ("/v1/messages", "post"): (MessageResponse, MessageStreamEvent),
    ("/v1/messages/count_tokens", "post"): (TokenCount, None),
    ("/v1/models", "get"): (ModelList, None),
    ("/v1/models/{model_id}", "get"): (ModelEntry, None),
    ("/health", "get"): (Health, None),
}
ERRORS = (ErrorResponse, AnthropicErrorResponse)
TOKEN_LIMITED = ("max_tokens", "max_completion_tokens", "max_output_tokens")
DONE = "[DONE]"  # Chat Completions' and Completions' last event
REQUEST_ID = {"description": "The request's id (also in the server's log line)",
              "schema": {"type": "string"}}
# Sent to a browser page from an allowed origin (`cors`); a preflight (OPTIONS) from one
# is answered 204 with Access-Control-Allow-Methods, -Allow-Headers and -Max-Age.
CORS_HEADERS = {
    "access-control-allow-origin": {
        "description": "The page's origin, when a browser page from an allowed origin asked "
                       "(CORS)", "schema": {"type": "string"}},
    "access-control-expose-headers": {
        "description": "The headers such a page may read", "schema": {"type": "string"}},
    "vary": {"description": "Origin, with the CORS headers", "schema": {"type": "string"}},
}
CORS_NOTE = ("Browser pages may call this API from the server's own origin, localhost origins "
             "and the origins the operator lists (--cors-origins, or * for any); a preflight "
             "OPTIONS from one of them is answered 204 with the CORS headers, and a request "
             "from any other origin gets 403 without them.")


def install_openapi(app: FastAPI, bodies: dict[str, type[BaseModel]], models: list[str],
                    max_tokens: int | None = None, vocab_size: int | None = None,
                    strict_max_tokens: bool = False) -> None:
    """Make `app.openapi()` declare `bodies` (path -> request model) as JSON request bodies,
    whose ``model`` is one of `models` (the served id and its aliases), whose output
    limit is capped at `max_tokens` (the server's; None: not stated; its maximum
    under `strict_max_tokens`) and whose token ids
    (a tokenized ``prompt``) are below `vocab_size`, and every response body (see the
    module docstring)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, routes=app.routes,
                              description=CORS_NOTE)
            refs = _components(doc, bodies)
            for path, model in bodies.items():
                _request_body(doc, path, refs[model], models, max_tokens, vocab_size,
                              strict_max_tokens)
            for (path, method), (whole, event) in BODIES.items():
                op = doc["paths"].get(path, {}).get(method)
                if op is not None:
                    op["responses"]["200"] = _success(path, refs[whole],
                                                      refs.get(event) if event else None)
            for path, ops in doc["paths"].items():
                for op in ops.values():
                    _errors_and_headers(path, op, refs)
            if (health := doc["paths"].get("/health", {}).get("get")) is not None:
                health["responses"]["503"]["content"] = {  # the health body, not an error
                    "application/json": {"schema": refs[Health]}}
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def _components(doc: dict[str, Any], bodies: dict[str, type[BaseModel]]) -> dict[Any, Any]:
    """Every request and response schema, generated together so that models with the same
    name get distinct component names; the document's components get their definitions,
    and the result maps each type to its schema (a ``$ref`` for a model)."""
    types: list[tuple[Any, Any]] = [(m, "validation") for m in bodies.values()]
    for whole, event in BODIES.values():
        types += [(t, "serialization") for t in (whole, event) if t is not None]
    types += [(e, "serialization") for e in ERRORS]
    keyed, defs = TypeAdapter.json_schemas(
        [(t, mode, TypeAdapter(t)) for t, mode in dict(types).items()],
        ref_template="#/components/schemas/{model}")
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    for stale in ("HTTPValidationError", "ValidationError"):  # FastAPI's 422: never sent
        schemas.pop(stale, None)
    schemas.update(defs.get("$defs", {}))
    return {t: schema for (t, _), schema in keyed.items()}


def _request_body(doc: dict[str, Any], path: str, ref: dict[str, Any], models: list[str],
                  max_tokens: int | None, vocab_size: int | None, strict: bool) -> None:
    schema = _resolve(doc, ref)
    props = schema["properties"]
    props["model"]["enum"] = models
    for name in TOKEN_LIMITED:
        if name in props and max_tokens is not None:
            _cap(props[name], max_tokens, strict)
    if "prompt" in props and vocab_size is not None:
        _cap_ids(props["prompt"], vocab_size - 1)
    doc["paths"][path]["post"]["requestBody"] = {
        "required": True, "content": {"application/json": {"schema": ref}}}


def _cap(schema: dict[str, Any], limit: int, strict: bool) -> None:
    """Say what the server does above `limit`: caps the output there, or (`strict`)
    refuses it, `limit` then the integer (branch) of `schema`'s maximum."""
    if not strict:
        schema["description"] = (
            f"Above {limit} (this server's --max-tokens-limit) the output is capped at "
            f"{limit}, and the reply's usage says so in its ffwd object")
        return
    for branch in schema.get("anyOf", [schema]):
        if branch.get("type") == "integer":
            branch["maximum"] = limit
    schema["description"] = f"At most {limit}: this server's limit (--max-tokens-limit)"


def _cap_ids(schema: dict[str, Any], top: int) -> None:
    """Bound every integer (a token id) in `schema`'s branches and items to 0..`top`."""
    if schema.get("type") == "integer":
        schema.update(minimum=0, maximum=top)
    for branch in schema.get("anyOf", []):
        _cap_ids(branch, top)
    if isinstance(schema.get("items"), dict):
        _cap_ids(schema["items"], top)


def _resolve(doc: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    name = ref["$ref"].rsplit("/", 1)[-1]
    schema: dict[str, Any] = doc["components"]["schemas"][name]
    return schema


def _success(path: str, whole: dict[str, Any], event: dict[str, Any] | None) -> dict[str, Any]:
    content: dict[str, Any] = {"application/json": {"schema": whole}}
    if event is None:
        return {"description": "OK", "content": content}
    content["text/event-stream"] = {"schema": _event_schema(path, event)}
    return {"description": "The reply as JSON, or with stream: true as server-sent events",
            "content": content}


def _event_schema(path: str, event: dict[str, Any]) -> dict[str, Any]:
    """One server-sent event: OpenAI's chat and completion chunks (``data`` only, then
    ``[DONE]``; a failure after the start is an error body), or the agents' APIs' typed
    events (``event`` names the ``type`` of ``data``)."""
    def json_of(schema: dict[str, Any]) -> dict[str, Any]:
        return {"type": "string", "contentMediaType": "application/json",
                "contentSchema": schema}

    if "oneOf" not in event:  # a chunk: one model
        error = {"$ref": "#/components/schemas/ErrorResponse"}
        data = {"type": "string", "if": {"const": DONE},
                "else": json_of({"anyOf": [event, error]})}
        return {"type": "object", "required": ["data"], "properties": {"data": data},
                "description": f"A chunk as JSON; the last event's data is {DONE}"}
    kinds = sorted(event["discriminator"]["mapping"])
    return {"type": "object", "required": ["event", "data"],
            "properties": {"event": {"type": "string", "enum": kinds}, "data": json_of(event)},
            "description": f"One event of {path}'s stream: data is JSON whose type is event"}


def _errors_and_headers(path: str, op: dict[str, Any], refs: dict[Any, Any]) -> None:
    """Errors as JSON in the path's shape; the request id on every response."""
    anthropic = path.startswith("/v1/messages")
    error = refs[AnthropicErrorResponse if anthropic else ErrorResponse]
    op["responses"].pop("422", None)  # FastAPI's path-parameter errors: not this server's
    for status, response in op["responses"].items():
        if int(status) >= 400:
            response["content"] = {"application/json": {"schema": error}}
        headers = response.setdefault("headers", {})
        headers["x-request-id"] = REQUEST_ID
        headers.update(CORS_HEADERS)
        if anthropic:
            headers["request-id"] = REQUEST_ID
