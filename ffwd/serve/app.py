"""The HTTP app: routes, the error shape, the API key guard, the OpenAPI document.

It owns no decoding logic. Each generation route validates its body with its
dialect (`ffwd.serve.dialects`), which translates it into a
`GenerationRequest`; an `execute.Executor` prepares and runs that request and
`delivery.respond` hands the events back to the dialect's writer. By default
the executor is a `LocalExecutor` over a `Service` on this process's worker
thread; under `ffwd.deploy` it is a Ray Serve replica. `create_app` is the one
app factory for both.
"""

from __future__ import annotations

from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from ffwd.config import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_QUEUE
from ffwd.serve.body import read_json
from ffwd.serve.delivery import respond
from ffwd.serve.dialects.chat import ChatReply, chat_request, text_request
from ffwd.serve.errors import APIError, from_validation_error
from ffwd.serve.execute import Executor, LocalExecutor, Service
from ffwd.serve.metrics import Metrics
from ffwd.serve.middleware import Guard
from ffwd.serve.openapi import GET_RESPONSES, METRICS_RESPONSE, POST_RESPONSES, install_openapi
from ffwd.serve.playground import install_playground
from ffwd.serve.protocol import ChatCompletionRequest, CompletionRequest

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
) -> FastAPI:
    """The API over `service` on a local worker thread (`max_queue` waiting), or `executor`."""
    metrics = metrics or Metrics()
    if executor is None:
        if service is None:
            raise TypeError("create_app needs a service or an executor")
        executor = LocalExecutor(service, max_queue, on_depth=metrics.queue_depth.set)
    app = FastAPI(title="ffwd", docs_url=None, redoc_url=None)
    app.state.executor = executor
    app.state.metrics = metrics
    if executor.forward_calls() is not None:
        metrics.watch_forwards(lambda: executor.forward_calls() or 0)
    _error_handlers(app)
    _info_routes(app, executor, metrics)
    _openai_routes(app, executor, metrics, max_body_bytes)
    install_playground(app)
    metrics.endpoints = frozenset(r.path for r in app.routes if hasattr(r, "path"))
    install_openapi(app, {"/v1/chat/completions": ChatCompletionRequest,
                          "/v1/completions": CompletionRequest}, [executor.model_id, "default"])
    app.add_middleware(Guard, metrics=metrics, api_key=api_key)
    return app


def _error_handlers(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def on_api_error(request: Request, exc: APIError) -> Response:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> Response:
        code = {404: "unknown_url", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        msg = f"{request.method} {request.url.path}: {exc.detail}"
        err = APIError(exc.status_code, msg, code=code, headers=dict(exc.headers or {}))
        return JSONResponse(err.body(), status_code=err.status, headers=err.headers)


def _info_routes(app: FastAPI, executor: Executor, metrics: Metrics) -> None:
    @app.get("/health", responses=GET_RESPONSES)
    async def health() -> dict[str, Any]:
        return {"status": "ok", "model": executor.model_id, **executor.health()}

    @app.get("/v1/models", responses=GET_RESPONSES)
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": executor.model_id, "object": "model", "created": 0,
                      "owned_by": "ffwd"}],
        }

    @app.get("/metrics", response_class=PlainTextResponse, responses=METRICS_RESPONSE)
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=metrics.content_type)


def _openai_routes(app: FastAPI, executor: Executor, metrics: Metrics, max_bytes: int) -> None:
    @app.post("/v1/chat/completions", responses=POST_RESPONSES)
    async def chat(request: Request) -> Response:
        req = await _parse(request, ChatCompletionRequest, max_bytes)
        check_model(req.model, executor.model_id)
        req.check()
        reply = ChatReply("chat", req.model, logprobs=req.logprob_count is not None,
                          include_usage=req.include_usage)
        return await respond(request, executor, metrics, chat_request(req, reply.id), reply)

    @app.post("/v1/completions", responses=POST_RESPONSES)
    async def completions(request: Request) -> Response:
        req = await _parse(request, CompletionRequest, max_bytes)
        check_model(req.model, executor.model_id)
        req.check()
        reply = ChatReply("text", req.model, logprobs=req.logprob_count is not None,
                          echo=req.prompt_text if req.echo else "",
                          include_usage=req.include_usage)
        return await respond(request, executor, metrics, text_request(req, reply.id), reply)


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
