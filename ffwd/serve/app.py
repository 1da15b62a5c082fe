"""The HTTP app: routes, the error shape, the API key guard, the OpenAPI document.

It owns no decoding logic. Each generation route reads and validates its
body, and its dialect (`ffwd.serve.dialects`: OpenAI Chat Completions,
Completions and Responses, Anthropic Messages) translates it into a
`GenerationRequest` and makes the writer of its response. The request's
`Context` comes with it: its id (`access.py`), its tenant
(`middleware.tenant`) and the served model's name, which responses report
whatever model was asked for (``default`` included). `delivery.respond` runs
the request on an `execute.Executor` and hands the events to that writer. Errors on
``/v1/messages`` have Anthropic's shape, everywhere else OpenAI's. By default
the executor is a `LocalExecutor`: the engine's loop over a `Service`, in this
process; under `ffwd.deploy` it is a Ray Serve replica. `create_app` is the one
app factory for both. Browser pages from other origins may call it as
`cors.CorsPolicy` allows (``--cors-origins``; by default localhost pages only).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from ffwd.config import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_QUEUE
from ffwd.serve.access import AccessLog
from ffwd.serve.body import read_json
from ffwd.serve.cors import CorsPolicy
from ffwd.serve.delivery import respond
from ffwd.serve.dialects.chat import open_chat
from ffwd.serve.dialects.common import new_id, not_found
from ffwd.serve.dialects.completions import open_completion
from ffwd.serve.dialects.completions_models import CompletionRequest
from ffwd.serve.dialects.messages import messages_request, open_message
from ffwd.serve.dialects.messages_models import CountTokensRequest, MessagesRequest
from ffwd.serve.dialects.responses import open_response
from ffwd.serve.dialects.responses_models import ResponsesRequest
from ffwd.serve.dialects.store import ResponseStore
from ffwd.serve.errors import APIError, error_body, from_validation_error
from ffwd.serve.execute import Executor, LocalExecutor, Service
from ffwd.serve.metrics import Metrics
from ffwd.serve.middleware import Guard, tenant
from ffwd.serve.openapi import (
    ANTHROPIC_POST_RESPONSES,
    DELETE_RESPONSES,
    GET_RESPONSES,
    HEALTH_RESPONSES,
    METRICS_RESPONSE,
    POST_RESPONSES,
    install_openapi,
)
from ffwd.serve.playground import install_playground
from ffwd.serve.protocol import ChatCompletionRequest
from ffwd.serve.request import Context

_M = TypeVar("_M", bound=BaseModel)
__all__ = ["Service", "create_app"]


def create_app(
    service: Service | None = None,
    *,
    executor: Executor | None = None,
    api_key: str | None = None,
    max_queue: int = DEFAULT_MAX_QUEUE,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    metrics: Metrics | None = None,
    response_store: ResponseStore | None = None,
    cors_origins: Sequence[str] = (),
    keep_alive: int | None = None,
    access_log: AccessLog | None = None,
) -> FastAPI:
    """The API over `service` on a local worker thread (`max_queue` waiting), or `executor`.

    `response_store` keeps finished Responses API responses (a default-sized one if None);
    `cors_origins` are the browser origins allowed besides the server's own and localhost
    ones (``*``: any; `ffwd.config.resolve_cors_origins`); `keep_alive` is the HTTP
    server's idle timeout in seconds, which responses state (None: they do not);
    `access_log` writes the request lines (a default `access.AccessLog` if None).
    """
    metrics = metrics or Metrics()
    if executor is None:
        if service is None:
            raise TypeError("create_app needs a service or an executor")
        executor = LocalExecutor(service, max_queue, metrics=metrics)
    app = FastAPI(title="ffwd", docs_url=None, redoc_url=None, lifespan=_lifespan(executor))
    app.state.executor = executor
    app.state.metrics = metrics
    if executor.forward_calls() is not None:
        metrics.watch_forwards(lambda: executor.forward_calls() or 0)
    metrics.watch_draining(lambda: executor.draining)
    _error_handlers(app)
    _info_routes(app, executor, metrics)
    _openai_routes(app, executor, metrics, max_body_bytes)
    store = response_store if response_store is not None else ResponseStore()
    _responses_routes(app, executor, metrics, max_body_bytes, store)
    _messages_routes(app, executor, metrics, max_body_bytes)
    install_playground(app)
    metrics.endpoints = frozenset(r.path for r in app.routes if hasattr(r, "path"))
    install_openapi(app, {"/v1/chat/completions": ChatCompletionRequest,
                          "/v1/completions": CompletionRequest, "/v1/responses": ResponsesRequest,
                          "/v1/messages": MessagesRequest,
                          "/v1/messages/count_tokens": CountTokensRequest},
                    [executor.model_id, "default"],
                    max_tokens=executor.model_info().get("max_tokens_limit"),
                    vocab_size=executor.model_info().get("vocab_size"),
                    strict_max_tokens=bool(executor.model_info().get("strict_max_tokens")))
    app.add_middleware(Guard, metrics=metrics, api_key=api_key,
                       cors=CorsPolicy(cors_origins), keep_alive=keep_alive,
                       access_log=access_log)
    return app


def _lifespan(executor: Executor) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's life: when the server stops, the executor stops too (`close`)."""

    @asynccontextmanager
    async def life(app: FastAPI) -> AsyncIterator[None]:
        yield
        await run_in_threadpool(executor.close)

    return life


