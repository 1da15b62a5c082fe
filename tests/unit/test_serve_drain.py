"""The first shutdown signal (issue 52): from then on `/health` answers 503 with
``"status": "draining"`` (readiness probes and load balancers read the status code),
`/metrics` says ``ffwd_draining 1``, and new requests get the drain's 503; the drain itself
runs on its own thread, after."""

from __future__ import annotations

import signal
import threading
from typing import Any

import uvicorn
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator

from ffwd.engine.core.scheduler import Drained
from ffwd.serve.app import create_app
from ffwd.serve.execute import LocalExecutor
from ffwd.serve.server import DrainingServer
from tests.unit.test_serve_app import CHAT, Scripted


class HeldDrain:
    """The executor, its drain held until `go` is set: what the signal itself does shows."""

    def __init__(self, executor: LocalExecutor) -> None:
        self.executor = executor
        self.go = threading.Event()
        self.drained: list[Drained] = []

    def stop_taking(self) -> None:
        self.executor.stop_taking()

    def drain(self, grace_s: float) -> Drained:
        self.go.wait(30)
        self.drained.append(self.executor.drain(grace_s))
        return self.drained[-1]


def health_schema_valid(client: TestClient, body: Any, status: int) -> bool:
    doc = client.get("/openapi.json").json()
    response = doc["paths"]["/health"]["get"]["responses"][str(status)]
    schema = {**response["content"]["application/json"]["schema"],
              "components": doc["components"]}
    return bool(Draft202012Validator(schema).is_valid(body))


def test_health_and_metrics_say_draining_from_the_first_signal() -> None:
    app = create_app(Scripted())
    with TestClient(app) as c:
        ok = c.get("/health")
        assert ok.status_code == 200 and ok.json()["status"] == "ok"
        assert health_schema_valid(c, ok.json(), 200)
        assert "ffwd_draining 0.0" in c.get("/metrics").text
        held = HeldDrain(app.state.executor)
        server = DrainingServer(uvicorn.Config(app), held, grace=0.5)
        server.handle_exit(signal.SIGTERM, None)  # the drain's thread waits on `go`
        r = c.get("/health")
        assert r.status_code == 503 and r.json()["status"] == "draining", r.text
        assert health_schema_valid(c, r.json(), 503)
        assert c.head("/health").status_code == 503
        assert "ffwd_draining 1.0" in c.get("/metrics").text
        late = c.post("/v1/chat/completions", json=CHAT)  # the first request, after it
        assert late.status_code == 503 and late.headers["retry-after"] == "1"
        assert late.json()["error"]["code"] == "server_shutting_down"
        assert not server.should_exit  # uvicorn goes on serving until the drain is done
        held.go.set()
        for _ in range(500):
            if server.should_exit:
                break
            threading.Event().wait(0.01)
        assert server.should_exit and held.drained == [Drained(0, 0, 1)]
        assert c.get("/health").status_code == 503  # still draining: for good
