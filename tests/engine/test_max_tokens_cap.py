"""An output limit above the server's is capped, not refused (issue 41): agents ask for
the most their hosted models allow (Claude Code and opencode: 32,000), and llama.cpp's
server and Ollama cap that at what the server gives. The run stops at the bound with
each API's length finish, and the reply's usage, the request's log line and /metrics say
that the cap applied; ``--strict-max-tokens`` gives the 400 back. Through the real
`ModelService` on a tiny model, every dialect, whole and streamed."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from fastapi.testclient import TestClient
from hypothesis import given
from hypothesis import strategies as st

from ffwd.config import OutputCap, TokenLimits
from ffwd.serve.app import create_app
from tests.engine.tiny_service import tiny_service, tokenizer

LIMIT = 12
HI = [{"role": "user", "content": "What is the weather in Paris?"}]


def no_eos() -> dict[str, Any]:
    """A logit bias that keeps the tiny model from ending early (it runs to the bound)."""
    return {"logit_bias": {str(tokenizer().eos_token_id): -100}}


# dialect -> (path, body asking for 32,000 ids, how the usage is read, the length finish)
ASKS: dict[str, tuple[str, dict[str, Any], str, str]] = {
    "chat": ("/v1/chat/completions", {"messages": HI, "max_tokens": 32000, **no_eos()},
             "completion_tokens", "length"),
    "completions": ("/v1/completions", {"prompt": "Once upon", "max_tokens": 32000, **no_eos()},
                    "completion_tokens", "length"),
    "responses": ("/v1/responses", {"input": "Weather in Paris?", "max_output_tokens": 32000},
                  "output_tokens", "incomplete"),
    "messages": ("/v1/messages", {"model": "default", "messages": HI, "max_tokens": 32000},
                 "output_tokens", "max_tokens"),
}


def finish(dialect: str, body: dict[str, Any]) -> str:
    if dialect in ("chat", "completions"):
        return str(body["choices"][0]["finish_reason"])
    return str(body["status"] if dialect == "responses" else body["stop_reason"])


def streamed(dialect: str, text: str) -> tuple[dict[str, Any], str]:
    """The usage and the finish of a streamed reply, as its last events carry them."""
    datas = [json.loads(line[6:]) for line in text.splitlines()
             if line.startswith("data: ") and line != "data: [DONE]"]
    if dialect in ("chat", "completions"):
        reason = next(d["choices"][0]["finish_reason"] for d in datas
                      if d["choices"] and d["choices"][0]["finish_reason"])
        return datas[-1]["usage"], reason
    if dialect == "responses":
        return datas[-1]["response"]["usage"], datas[-1]["response"]["status"]
    delta = next(d for d in datas if d["type"] == "message_delta")
    return delta["usage"], delta["delta"]["stop_reason"]


def metric(client: TestClient, by: str) -> float:
    line = f'ffwd_max_tokens_capped_total{{by="{by}"}} '
    found = [ln for ln in client.get("/metrics").text.splitlines() if ln.startswith(line)]
    return float(found[0].split()[-1]) if found else 0.0


@pytest.mark.parametrize("dialect", ASKS)
def test_an_output_limit_above_the_servers_is_capped(
        dialect: str, caplog: pytest.LogCaptureFixture) -> None:
    path, body, read, length = ASKS[dialect]
    extra = {"stream_options": {"include_usage": True}} if dialect in ("chat",
                                                                        "completions") else {}
    svc = tiny_service(capped=False, limits=TokenLimits(default=4, limit=LIMIT))
    caplog.set_level(logging.INFO, logger="ffwd.access")
    with TestClient(create_app(svc)) as c:
        whole = c.post(path, json=body)
        assert whole.status_code == 200, whole.text
        assert finish(dialect, whole.json()) == length
        usage = whole.json()["usage"]
        assert usage[read] == LIMIT
        assert usage["ffwd"] == {"max_tokens_asked": 32000, "max_tokens": LIMIT,
                                 "capped_by": "max_tokens_limit"}
        stream = c.post(path, json={**body, **extra, "stream": True})
        assert stream.status_code == 200, stream.text
        usage, reason = streamed(dialect, stream.text)
        assert reason == length and usage[read] == LIMIT
        assert usage["ffwd"]["capped_by"] == "max_tokens_limit"
        # Within the limit nothing is capped, and nothing says so.
        within = c.post(path, json={**body, read_field(dialect): LIMIT})
        assert within.status_code == 200 and "ffwd" not in within.json()["usage"]
        assert metric(c, "max_tokens_limit") == 2
    lines = [r.__dict__["fields"] for r in caplog.records if r.name == "ffwd.access"
             and r.__dict__["fields"]["path"] == path]
    assert [ln.get("capped_by") for ln in lines] == ["max_tokens_limit"] * 2 + [None]
    assert lines[0]["max_tokens_asked"] == 32000 and lines[0]["max_tokens"] == LIMIT


def read_field(dialect: str) -> str:
    return "max_output_tokens" if dialect == "responses" else "max_tokens"


def test_the_context_caps_what_the_limit_allows() -> None:
    # The prompt leaves fewer ids than asked for (and than the limit): the run stops
    # where the context window ends, and says the context capped it.
    svc = tiny_service(capped=False, context=48, limits=TokenLimits(default=4, limit=4096))
    with TestClient(create_app(svc)) as c:
        r = c.post("/v1/chat/completions", json={"messages": HI, "max_tokens": 1000, **no_eos()})
        assert r.status_code == 200, r.text
        usage = r.json()["usage"]
        assert usage["prompt_tokens"] + usage["completion_tokens"] == 48
        assert usage["ffwd"] == {"max_tokens_asked": 1000, "max_tokens": 48 - usage[
            "prompt_tokens"], "capped_by": "context_window"}
        assert metric(c, "context_window") == 1
        # A prompt that does not fit stays a 400 that says so.
        long = [{"role": "user", "content": "word " * 60}]
        r = c.post("/v1/chat/completions", json={"messages": long, "max_tokens": 1000})
        assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"


def test_strict_max_tokens_refuses_as_before() -> None:
    svc = tiny_service(capped=False, limits=TokenLimits(default=4, limit=LIMIT, strict=True))
    with TestClient(create_app(svc)) as c:
        for field in ("max_tokens", "max_completion_tokens"):
            for stream in (False, True):
                r = c.post("/v1/chat/completions",
                           json={"messages": HI, field: LIMIT + 1, "stream": stream})
                err = r.json()["error"]
                assert r.status_code == 400 and err["param"] == field, r.text
                assert err["code"] == "max_tokens_too_large" and str(LIMIT) in err["message"]
        r = c.post("/v1/messages", json={"model": "default", "messages": HI,
                                         "max_tokens": 32000})
        assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
        r = c.post("/v1/responses", json={"input": "hi", "max_output_tokens": 32000})
        assert r.status_code == 400 and r.json()["error"]["param"] == "max_output_tokens"
        assert c.post("/v1/chat/completions",
                      json={"messages": HI, "max_tokens": LIMIT}).status_code == 200
        assert metric(c, "max_tokens_limit") == 0


@given(asked=st.none() | st.integers(1, 1 << 20), room=st.integers(1, 1 << 20),
       default=st.integers(1, 5000), extra=st.integers(0, 5000))
def test_the_bound_is_the_smallest_and_the_cap_says_why(
        asked: int | None, room: int, default: int, extra: int) -> None:
    limits = TokenLimits(default=default, limit=default + extra)
    bound, cap = limits.bound(asked, room)
    wanted = default if asked is None else asked
    assert bound == min(wanted, limits.limit, room) >= 1
    assert not limits.refuses(asked)
    if asked is None or asked <= min(limits.limit, room):
        assert cap is None
    else:
        by = "max_tokens_limit" if limits.limit <= room else "context_window"
        assert cap == OutputCap(asked, bound, by)
    strict = TokenLimits(default, limits.limit, strict=True)
    assert strict.refuses(asked) == (asked is not None and asked > limits.limit)
