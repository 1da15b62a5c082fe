"""Keep-alive longer than the clients': the setting (FFWD_KEEP_ALIVE, --keep-alive-timeout),
the ``Keep-Alive: timeout=N`` every response on a connection that stays open carries, and
the same timeout under Ray Serve (the proxy's option and the ingress's header). The live
server's reuse after an idle gap is in tests/integration/test_keep_alive.py."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import pytest
import yaml
from fastapi.testclient import TestClient
from ray.serve.config import HTTPOptions
from ray.serve.schema import ServeDeploySchema

from ffwd.cli.args import (
    add_scale_arguments,
    add_service_arguments,
    deploy_spec,
    resolve_settings,
)
from ffwd.config import DEFAULT_KEEP_ALIVE, SettingError, resolve_keep_alive
from ffwd.deploy.app import Ingress
from ffwd.deploy.config import render_config
from ffwd.deploy.spec import DeploySpec
from ffwd.serve.app import create_app
from tests.unit.test_serve_access import logging_to
from tests.unit.test_serve_app import Scripted

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}


def test_the_setting_a_flag_wins_and_a_bad_value_names_the_variable() -> None:
    assert resolve_keep_alive(env={}) == DEFAULT_KEEP_ALIVE
    assert resolve_keep_alive(env={"FFWD_KEEP_ALIVE": " 75 "}) == 75
    assert resolve_keep_alive("30", env={"FFWD_KEEP_ALIVE": "75"}) == 30
    for bad in ("0", "-5", "1.5", "soon", "86401"):
        with pytest.raises(SettingError, match=r"FFWD_KEEP_ALIVE=.*from 1 to 86400"):
            resolve_keep_alive(bad, env={})
    with pytest.raises(SettingError, match="FFWD_KEEP_ALIVE"):
        resolve_keep_alive(env={"FFWD_KEEP_ALIVE": "forever"})


def test_the_default_outlasts_the_clients_idle_timeouts() -> None:
    # httpx (the openai and anthropic SDKs) 5 s, Go's and reqwest's 90 s, curl's 118 s:
    # a client must give an idle connection up before the server closes it.
    assert DEFAULT_KEEP_ALIVE > 118


def test_every_kind_of_response_says_how_long_the_connection_stays() -> None:
    with TestClient(create_app(Scripted(), api_key="k", keep_alive=65)) as c:
        auth = {"Authorization": "Bearer k"}
        for r in (c.get("/health"), c.post("/v1/chat/completions", json=CHAT, headers=auth),
                  c.post("/v1/chat/completions", json={**CHAT, "stream": True}, headers=auth),
                  c.post("/v1/chat/completions", json={"model": 1}, headers=auth),
                  c.get("/v1/models"), c.get("/v1/nope", headers=auth)):
            assert r.headers["keep-alive"] == "timeout=65", (r.request.url, r.status_code)
        # A client closing the connection after this request hears no promise about it.
        r = c.get("/health", headers={"Connection": "close"})
        assert r.status_code == 200 and "keep-alive" not in r.headers


def test_no_header_where_the_app_does_not_know_the_servers_timeout() -> None:
    with TestClient(create_app(Scripted())) as c:
        assert "keep-alive" not in c.get("/health").headers


async def _asgi_get(app: Any, http_version: str, headers: list[tuple[bytes, bytes]]
                    ) -> list[tuple[bytes, bytes]]:
    """The response headers of GET /health sent to `app` as `http_version`."""
    scope = {"type": "http", "http_version": http_version, "method": "GET", "path": "/health",
             "raw_path": b"/health", "query_string": b"", "headers": headers,
             "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 8000), "scheme": "http",
             "root_path": ""}
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return list(sent[0]["headers"])


def test_http_1_0_and_http_2_get_no_keep_alive_header() -> None:
    app = create_app(Scripted(), keep_alive=65)
    for version, want in (("1.1", True), ("1.0", False), ("2", False)):
        headers = asyncio.run(_asgi_get(app, version, [(b"host", b"x")]))
        assert ((b"keep-alive", b"timeout=65") in headers) is want, version


def parsed(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_service_arguments(p)
    add_scale_arguments(p, join=False)
    return p.parse_args(list(argv))


def test_ray_serve_gets_the_same_timeout_in_its_proxy_and_its_header() -> None:
    args = parsed("--keep-alive-timeout", "75", "--replicas", "2")
    spec = deploy_spec(args, *resolve_settings(args))
    assert spec.keep_alive == 75
    assert HTTPOptions(**spec.http_options()).keep_alive_timeout_s == 75
    doc = yaml.safe_load(render_config(spec))
    assert doc["http_options"]["keep_alive_timeout_s"] == 75
    app = ServeDeploySchema.model_validate(doc).applications[0]
    assert DeploySpec.from_args(app.args).keep_alive == 75
    assert DeploySpec().http_options()["keep_alive_timeout_s"] == DEFAULT_KEEP_ALIVE
    with pytest.raises(ValueError, match="FFWD_KEEP_ALIVE"):
        DeploySpec.from_args({"keep_alive": 0})


class _Model:
    """The model deployment's handle as the ingress's constructor uses it."""

    def __init__(self) -> None:
        self.info = self

    def options(self, **kw: Any) -> _Model:
        return self

    async def remote(self) -> dict[str, Any]:
        return {"model_id": "tiny"}


def test_the_ingress_states_the_proxys_timeout() -> None:
    ingress = Ingress.__new__(Ingress)
    with logging_to("text"):  # the ingress configures ffwd's log: restored after
        asyncio.run(ingress.__init__(_Model(), DeploySpec(keep_alive=75)))  # type: ignore[arg-type]
        with TestClient(ingress.__serve_build_asgi_app__()) as c:
            assert c.get("/health").headers["keep-alive"] == "timeout=75"
