"""What an operator reads, over a scripted service: a request id on every response (the
client's own when plain), one log line per request naming it, in text or JSON, and the
served model's name in every response's ``model``."""

from __future__ import annotations

import io
import json
import logging
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ffwd.cli import main as ffwd_main
from ffwd.config import resolve_log_format
from ffwd.serve.access import configure_logging
from ffwd.serve.app import create_app
from tests.unit.agent_service import AgentService, sse_events
from tests.unit.scripted import result, text
from tests.unit.test_serve_app import Scripted, sse

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = {"model": "tiny", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}


def access_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    """The request lines' fields, as they were logged."""
    return [r.__dict__["fields"] for r in caplog.records if r.name == "ffwd.access"]


@contextmanager
def logging_to(fmt: str) -> Iterator[io.StringIO]:
    """`configure_logging(fmt)` into a string for the block, then ffwd's loggers as before."""
    ffwd, access = logging.getLogger("ffwd"), logging.getLogger("ffwd.access")
    saved = (ffwd.handlers[:], ffwd.level, ffwd.propagate, access.level)
    stream = io.StringIO()
    configure_logging(fmt, stream)
    try:
        yield stream
    finally:
        ffwd.handlers[:], ffwd.propagate = saved[0], saved[2]
        ffwd.setLevel(saved[1])
        access.setLevel(saved[3])


def served(**app: Any) -> TestClient:
    service = AgentService([text("Hello"), text(" world"),
                            result("Hello world", prompt=12, completion=4, cached=8, injected=3)])
    return TestClient(create_app(service, **app))


def test_every_response_carries_its_request_id() -> None:
    with served(api_key="k") as c:
        ids = set()
        for method, path in (("GET", "/health"), ("GET", "/v1/models"), ("GET", "/nope"),
                             ("POST", "/v1/chat/completions"), ("POST", "/v1/messages")):
            r = c.request(method, path, json=CHAT, headers={"Authorization": "Bearer k"})
            rid = r.headers["x-request-id"]
            assert re.fullmatch(r"req_[0-9a-f]{24}", rid), (path, rid)
            # Anthropic's own header, on its routes only
            assert r.headers.get("request-id") == (rid if path == "/v1/messages" else None)
            ids.add(rid)
        assert len(ids) == 5
        assert c.get("/v1/models").headers["x-request-id"].startswith("req_")  # a 401 too


def test_a_plain_client_request_id_is_kept_and_anything_else_replaced() -> None:
    with served() as c:
        for sent, kept in (("trace-7f.a:1", True), ("two words", False), ("x" * 129, False),
                           ("", False)):
            got = c.post("/v1/chat/completions", json=CHAT,
                         headers={"x-request-id": sent}).headers["x-request-id"]
            assert (got == sent) is kept, (sent, got)


def test_one_line_per_request_with_its_numbers(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ffwd.access")
    with served() as c:
        t0 = time.perf_counter()
        whole = c.post("/v1/chat/completions", json=CHAT)
        streamed = c.post("/v1/chat/completions", json={**CHAT, "stream": True})
        wall_ms = (time.perf_counter() - t0) * 1000
        c.get("/health")
        bad = c.post("/v1/chat/completions", json={**CHAT, "n": 2})
    lines = access_lines(caplog)
    numbers = {"prompt_tokens": 12, "cached_tokens": 8, "completion_tokens": 4,
               "injected_tokens": 3, "fill_share": 0.75}
    assert [line["request_id"] for line in lines] == [
        r.headers["x-request-id"] for r in (whole, streamed)] + [lines[2]["request_id"],
                                                                bad.headers["x-request-id"]]
    for line in lines[:2]:
        assert line.items() >= {"method": "POST", "path": "/v1/chat/completions",
                                "status": 200, **numbers}.items()
        assert 0 < line["duration_ms"] <= wall_ms  # the server's own time, in ms
    assert lines[2].items() >= {"method": "GET", "path": "/health", "status": 200}.items()
    assert lines[3]["status"] == 400 and "prompt_tokens" not in lines[3]


def test_the_line_in_text_and_in_json() -> None:
    for fmt in ("text", "json"):
        with logging_to(fmt) as stream, served() as c:
            rid = c.post("/v1/chat/completions", json=CHAT).headers["x-request-id"]
        (out,) = stream.getvalue().splitlines()
        if fmt == "json":
            obj = json.loads(out)
            assert obj["logger"] == "ffwd.access" and "message" not in obj
            line = {k: str(v) for k, v in obj.items()}
        else:  # "<time> ffwd.access: key=value key=value ..."
            line = dict(p.split("=", 1) for p in out.split(" ffwd.access: ", 1)[1].split(" "))
        assert line["request_id"] == rid and line["status"] == "200"
        assert line["completion_tokens"] == "4" and line["fill_share"] == "0.75"


def test_a_failed_generation_names_its_request_id() -> None:
    with logging_to("json") as stream, TestClient(create_app(Scripted(fail=True))) as c:
        r = c.post("/v1/chat/completions", json=CHAT, headers={"x-request-id": "abc-1"})
    assert r.status_code == 500 and r.headers["x-request-id"] == "abc-1"
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    failed = [rec for rec in records if rec["logger"] == "ffwd.engine"]
    assert failed[0]["request_id"] == "abc-1" and "RuntimeError: boom" in failed[0]["traceback"]
    assert [rec["status"] for rec in records if rec["logger"] == "ffwd.access"] == [500]


def test_responses_name_the_served_model_whatever_was_asked() -> None:
    with served() as c:
        for stream in (False, True):
            body = {"stream": stream, "model": "default"}
            chat = c.post("/v1/chat/completions", json={**CHAT, **body})
            comp = c.post("/v1/completions", json={"prompt": "x", **body})
            if not stream:
                assert chat.json()["model"] == comp.json()["model"] == "tiny"
            else:
                models = {ch["model"] for ch in sse(chat.text)[:-1]}
                assert models == {ch["model"] for ch in sse(comp.text)[:-1]} == {"tiny"}
            resp = c.post("/v1/responses", json={"input": "hi", **body})
            msg = c.post("/v1/messages", json={**MESSAGES, **body})
            if not stream:
                assert resp.json()["model"] == msg.json()["model"] == "tiny"
            else:
                assert sse_events(resp.text)[-1][1]["response"]["model"] == "tiny"
                assert sse_events(msg.text)[0][1]["message"]["model"] == "tiny"


def test_the_log_format_is_a_setting(monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert resolve_log_format() == "text" and resolve_log_format("JSON") == "json"
    assert resolve_log_format(env={"FFWD_LOG_FORMAT": "json"}) == "json"
    monkeypatch.setenv("FFWD_LOG_FORMAT", "xml")
    assert ffwd_main(["serve", "--port", "1"]) == 2
    assert "FFWD_LOG_FORMAT='xml'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        ffwd_main(["serve", "--help"])
    assert "--log-format {text,json}" in " ".join(capsys.readouterr().out.split())


def test_a_path_with_spaces_or_quotes_stays_one_value() -> None:
    with logging_to("text") as stream, served() as c:
        c.get('/a b"c')
    assert 'path="/a b\\"c" status=404' in stream.getvalue()
