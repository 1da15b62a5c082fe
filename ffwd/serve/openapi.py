"""The served OpenAPI document: request bodies, error responses and media types.

Handlers read their bodies themselves (`body.read_json`: size, depth and
Unicode checks come before validation), so FastAPI cannot see the request
models; `install_openapi` declares them, with every error the server sends
(in the OpenAI shape, and on ``/v1/messages`` in Anthropic's), so generated
clients and API fuzzers can drive the API.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str


class ErrorResponse(BaseModel):
    """Every error body: ``{"error": {"message", "type", "param", "code"}}``."""

    error: ErrorDetail


class AnthropicErrorDetail(BaseModel):
    type: str
    message: str
    param: str | None
    code: str


class AnthropicErrorResponse(BaseModel):
    """Every error body on ``/v1/messages``: ``{"type": "error", "error": {...}}``."""

    type: Literal["error"]
    error: AnthropicErrorDetail


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorResponse, "description": description}


_COMMON: dict[int | str, dict[str, Any]] = {
    401: _error("Missing or wrong API key (only when the server has one)"),
    404: _error("Unknown path, or a model this server does not serve"),
    405: _error("Method not allowed on this path (see the Allow header)"),
    500: _error("Server error"),
}
POST_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The completion as JSON, or as server-sent events with stream: true",
        "content": {"text/event-stream": {"schema": {
            "type": "object", "required": ["data"], "properties": {"data": {"type": "string"}},
            "description": "One event: data is a chunk as JSON; the last event's is [DONE]",
        }}},
    },
    400: _error("Invalid request: malformed JSON or a parameter out of its type or range"),
    413: _error("Request body larger than the server accepts"),
    429: _error("Too many requests waiting (see Retry-After)"),
    **_COMMON,
}
GET_RESPONSES: dict[int | str, dict[str, Any]] = dict(_COMMON)
DELETE_RESPONSES = GET_RESPONSES
# Anthropic's routes: the same statuses, its error shape, its event stream.
ANTHROPIC_POST_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: ({**spec, "model": AnthropicErrorResponse} if "model" in spec else spec)
    for status, spec in POST_RESPONSES.items()
}
METRICS_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {"description": "Prometheus text exposition format",
          "content": {"text/plain": {"schema": {"type": "string"}}}},
    **_COMMON,
}


def install_openapi(app: FastAPI, bodies: dict[str, type[BaseModel]], models: list[str]) -> None:
    """Make `app.openapi()` declare `bodies` (path -> request model) as JSON request bodies,
    whose ``model`` is one of `models` (the served id and its aliases)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
            schemas = doc.setdefault("components", {}).setdefault("schemas", {})
            for path, model in bodies.items():
                schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
                schemas.update(schema.pop("$defs", {}))
                schema["properties"]["model"]["enum"] = models
                schemas[model.__name__] = schema
                doc["paths"][path]["post"]["requestBody"] = {
                    "required": True,
                    "content": {"application/json": {
                        "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}},
                }
            app.openapi_schema = doc
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
