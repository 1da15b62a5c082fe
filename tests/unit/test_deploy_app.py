"""The deployment's pieces without a cluster: spec and config file, the replica's
answer protocol, and the ingress executor's mapping of Ray failures to OpenAI errors."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from ray.exceptions import ActorDiedError
from ray.serve.exceptions import BackPressureError
from ray.serve.schema import ServeDeploySchema

from ffwd.config import TokenLimits, resolve_scale_config
from ffwd.deploy.app import REPLICA_HEADER, Accepted, ModelReplica, RayExecutor
from ffwd.deploy.config import render_config
from ffwd.deploy.spec import ROUTER_CLASS, DeploySpec
from ffwd.engine.events import TokenEvent
from ffwd.serve.app import create_app
from ffwd.serve.dialects.chat import parse_chat
from ffwd.serve.errors import APIError, bad_request
from ffwd.serve.execute import LocalExecutor
from ffwd.serve.request import GenerationRequest
from tests.unit.scripted import STEP, ScriptedModel, result, text

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
FIN = result("Hello", prompt=5, completion=1, forward_calls=1)


# --- spec and config file ------------------------------------------------------
def test_scale_settings_are_validated_by_flag_name() -> None:
    assert resolve_scale_config({"min_replicas": "2", "max_replicas": "4"}).replicas == 2
    for bad, needle in [({"replicas": "0"}, "--replicas"),
                        ({"replica_cpus": "-1"}, "--replica-cpus"),
                        ({"router": "random"}, "affine|pow2"),
                        ({"min_replicas": 3, "max_replicas": 2}, "exceeds"),
                        ({"replicas": 5, "max_replicas": 2}, "start count")]:
        with pytest.raises(ValueError, match=needle):
            resolve_scale_config(bad)


def test_config_file_is_a_valid_serve_config_and_round_trips() -> None:
    scale = resolve_scale_config({"replicas": "2", "max_replicas": "6", "replica_cpus": "2"})
    spec = DeploySpec(scale=scale, host="0.0.0.0", max_queue=8, limits=TokenLimits(300, 900))
    doc = yaml.safe_load(render_config(spec))
    app = ServeDeploySchema.model_validate(doc).applications[0]
    model, ingress = app.deployments
    assert model.autoscaling_config["max_replicas"] == 6  # type: ignore[index]
    assert model.ray_actor_options.num_cpus == 2 and model.max_queued_requests == 8
    assert model.request_router_config["request_router_class"] == ROUTER_CLASS  # type: ignore[index]
    assert ingress.ray_actor_options.num_cpus == 0
    back = DeploySpec.from_args(app.args)
    assert back.engine.threads == 2  # a replica's torch threads follow its CPUs
    assert (back.fill, back.max_queue, back.model) == (spec.fill, 8, "default")
    assert back.limits == TokenLimits(300, 900)  # every replica bounds its requests alike
    with pytest.raises(ValueError, match="unknown ffwd args"):
        DeploySpec.from_args({"modle": "default"})
    with pytest.raises(ValueError, match="FFWD_FILL"):
        DeploySpec.from_args({"fill": {"fill": "fast"}})
    with pytest.raises(ValueError, match="FFWD_FILL"):
        DeploySpec.from_args({"fill": {"mode": "fast"}})


def test_pow2_router_is_rays_default() -> None:
    spec = DeploySpec(scale=resolve_scale_config({"router": "pow2"}))
    assert "request_router_config" not in spec.model_options()
    assert spec.model_options()["num_replicas"] == 1


# --- the replica's answer --------------------------------------------------------
class Service(ScriptedModel):
    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def prepare(self, req: GenerationRequest) -> Any:
        if req.messages[0]["content"] == "bad":
            raise bad_request("no", param="messages")
        return req

    def run(self, prepared: Any, cancelled: Callable[[], bool]) -> Iterator[Any]:
        yield text("Hello")
        yield STEP
        if self.fail:
            raise RuntimeError("boom")
        yield FIN


def replica(service: Service) -> ModelReplica:
    rep = ModelReplica.__new__(ModelReplica)
    rep.executor = LocalExecutor(service, 2)
    rep.replica = "r1"
    return rep


async def collect(gen: AsyncIterator[object]) -> list[object]:
    return [item async for item in gen]


def test_replica_answers_accepted_then_each_steps_events() -> None:
    req = parse_chat(CHAT)
    first, *steps = asyncio.run(collect(replica(Service()).generate(req)))
    assert first == Accepted("r1") and all(isinstance(s, list) for s in steps)
    hello, last, end = [item for step in steps for item in step]  # type: ignore[attr-defined]
    assert hello == text("Hello") and end is None and steps[-1][-1] is None
    assert isinstance(last, TokenEvent) and last.result is not None
    assert last.result.ffwd_block()["replica"] == "r1"
    bad = parse_chat({"messages": [{"role": "user", "content": "bad"}]})
    (err,) = asyncio.run(collect(replica(Service()).generate(bad)))
    assert isinstance(err, APIError) and err.status == 400
    failed = asyncio.run(collect(replica(Service(fail=True)).generate(req)))
    assert isinstance(failed[-1][-2], APIError) and failed[-1][-2].status == 500


# --- the ingress over a scripted handle --------------------------------------------
class Gen:
    """A scripted DeploymentResponseGenerator: items, an exception where one is given."""

    def __init__(self, items: list[object]) -> None:
        self.items = items
        self.cancelled = False

    def __aiter__(self) -> Gen:
        return self

    async def __anext__(self) -> object:
        await asyncio.sleep(0)
        if not self.items:
            raise StopAsyncIteration
        item = self.items.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item

    def cancel(self) -> None:
        self.cancelled = True


class Handle:
    def __init__(self, script: list[object]) -> None:
        self.script = script
        self.calls: list[Gen] = []
        self.generate = self

    def options(self, **kw: Any) -> Handle:
        return self

    def remote(self, req: Any) -> Gen:
        self.calls.append(Gen(list(self.script)))
        return self.calls[-1]


@pytest.fixture
def ingress() -> Iterator[Callable[[list[object]], TestClient]]:
    clients: list[TestClient] = []

    def make(script: list[object]) -> TestClient:
        c = TestClient(create_app(executor=RayExecutor(Handle(script), "tiny")))  # type: ignore[arg-type]
        clients.append(c.__enter__())
        return c

    yield make
    for c in clients:
        c.__exit__(None, None, None)


def test_ingress_serves_a_replica_answer(ingress: Callable[[list[object]], TestClient]) -> None:
    c = ingress([Accepted("r7"), [text("Hello")], [FIN, None]])
    r = c.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 200 and r.headers[REPLICA_HEADER] == "r7"
    assert r.json()["choices"][0]["message"]["content"] == "Hello"
    assert c.get("/v1/models").json()["data"][0]["id"] == "tiny"


@pytest.mark.parametrize(("first", "status", "code"), [
    (bad_request("no", param="messages"), 400, "invalid_value"),
    (BackPressureError(num_queued_requests=4, max_queued_requests=4), 429, "queue_full"),
    (ActorDiedError(), 503, "replica_unavailable"),
])
def test_refusals_before_acceptance(ingress: Callable[[list[object]], TestClient],
                                    first: BaseException, status: int, code: str) -> None:
    r = ingress([first]).post("/v1/chat/completions", json=CHAT)
    assert r.status_code == status and r.json()["error"]["code"] == code
    if status in (429, 503):
        assert r.headers["retry-after"] == "1"


def test_a_replica_dying_mid_request_is_503(
    ingress: Callable[[list[object]], TestClient],
) -> None:
    c = ingress([Accepted("r7"), [text("Hel")], ActorDiedError()])
    r = c.post("/v1/chat/completions", json=CHAT)
    assert r.status_code == 503 and r.json()["error"]["type"] == "server_error"
    r = c.post("/v1/chat/completions", json={**CHAT, "stream": True})
    events = [json.loads(b[6:]) for b in r.text.strip().split("\n\n") if b != "data: [DONE]"]
    assert events[-1]["error"]["code"] == "replica_unavailable"
    assert r.text.endswith("data: [DONE]\n\n")


def test_cancel_reaches_the_handle_call() -> None:
    handle = Handle([Accepted("r1"), [text("a")], [text("b")]])
    ex = RayExecutor(handle, "tiny")  # type: ignore[arg-type]
    got: list[object] = []

    async def go() -> None:
        ended = asyncio.Event()

        def deliver(items: list[Any]) -> None:
            got.extend(items)
            if items[-1] is None:
                ended.set()

        started = await ex.start(parse_chat(CHAT), deliver)
        started.job.cancel()
        await ended.wait()
        assert started.job.cancelled and started.job.done.is_set()

    asyncio.run(go())
    assert handle.calls[0].cancelled
    assert ex.health() == {"queue_depth": 0, "running": False, "on_replicas": 0}