def _error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def on_api_error(request: Request, exc: APIError) -> Response:
        return JSONResponse(error_body(exc, request.url.path), status_code=exc.status,
                            headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> Response:
        code = {404: "unknown_url", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        msg = f"{request.method} {request.url.path}: {exc.detail}"
        err = APIError(exc.status_code, msg, code=code, headers=dict(exc.headers or {}))
        return JSONResponse(error_body(err, request.url.path), status_code=err.status,
                            headers=err.headers)


def _info_routes(app: FastAPI, executor: Executor, metrics: Metrics) -> None:
    @app.get("/health", responses=HEALTH_RESPONSES)
    async def health() -> Response:
        # 503 from the first shutdown signal on: probes and load balancers read the status.
        draining = executor.draining
        body = {"status": "draining" if draining else "ok", "model": executor.model_id,
                **executor.health()}
        return JSONResponse(body, status_code=503 if draining else 200)

    @app.get("/v1/models", responses=GET_RESPONSES)
    async def models() -> dict[str, Any]:
        entry = model_entry(executor)
        return {"object": "list", "data": [entry], "has_more": False,
                "first_id": entry["id"], "last_id": entry["id"]}

    @app.get("/v1/models/{model_id:path}", responses=GET_RESPONSES)
    async def model(model_id: str) -> dict[str, Any]:
        check_model(model_id, executor.model_id)
        return model_entry(executor)

    @app.get("/metrics", response_class=PlainTextResponse, responses=METRICS_RESPONSE)
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=metrics.content_type)


def _openai_routes(app: FastAPI, executor: Executor, metrics: Metrics, max_bytes: int) -> None:
    @app.post("/v1/chat/completions", responses=POST_RESPONSES)
    async def chat(request: Request) -> Response:
        req = await _parse(request, ChatCompletionRequest, max_bytes)
        check_model(req.model, executor.model_id)
        gen, writer = open_chat(req, _context(request, executor))
        return await respond(request, executor, metrics, gen, writer)

    @app.post("/v1/completions", responses=POST_RESPONSES)
    async def completions(request: Request) -> Response:
        req = await _parse(request, CompletionRequest, max_bytes)
        check_model(req.model, executor.model_id)
        gen, writer = open_completion(req, _context(request, executor))
        return await respond(request, executor, metrics, gen, writer)


def _context(request: Request, executor: Executor) -> Context:
    """What the server knows of `request` besides its body: the id the guard gave it, its
    tenant, and the served model's name (responses report it, whatever was asked)."""
    return Context(request.state.access.request_id, tenant(request.headers.raw),
                   executor.model_id)


async def _parse(request: Request, model: type[_M], max_bytes: int) -> _M:
    body = await read_json(request.stream(), request.headers.get("content-length"), max_bytes)
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise from_validation_error(exc) from None


def check_model(requested: str, served: str) -> None:
    """A 404 unless `requested` is the served model (or ``default``)."""
    if requested not in (served, "default"):  # the document's enum says the same
        raise APIError(
            404,
            f"model {requested!r} does not exist: this server serves {served!r} "
            "(or say 'default')",
            type="invalid_request_error", param="model", code="model_not_found",
        )


ENDPOINTS = ["/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages"]


def model_entry(executor: Executor) -> dict[str, Any]:
    """The served model as `/v1/models` lists it: OpenAI's fields and Anthropic's, and
    what a client can rely on (context window, tool calling, structured output, whether
    the model reasons)."""
    info = executor.model_info()
    return {
        "id": executor.model_id, "object": "model", "created": 0, "owned_by": "ffwd",
        "type": "model", "display_name": executor.model_id,
        "created_at": "1970-01-01T00:00:00Z", "aliases": ["default"],
        "context_window": info.get("context_window"), "endpoints": ENDPOINTS,
        "capabilities": {
            "tool_calling": True, "tool_choice": ["auto", "none", "required", "named"],
            "parallel_tool_calls": True,
            "guaranteed_tool_calls": bool(info.get("constrained_tool_calls")),
            "structured_output": bool(info.get("grammar")),
            "streaming": True, "logprobs": True, "vision": False,
            "reasoning": bool(info.get("reasoning")),  # the model's template reasons
            # Greedy output bit-identical however it is computed (`ffwd serve --deterministic`).
            "deterministic": bool(info.get("deterministic")),
        },
        "tool_format": info.get("tool_format"),
    }


def _responses_routes(app: FastAPI, executor: Executor, metrics: Metrics, max_bytes: int,
                      store: ResponseStore) -> None:
    @app.post("/v1/responses", responses=POST_RESPONSES)
    async def responses(request: Request) -> Response:
        req = await _parse(request, ResponsesRequest, max_bytes)
        check_model(req.model, executor.model_id)
        gen, writer = open_response(req, store, _context(request, executor))
        return await respond(request, executor, metrics, gen, writer)

    @app.get("/v1/responses/{response_id}", responses=GET_RESPONSES)
    async def get_response(request: Request, response_id: str) -> dict[str, Any]:
        stored = store.get(tenant(request.headers.raw), response_id)
        if stored is None:
            raise _no_response(response_id)
        return stored.response

    @app.delete("/v1/responses/{response_id}", responses=DELETE_RESPONSES)
    async def delete_response(request: Request, response_id: str) -> dict[str, Any]:
        if not store.delete(tenant(request.headers.raw), response_id):
            raise _no_response(response_id)
        return {"id": response_id, "object": "response", "deleted": True}


def _no_response(response_id: str) -> APIError:
    return not_found(f"no response with id {response_id!r} is stored here",
                     "response_id", "response_not_found")


def _messages_routes(app: FastAPI, executor: Executor, metrics: Metrics, max_bytes: int) -> None:
    @app.post("/v1/messages", responses=ANTHROPIC_POST_RESPONSES)
    async def messages(request: Request) -> Response:
        req = await _parse(request, MessagesRequest, max_bytes)
        check_model(req.model, executor.model_id)
        gen, writer = open_message(req, _context(request, executor))
        return await respond(request, executor, metrics, gen, writer)

    @app.post("/v1/messages/count_tokens", responses=ANTHROPIC_POST_RESPONSES)
    async def count_tokens(request: Request) -> dict[str, Any]:
        req = await _parse(request, CountTokensRequest, max_bytes)
        check_model(req.model, executor.model_id)
        gen, _ = messages_request(req, new_id("count_"))
        return {"input_tokens": await executor.count_tokens(gen)}
