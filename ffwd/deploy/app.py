"""The Ray Serve application: model replicas behind one OpenAI ingress.

`ModelReplica` holds one `ModelService` behind a `LocalExecutor`, the same
engine loop `ffwd serve` runs: each replica decodes up to ``--parallel``
requests in one forward per step. `generate(req)` yields `Accepted` once the
request is prepared and queued (or the `APIError` that refused it), then the
run's items a list per engine step, as the engine hands them over (the last
list ends with None); cancelling the call cancels the run. `count_tokens(req)`
renders a prompt there without running it. `Ingress` serves
`serve.app.create_app` (the same routes, validation, errors, SSE, auth and
metrics) over a `RayExecutor`, which sends each request through a deployment
handle, so Ray's request router picks the replica, and turns Ray's failures
into OpenAI errors: backpressure is a 429 with Retry-After, a replica that
dies under a request a 503.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any, cast

from fastapi import FastAPI
from ray import serve
from ray.exceptions import RayActorError, TaskCancelledError
from ray.serve.exceptions import BackPressureError, RequestCancelledError
from ray.serve.handle import DeploymentHandle, DeploymentResponseGenerator

from ffwd.deploy.router import StatsCollector
from ffwd.deploy.spec import DeploySpec
from ffwd.engine.core.scheduler import Item
from ffwd.serve.access import configure_logging
from ffwd.serve.app import create_app
from ffwd.serve.errors import APIError, as_api_error, server_error
from ffwd.serve.execute import Deliver, LocalExecutor, Started, queue_full
from ffwd.serve.metrics import Metrics
from ffwd.serve.request import GenerationRequest
from ffwd.serve.service import load_service

REPLICA_HEADER = "x-ffwd-replica"  # which model replica served the response


@dataclass(frozen=True, slots=True)
class Accepted:
    """The first item of a replica's answer: the request is prepared and queued there."""

    replica: str


class ModelReplica:
    """One model, its sequences decoded together: a replica of the model deployment."""

    def __init__(self, spec: DeploySpec) -> None:
        service = load_service(
            spec.model, spec.replica_engine, spec.fill, tool_format=spec.tool_format,
            chat_template=spec.chat_template,
            prompt_cache_bytes=spec.prompt_cache_bytes, limits=spec.limits,
        )
        # Ray sends at most max_ongoing requests, so this line never overflows.
        self.executor = LocalExecutor(service, spec.max_ongoing)
        self.replica = serve.get_replica_context().replica_id.unique_id

    def info(self) -> dict[str, Any]:
        return {"model_id": self.executor.model_id, "replica": self.replica,
                "model_info": self.executor.model_info()}

    async def count_tokens(self, req: GenerationRequest) -> int | APIError:
        try:
            return await self.executor.count_tokens(req)
        except APIError as exc:
            return exc  # returned, not raised: Ray would wrap it

    async def generate(self, req: GenerationRequest) -> AsyncIterator[object]:
        items: asyncio.Queue[list[Item]] = asyncio.Queue()
        try:
            started = await self.executor.start(req, items.put_nowait)
        except APIError as exc:
            yield exc
            return
        yield Accepted(self.replica)
        try:
            ended = False
            while not ended:
                batch = [self._portable(item) for item in await items.get()]
                ended = batch[-1] is None
                yield batch
        finally:
            started.job.cancel()  # the ingress cancelled the call (client gone), or we are done

    def _portable(self, item: Item) -> Item:
        """`item` as it crosses to the ingress: a failure as an `APIError` (it pickles; any
        exception may not), a result with this replica's name."""
        if isinstance(item, BaseException):
            return as_api_error(item)
        if item is not None and item.result is not None:
            item.result = replace(item.result, replica=self.replica)
        return item


def replica_lost(exc: BaseException) -> APIError:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return APIError(
        503, f"the model replica serving this request stopped ({first}); retry the request",
        type="server_error", code="replica_unavailable", headers={"Retry-After": "1"},
    )


class RayJob:
    """A request accepted by a replica: `cancel` cancels the handle call, and so the run."""

    def __init__(self, gen: DeploymentResponseGenerator[Any]) -> None:
        self.gen = gen
        self.done = threading.Event()
        self._cancelled = False

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        if not self.done.is_set():
            self._cancelled = True
            self.gen.cancel()


