"""A log that stays readable under a flood: a client's repeated 4xx (429s, one bad body
sent again and again) become a count line per interval, while every other request keeps
its own line. The clock is injected: no test sleeps."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ffwd.serve.access import Access, AccessLog
from ffwd.serve.app import create_app
from tests.unit.test_serve_app import Scripted

CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [r.__dict__["fields"] for r in caplog.records if r.name == "ffwd.access"]


def request(status: int, client: str = "10.0.0.7", path: str = "/v1/chat/completions",
            rid: str = "r") -> Access:
    return Access(rid, "POST", path, status=status, client=client)


@pytest.fixture(autouse=True)
def info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ffwd.access")


def test_a_429_flood_is_a_few_lines_and_a_count_per_interval(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    log = AccessLog(interval=10.0, burst=3, clock=clock)
    for i in range(1000):  # 100 per second for 10 s
        log.write(request(429, rid=f"r{i}"))
        clock.now += 0.01
    assert [f["status"] for f in lines(caplog)] == [429, 429, 429]  # the first three
    assert log.pending
    clock.now += 0.5  # the interval is over: the next request writes the count first
    log.write(request(200, rid="ok"))
    got = lines(caplog)[3:]
    assert got[0] == {"method": "POST", "path": "/v1/chat/completions", "status": 429,
                      "client": "10.0.0.7", "repeated": 997, "interval_s": 10.0,
                      "last_request_id": "r999"}
    assert got[1]["request_id"] == "ok" and len(got) == 2
    assert not log.pending


def test_every_other_request_keeps_its_line_in_the_middle_of_a_flood(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    log = AccessLog(interval=10.0, burst=2, clock=clock)
    kinds = [(429, "10.0.0.7", "/v1/chat/completions"), (200, "10.0.0.7", "/v1/chat/completions"),
             (500, "10.0.0.7", "/v1/chat/completions"), (400, "10.0.0.8", "/v1/chat/completions"),
             (429, "10.0.0.7", "/v1/messages")]
    for i in range(50):
        for status, client, path in kinds:
            log.write(request(status, client, path, rid=f"{status}-{client}-{path}-{i}"))
        clock.now += 0.1
    got = lines(caplog)
    assert sum(f["status"] == 200 for f in got) == 50  # successes: a line each
    assert sum(f["status"] == 500 for f in got) == 50  # our own errors: a line each
    # each other client, path and status is a flood of its own: two lines, the rest counted
    assert sum(f["status"] == 400 for f in got) == 2
    assert sum(f["status"] == 429 for f in got) == 4
    log.flush()  # the app's shutdown: every count now
    counts = {(f["client"], f["path"], f["status"]): f["repeated"] for f in lines(caplog)
              if "repeated" in f}
    assert counts == {("10.0.0.7", "/v1/chat/completions", 429): 48,
                      ("10.0.0.8", "/v1/chat/completions", 400): 48,
                      ("10.0.0.7", "/v1/messages", 429): 48}


def test_a_slow_repeat_is_not_a_flood(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    log = AccessLog(interval=10.0, burst=5, clock=clock)
    for i in range(30):  # a 404 every 2.5 s: at most four in any interval
        log.write(request(404, path="/v1/nope", rid=f"n{i}"))
        clock.now += 2.5
    log.flush()
    got = lines(caplog)
    assert [f["request_id"] for f in got] == [f"n{i}" for i in range(30)]


def test_a_flood_in_each_interval_gets_its_own_count(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    log = AccessLog(interval=10.0, burst=1, clock=clock)
    for i in range(300):  # 10 per second for 30 s
        log.write(request(429, rid=f"r{i}"))
        clock.now += 0.1
    log.flush()
    got = lines(caplog)
    assert len(got) == 6  # per interval: its first line, then its count
    assert [f.get("repeated") for f in got[1::2]] == [99, 99, 99]
    assert sum(1 + f["repeated"] for f in got[1::2]) == 300


def test_through_the_app_a_bad_key_flood_folds_and_the_good_requests_stay(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    app = create_app(Scripted(), api_key="k", access_log=AccessLog(burst=2, clock=clock))
    with TestClient(app) as c:
        for _ in range(40):
            assert c.post("/v1/chat/completions", json=CHAT,
                          headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.post("/v1/chat/completions", json=CHAT,
                      headers={"Authorization": "Bearer k"}).status_code == 200
        assert c.get("/v1/nope", headers={"Authorization": "Bearer k"}).status_code == 404
        assert len(lines(caplog)) == 4  # two 401s, the 200, the 404
    # the app's shutdown wrote the count of the rest
    got = lines(caplog)
    assert [f["status"] for f in got] == [401, 401, 200, 404, 401]
    assert got[-1]["repeated"] == 38 and got[-1]["client"] == "testclient"
    counted = app.state.metrics.registry.get_sample_value(
        "ffwd_requests_total", {"endpoint": "/v1/chat/completions", "status": "401"})
    assert counted == 40  # the metrics still count every one


def test_the_count_line_is_json_too() -> None:
    import io
    import json

    from tests.unit.test_serve_access import logging_to

    clock = Clock()
    with logging_to("json") as stream:
        log = AccessLog(interval=10.0, burst=1, clock=clock)
        for i in range(5):
            log.write(request(413, rid=f"b{i}"))
        clock.now += 10
        log.flush(clock.now)
    rows = [json.loads(line) for line in io.StringIO(stream.getvalue())]
    assert rows[-1]["repeated"] == 4 and rows[-1]["status"] == 413
    assert rows[-1]["logger"] == "ffwd.access" and "message" not in rows[-1]


def test_when_the_flood_stops_a_timer_writes_its_count(
        caplog: pytest.LogCaptureFixture) -> None:
    import time

    app = create_app(Scripted(), api_key="k", access_log=AccessLog(interval=0.2, burst=1))
    with TestClient(app) as c:
        for _ in range(6):
            c.get("/v1/models", headers={"Authorization": "Bearer wrong"})
        deadline = time.monotonic() + 0.9  # no other request comes, the app keeps running
        while time.monotonic() < deadline and len(lines(caplog)) < 2:
            time.sleep(0.05)
        got = lines(caplog)
        assert [f.get("repeated") for f in got] == [None, 5]
