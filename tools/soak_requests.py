"""The soak's requests (`tools.soak`): what each kind sends, and what makes its answer right.

`send(client, url, kind, i, draining)` sends one request and judges the answer
(`Outcome.problem`, None when it is right):

* ``5xx``: a server error, other than the drain's (a 503, or a stream's error event,
  whose code is ``server_shutting_down``, once the server was told to stop);
* ``malformed``: a reply or an error that is not in its API's shape (a stream's
  event that is not JSON, an error without its code), or a wrong status: a valid
  body refused (4xx) or a bad one answered;
* ``lost``: no complete answer: a dropped connection, a stream that ends without its
  last event, a refused connection while the server should be up.

Bad bodies go to five endpoints (the bodies of issue 52 and broken JSON); cut
streams (``abandon``) are read for a few lines and closed, as a client that leaves.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from tools.load import TOOLS, USER
from tools.load import body as chat_body

CHAT, TEXT, RESPONSES, MESSAGES = ("/v1/chat/completions", "/v1/completions", "/v1/responses",
                                   "/v1/messages")
COUNT = MESSAGES + "/count_tokens"
KINDS = ("chat", "stream", "tool", "stream_tool", "abandon", "responses", "responses_stream",
         "messages", "messages_stream", "completion", "bad")
SHUTTING_DOWN = "server_shutting_down"
# Bodies each API refuses (a 4xx in its error shape): issue 52's, and a few classics.
BAD: list[tuple[str, dict[str, Any] | str]] = [
    (CHAT, {"messages": USER, "metadata": "x"}),
    (CHAT, {"messages": [*USER, {"role": "tool", "content": "42"}]}),
    (CHAT, {"messages": USER, "temperature": "hot"}),
    (CHAT, '{"messages": [{"role": "user", "content": "hi"}], "top_p": NaN}'),
    (CHAT, '{"messages": ['),
    (TEXT, {"prompt": "Say", "tools": TOOLS}),
    (TEXT, {"prompt": []}),
    (RESPONSES, {"input": [], "max_output_tokens": 4}),
    (RESPONSES, {"input": [{"type": "hologram", "x": 1}]}),
    (RESPONSES, {"input": "hi", "include": ["everything"]}),
    (RESPONSES, {"input": "hi", "n": 2}),
    (MESSAGES, {"max_tokens": 4, "messages": USER, "n": 2}),
    (MESSAGES, {"max_tokens": 4, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}]}]}),
    (COUNT, {"messages": USER, "temperature": 5}),
    (COUNT, {"messages": USER, "top_k": -1}),
]
# The last event of a whole stream, by path (an error event may end it too).
LAST = {CHAT: "[DONE]", TEXT: "[DONE]", RESPONSES: "response.completed", MESSAGES: "message_stop"}


@dataclass(frozen=True)
class Outcome:
    path: str
    status: int | None  # None: no answer
    problem: str | None = None  # 5xx, malformed, lost (module docstring); None: right
    note: str = ""  # what was wrong, or "drain" for the drain's own refusals and cuts
    abandoned: bool = False


def request_of(kind: str, i: int) -> tuple[str, dict[str, Any] | str]:
    """The path and body of request `i` of `kind` (`i` picks the seed and the bad body)."""
    if kind == "bad":
        path, bad = BAD[i % len(BAD)]
        return path, bad if isinstance(bad, str) else {"model": "default", **bad}
    stream = kind.endswith("stream")
    if kind.startswith("responses"):
        return RESPONSES, {"model": "default", "input": USER[0]["content"], "stream": stream,
                           "max_output_tokens": 32, "temperature": 0.7, "seed": i}
    if kind.startswith("messages"):
        return MESSAGES, {"model": "default", "messages": USER, "max_tokens": 32,
                          "stream": stream, "temperature": 0.7, "seed": i}
    if kind == "completion":
        return TEXT, {"model": "default", "prompt": "The weather in Lisbon is",
                      "max_tokens": 24, "seed": i}
    if kind == "long":  # a stream still going when the server is told to stop: a count
        return TEXT, {"model": "default", "prompt": ", ".join(map(str, range(1, 13))) + ",",
                      "max_tokens": 1000, "temperature": 0, "stream": True}
    return CHAT, chat_body(kind, i)


def send(client: httpx.Client, url: str, kind: str, i: int,
         draining: Callable[[], bool]) -> Outcome:
    """Send request `i` of `kind` and judge its answer (module docstring); `draining()`
    says whether the server was told to stop (its refusals are right then)."""
    path, payload = request_of(kind, i)
    content = payload if isinstance(payload, str) else json.dumps(payload)
    headers = {"content-type": "application/json"}
    try:
        if isinstance(payload, dict) and payload.get("stream"):
            with client.stream("POST", url + path, content=content, headers=headers) as r:
                if r.status_code != 200:
                    return judge(path, r.status_code, r.read(), kind == "bad", draining)
                if kind == "abandon":
                    for n, _ in enumerate(r.iter_lines()):
                        if n >= 2:
                            break  # leaving the block closes the connection mid-stream
                    return Outcome(path, 200, abandoned=True)
                return judge_stream(path, list(r.iter_lines()), draining)
        r = client.post(url + path, content=content, headers=headers)
        return judge(path, r.status_code, r.content, kind == "bad", draining)
    except httpx.ConnectError as exc:
        return Outcome(path, None, None if draining() else "lost", "refused: " + str(exc))
    except httpx.HTTPError as exc:
        return Outcome(path, None, "lost", f"{type(exc).__name__}: {exc}")


def judge(path: str, status: int, raw: bytes, bad: bool,
          draining: Callable[[], bool]) -> Outcome:
    """A whole answer: the reply's shape, or the error's, and the status it should have."""
    try:
        body = json.loads(raw)
    except ValueError:
        return Outcome(path, status, "malformed", f"not JSON: {raw[:80]!r}")
    if status >= 500:
        drain = status == 503 and draining() and error_code(path, body) == SHUTTING_DOWN
        return Outcome(path, status, None if drain else "5xx", "drain" if drain else str(body))
    if status >= 400:
        if error_code(path, body) is None:
            return Outcome(path, status, "malformed", f"error not in the API's shape: {body}")
        wrong = not bad and status != 429
        return Outcome(path, status, "malformed" if wrong else None,
                       f"a valid body refused: {body}" if wrong else "")
    if bad:
        return Outcome(path, status, "malformed", "a bad body answered")
    return Outcome(path, status, None if reply_ok(path, body) else "malformed", str(body)[:200])


def error_code(path: str, body: Any) -> str | None:
    """The code of an error body in the path's API shape (None: not that shape)."""
    if not isinstance(body, dict) or not isinstance(body.get("error"), dict):
        return None
    err = body["error"]
    if path.startswith(MESSAGES) and (body.get("type") != "error" or "type" not in err):
        return None
    if not path.startswith(MESSAGES) and not {"message", "type", "param", "code"} <= set(err):
        return None
    return str(err.get("code")) if err.get("message") and err.get("code") else None