class RayExecutor:
    """`execute.Executor` over a model deployment handle."""

    def __init__(
        self, handle: DeploymentHandle, model_id: str,
        on_depth: Callable[[int], None] | None = None, info: dict[str, Any] | None = None,
    ) -> None:
        self.handle = handle.options(stream=True)
        self.plain = handle
        self.model_id = model_id
        self.info = info or {}
        self._on_depth = on_depth
        self._waiting = 0  # sent, not accepted by a replica yet
        self._running = 0  # accepted, not finished
        self._pumps: set[asyncio.Task[None]] = set()

    def forward_calls(self) -> int | None:
        return None  # the model runs in the replicas' processes

    def health(self) -> dict[str, Any]:
        return {"queue_depth": self._waiting, "running": self._running > 0,
                "on_replicas": self._running}

    def model_info(self) -> dict[str, Any]:
        return dict(self.info)

    def close(self) -> None:
        """Nothing to stop here: the replicas are Ray's."""

    async def count_tokens(self, req: GenerationRequest) -> int:
        try:
            count = await self.plain.count_tokens.remote(req)
        except BackPressureError as exc:
            raise queue_full(f"the server is busy: {exc}; retry later") from None
        except RayActorError as exc:
            raise replica_lost(exc) from None
        if isinstance(count, APIError):
            raise count
        return int(count)

    def _count(self, delta: int) -> None:
        self._waiting += delta
        if self._on_depth is not None:
            self._on_depth(self._waiting)

    async def start(self, req: GenerationRequest, deliver: Deliver) -> Started:
        gen = cast(DeploymentResponseGenerator[Any], self.handle.generate.remote(req))
        self._count(+1)
        try:
            first = await gen.__anext__()
        except BackPressureError as exc:
            raise queue_full(f"the server is busy: {exc}; retry later") from None
        except RayActorError as exc:
            raise replica_lost(exc) from None
        except BaseException:
            gen.cancel()
            raise
        finally:
            self._count(-1)
        if isinstance(first, APIError):
            raise first
        if not isinstance(first, Accepted):
            raise server_error(f"unexpected first reply from a replica: {first!r}")
        job = RayJob(gen)
        pump = asyncio.get_running_loop().create_task(self._pump(job, deliver))
        self._pumps.add(pump)  # keep a reference until it is done
        pump.add_done_callback(self._pumps.discard)
        return Started(job, headers={REPLICA_HEADER: first.replica})

    async def _pump(self, job: RayJob, deliver: Deliver) -> None:
        """Move a replica's lists to the app; a failure as an error; then the end (once)."""
        self._running += 1
        ended = False
        try:
            async for batch in job.gen:
                ended = batch[-1] is None
                deliver(batch)
        except (RequestCancelledError, TaskCancelledError, asyncio.CancelledError):
            pass  # cancelled by the app: nobody reads on
        except RayActorError as exc:
            deliver([replica_lost(exc)])
        except Exception as exc:
            deliver([exc])
        finally:
            self._running -= 1
            job.done.set()
            if not ended:
                deliver([None])


class Ingress:
    """The HTTP entry: `create_app` over a `RayExecutor` (built on the ingress replica)."""

    # Serve awaits an async constructor; the model id comes from a replica.
    async def __init__(self, model: DeploymentHandle, spec: DeploySpec) -> None:  # type: ignore[misc]
        info = await model.info.remote()
        self.metrics = Metrics()
        self.metrics.registry.register(StatsCollector())
        self.executor = RayExecutor(model, info["model_id"], self.metrics.queue_depth.set,
                                    info=info.get("model_info"))
        self.api_key = spec.api_key
        self.max_body_bytes = spec.max_body_bytes
        self.cors_origins = spec.cors_origins
        self.keep_alive = spec.keep_alive  # the proxy's (`DeploySpec.http_options`)
        configure_logging(spec.log_format)  # one line per request, in this actor's log

    def __serve_build_asgi_app__(self) -> FastAPI:
        return create_app(executor=self.executor, api_key=self.api_key,
                          max_body_bytes=self.max_body_bytes, metrics=self.metrics,
                          cors_origins=self.cors_origins, keep_alive=self.keep_alive)


def build_app(spec: DeploySpec) -> Any:
    """The Serve application for `spec` (a `serve.Application`: `serve.run` it)."""
    model = serve.deployment(**spec.model_options())(ModelReplica)
    ingress = serve.deployment(**spec.ingress_options())(serve.ingress()(Ingress))
    return ingress.bind(model.bind(spec), spec)


def app_builder(args: dict[str, Any]) -> Any:
    """`import_path` of a Serve config file: `args` as `ffwd deploy config` prints them."""
    return build_app(DeploySpec.from_args(args))
