"""`tools.soak_requests`: the soak's judge of each answer, on the scripted app (no model):
every kind it sends is answered right by a working server, every bad body is refused
right, and what is wrong (a 5xx, a body out of shape, a stream cut short, a refused
connection) is counted as what it is; and `tools.soak`'s own bounds and drain target."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from ffwd.serve.app import create_app
from tests.unit.test_serve_app import Scripted
from tools import soak_requests as soak
from tools.soak import GRACE, Drain, main
from tools.soak_requests import CHAT, MESSAGES, RESPONSES, TEXT, Outcome


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with TestClient(create_app(Scripted())) as c:
        yield c


@pytest.mark.parametrize("kind", [*soak.KINDS, "long"])
def test_a_working_server_answers_every_kind_right(client: TestClient, kind: str) -> None:
    out = soak.send(client, "", kind, 0, lambda: False)
    assert (out.status, out.problem) == (400 if kind == "bad" else 200, None), out
    assert out.abandoned == (kind == "abandon")


@pytest.mark.parametrize("i", range(len(soak.BAD)))
def test_every_bad_body_is_refused_in_its_api_s_shape(client: TestClient, i: int) -> None:
    out = soak.send(client, "", "bad", i, lambda: False)
    assert (out.status, out.problem) == (400, None), out


def test_what_is_wrong_is_counted_as_what_it_is() -> None:
    never = lambda: False  # noqa: E731
    error = json.dumps({"error": {"message": "m", "type": "t", "param": None, "code": "c"}})
    drain = error.replace('"c"', f'"{soak.SHUTTING_DOWN}"').encode()
    assert soak.judge(CHAT, 500, error.encode(), False, never).problem == "5xx"
    assert soak.judge(CHAT, 503, drain, False, never).problem == "5xx"  # before any signal
    assert soak.judge(CHAT, 503, drain, False, lambda: True) == Outcome(CHAT, 503, None, "drain")
    assert soak.judge(CHAT, 400, b'{"error": "x"}', True, never).problem == "malformed"
    assert soak.judge(CHAT, 400, error.encode(), False, never).problem == "malformed"
    assert soak.judge(CHAT, 200, b'{"choices": []}', False, never).problem == "malformed"
    assert soak.judge(CHAT, 200, b"<html>", False, never).problem == "malformed"
    assert soak.judge(TEXT, 200, b'{"choices": [{"text": "x"}]}', True, never).problem == (
        "malformed")  # a bad body answered
    anthropic_shape = json.dumps({"type": "error", "error": {"type": "x", "message": "m",
                                                             "code": "c"}}).encode()
    assert soak.judge(MESSAGES, 400, anthropic_shape, True, never).problem is None
    assert soak.judge(MESSAGES, 400, error.encode(), True, never).problem == "malformed"


@pytest.mark.parametrize(("path", "lines", "problem"), [
    (CHAT, ['data: {"choices": []}'], "lost"),  # cut before [DONE]
    (CHAT, ['data: {"choices": []}', "data: [DONE]"], None),
    (CHAT, ["data: {oops", "data: [DONE]"], "malformed"),
    (CHAT, ['data: {"error": {"code": "internal_error"}}', "data: [DONE]"], "5xx"),
    (RESPONSES, ["event: response.created", 'data: {"type": "response.created"}'], "lost"),
    (RESPONSES, ['data: {"type": "response.failed", "response": {"error": {"code": "x"}}}'],
     "5xx"),
    (MESSAGES, ['data: {"type": "message_stop"}'], None),
    (MESSAGES, ['data: {"type": "error", "error": {"code": "server_shutting_down"}}'],
     "5xx"),  # the drain's cut, but no signal was sent
])
def test_a_stream_is_judged_by_its_events(path: str, lines: list[str],
                                          problem: str | None) -> None:
    assert soak.judge_stream(path, lines, lambda: False).problem == problem


def test_a_refused_connection_is_lost_unless_the_server_was_told_to_stop() -> None:
    def refuse(request: httpx.Request) -> Any:
        raise httpx.ConnectError("refused", request=request)

    with httpx.Client(transport=httpx.MockTransport(refuse)) as c:
        assert soak.send(c, "http://x", "chat", 0, lambda: False).problem == "lost"
        assert soak.send(c, "http://x", "chat", 0, lambda: True).problem is None


def test_a_drain_meets_its_target_only_503_draining_bounded_and_logged() -> None:
    log = "ffwd.serve: shut down: 0 requests finished, 4 cut after the 5 s grace period"
    good = Drain(Counter({"503 draining": 9, "200 before the signal arrived": 1}), 5.5, log)
    assert good.ok
    assert not Drain(Counter({"503 draining": 9, "200 after 503": 1}), 5.5, log).ok
    assert not Drain(Counter({"503 draining": 9, "other": 1}), 5.5, log).ok
    assert not Drain(Counter({"200 before the signal arrived": 9}), 5.5, log).ok
    assert not Drain(Counter({"503 draining": 9}), GRACE + 6, log).ok  # too slow
    assert not Drain(Counter({"503 draining": 9}), 5.5, "no shutdown line in the log").ok


@pytest.mark.parametrize("argv", [
    ["--", "--host", "0.0.0.0"], ["--", "--host=0.0.0.0"], ["--", "--api-key", "k"],
    ["--clients", "0"], ["--clients", "65"], ["--minutes", "241"], ["--round-seconds", "5"]])
def test_the_soak_refuses_what_would_unbound_it_or_leave_loopback(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