def reply_ok(path: str, body: Any) -> bool:
    if not isinstance(body, dict):
        return False
    if path == COUNT:
        return isinstance(body.get("input_tokens"), int)
    if path == MESSAGES:
        return body.get("type") == "message" and isinstance(body.get("content"), list)
    if path == RESPONSES:
        return body.get("object") == "response" and isinstance(body.get("output"), list)
    choices = body.get("choices")
    return isinstance(choices, list) and len(choices) == 1 and (
        "message" in choices[0] if path == CHAT else isinstance(choices[0].get("text"), str))


def judge_stream(path: str, lines: list[str], draining: Callable[[], bool]) -> Outcome:
    """A stream read to its end: every event JSON, and the last one its API's last (or the
    drain's error event, once the server was told to stop)."""
    events: list[Any] = []
    for line in lines:
        if not line.startswith("data: "):
            continue
        try:
            events.append(line[6:] if line == "data: [DONE]" else json.loads(line[6:]))
        except ValueError:
            return Outcome(path, 200, "malformed", f"an event that is not JSON: {line[:80]}")
    errors = [e for e in events if isinstance(e, dict) and stream_error(e) is not None]
    if errors:
        drain = draining() and all(stream_error(e) == SHUTTING_DOWN for e in errors)
        return Outcome(path, 200, None if drain else "5xx",
                       "drain" if drain else str(errors[0])[:200])
    last = events[-1] if events else None
    kind = last if isinstance(last, str) else (last or {}).get("type")
    if kind != LAST[path] and not (path == RESPONSES and kind == "response.incomplete"):
        return Outcome(path, 200, "lost", f"the stream ended after {kind!r}")
    return Outcome(path, 200)


def stream_error(event: dict[str, Any]) -> str | None:
    """The code of a stream's error event (chat's error chunk, Responses' failure,
    Anthropic's error event); None for any other event."""
    if event.get("type") == "response.failed":
        return str((event.get("response", {}).get("error") or {}).get("code"))
    if isinstance(event.get("error"), dict):
        return str(event["error"].get("code"))
    return None
