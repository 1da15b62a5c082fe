"""Browser origins (issue 32 item 4): who may call the API from a web page, as a browser
asks (the preflight, then the request with its Origin), on the HTTP layer (scripted
service); the setting, its flag and its way to replicas."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ffwd.cli.args import add_scale_arguments, add_service_arguments, deploy_spec
from ffwd.config import EngineConfig, FillConfig, resolve_cors_origins
from ffwd.deploy.spec import DeploySpec
from ffwd.serve.app import create_app
from tests.unit.test_serve_app import CHAT, Scripted

URL = "/v1/chat/completions"
ASKS = {"Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os"}
LOCAL = ("http://localhost:5173", "https://127.0.0.1:8443", "http://[::1]:3000",
         "http://app.localhost")
FOREIGN = ("https://evil.example", "http://10.0.0.5:3000", "null", "http://localhost.evil.io")


def client(origins: Sequence[str] = (), api_key: str | None = None) -> TestClient:
    return TestClient(create_app(Scripted(), cors_origins=origins, api_key=api_key))


def cors_headers(r: Any) -> dict[str, str]:
    return {k: v for k, v in r.headers.items() if k.startswith("access-control-")}


def preflight(c: TestClient, origin: str, path: str = URL) -> Any:
    return c.options(path, headers={"Origin": origin, **ASKS})


@pytest.mark.parametrize("origin", LOCAL)
def test_a_local_page_is_allowed_by_default(origin: str) -> None:
    with client() as c:
        r = preflight(c, origin)
        assert r.status_code == 204 and r.content == b""
        assert cors_headers(r) == {
            "access-control-allow-origin": origin,
            "access-control-allow-methods": "GET, POST, DELETE, OPTIONS",
            "access-control-allow-headers": "authorization, content-type, x-stainless-os",
            "access-control-max-age": "600",
            "access-control-expose-headers": "x-request-id, request-id, retry-after"}
        assert r.headers["vary"] == "Origin"
        r = c.post(URL, json=CHAT, headers={"Origin": origin})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin


@pytest.mark.parametrize("origin", FOREIGN)
def test_any_other_page_is_refused_without_cors_headers(origin: str) -> None:
    with client() as c:
        for r in (preflight(c, origin), c.post(URL, json=CHAT, headers={"Origin": origin}),
                  c.post("/v1/messages", json=CHAT, headers={"Origin": origin})):
            assert r.status_code == 403 and cors_headers(r) == {}, r.text
            error = r.json()["error"]
            assert error["code"] == "origin_not_allowed" and repr(origin) in error["message"]
            assert "--cors-origins" in error["message"]
        # Refused before the model: a browser sends a page's plain POST and only hides
        # the reply, so the refusal is what keeps the model from working for it.
        assert 'endpoint="/v1/chat/completions",status="200"' not in c.get("/metrics").text


def test_the_servers_own_pages_and_clients_without_origin_are_not_cross_origin() -> None:
    with client() as c:
        # The playground: Origin is the server's own (its Host), or the browser says so.
        for headers in ({"Origin": "http://testserver"},
                        {"Origin": "https://ffwd.example", "Sec-Fetch-Site": "same-origin"},
                        {}):
            r = c.post(URL, json=CHAT, headers=headers)
            assert r.status_code == 200 and cors_headers(r) == {}, headers
        assert c.get("/", headers={"Origin": "http://testserver"}).status_code == 200
        # Pretending to be same-origin from elsewhere does not help a browser's page.
        r = c.post(URL, json=CHAT, headers={"Origin": "https://evil.example",
                                            "Sec-Fetch-Site": "cross-site"})
        assert r.status_code == 403


def test_listed_origins_and_any() -> None:
    with client(["https://app.example.com"]) as c:
        assert preflight(c, "https://app.example.com").status_code == 204
        assert preflight(c, "http://localhost:3000").status_code == 204  # still allowed
        assert preflight(c, "https://other.example.com").status_code == 403
    with client(["*"]) as c:
        r = preflight(c, "https://anywhere.example")
        assert r.status_code == 204
        assert r.headers["access-control-allow-origin"] == "https://anywhere.example"


def test_a_preflight_needs_no_key_and_a_refused_key_is_readable_by_the_page() -> None:
    with client(api_key="s3cret") as c:
        # Browsers never send credentials with a preflight.
        assert preflight(c, "http://localhost:3000").status_code == 204
        r = c.post(URL, json=CHAT, headers={"Origin": "http://localhost:3000"})
        assert r.status_code == 401  # ... and the page can read why
        assert r.headers["access-control-allow-origin"] == "http://localhost:3000"
        ok = c.post(URL, json=CHAT, headers={"Origin": "http://localhost:3000",
                                             "Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and "x-request-id" in ok.headers
        # A foreign page learns nothing, not even whether the key is right.
        r = c.post(URL, json=CHAT, headers={"Origin": "https://evil.example",
                                            "Authorization": "Bearer s3cret"})
        assert r.status_code == 403


def test_an_options_request_that_is_no_preflight_is_what_it_was() -> None:
    with client() as c:
        assert c.options(URL).status_code == 405
        r = c.options(URL, headers={"Origin": "http://localhost:3000"})  # no method asked
        assert r.status_code == 405 and r.headers["access-control-allow-origin"]


def test_the_setting_is_read_and_checked_in_one_place() -> None:
    assert resolve_cors_origins(env={}) == ()
    assert resolve_cors_origins(env={"FFWD_CORS_ORIGINS": " * "}) == ("*",)
    assert resolve_cors_origins("https://A.example:443/,http://b.example:80",
                                env={"FFWD_CORS_ORIGINS": "*"}) == (
        "https://a.example", "http://b.example")  # the flag wins, normalized as browsers send
    for bad in ("a.example", "https://a.example/api", "*, https://a.example", "ftp://"):
        with pytest.raises(ValueError, match="FFWD_CORS_ORIGINS"):
            resolve_cors_origins(bad, env={})


def test_the_flag_reaches_replicas_through_the_deploy_spec() -> None:
    import argparse

    p = argparse.ArgumentParser()
    add_service_arguments(p)
    add_scale_arguments(p, join=True)
    args = p.parse_args(["--replicas", "2", "--cors-origins", "https://app.example.com"])
    spec = deploy_spec(args, FillConfig(), EngineConfig())
    assert spec.cors_origins == ("https://app.example.com",)
    back = DeploySpec.from_args(spec.to_args())
    assert back.cors_origins == ("https://app.example.com",)
    assert DeploySpec.from_args(DeploySpec().to_args()).cors_origins == ()
