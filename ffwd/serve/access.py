"""What the server tells its operator: a request's id, and one log line per request.

The `Guard` (`middleware.py`) opens an `Access` for every HTTP request. Its
id is the client's ``x-request-id`` when that is a plain token (at most 128
letters, digits and ``._:-``; so a caller's trace id follows the request, as
vLLM keeps it), else a fresh ``req_...``; every response carries it back as
``x-request-id``, and on ``/v1/messages*`` also as ``request-id``
(Anthropic's header). The same id names the request in a failed
generation's traceback. A generation's result is noted on the record
(`delivery`); once the response has been sent, one line goes to the
``ffwd.access`` logger::

    method=POST path=/v1/chat/completions status=200 duration_ms=812.4
    prompt_tokens=512 cached_tokens=480 completion_tokens=40 injected_tokens=12
    fill_share=0.3 request_id=req_5f0c...

(one line; the token fields only where a generation ran, `fill_share` being
the injected share of the completion; where the server lowered the request's
output limit, ``max_tokens_asked=32000 max_tokens=4096 capped_by=max_tokens_limit``
follow, as the reply's usage says it). A flood of client errors does not
flood the log: `AccessLog` writes the first `FLOOD_BURST` 4xx lines of one
client, method, path and status within `FLOOD_INTERVAL` seconds, counts the
rest, and when the interval ends writes one line with their count (a client
retrying through 429s, a script sending the same bad body)::

    method=POST path=/v1/chat/completions status=429 client=10.0.0.7 repeated=2140
    interval_s=10.0 last_request_id=req_9a1b...

Every other response (2xx, 3xx, 5xx) keeps its own line. `configure_logging(fmt)` writes
ffwd's log records (these lines, tracebacks, warnings) to stderr, one per
line: ``text`` (a request line as the key=value pairs above) or ``json`` (one
object per line, a request line's fields at its top level).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
import uuid
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, TextIO

from ffwd.engine.events import GenerationResult
from ffwd.serve.errors import is_anthropic_path

log = logging.getLogger("ffwd.access")
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")  # a client's id kept as it is
TEXT_FORMAT = "%(asctime)s %(name)s: %(message)s"
FLOOD_INTERVAL = 10.0  # seconds one count line covers
FLOOD_BURST = 5  # lines of one client's same 4xx per interval before the rest are counted


@dataclass(eq=False)
class Access:
    """One request as its log line will tell it (see the module docstring)."""

    request_id: str
    method: str
    path: str
    started: float = field(default_factory=time.perf_counter)
    status: int = 0  # as sent; 0 until the response starts
    result: GenerationResult | None = None  # the generation's, when one ran
    client: str = ""  # the peer's address, which a flood's count line names

    @classmethod
    def open(cls, scope: MutableMapping[str, Any]) -> Access:
        """The record of an ASGI request: the id it sent, if plain, or a fresh one."""
        sent = dict(scope.get("headers") or ()).get(b"x-request-id", b"")
        rid = sent.decode("latin-1").strip()
        if not REQUEST_ID.fullmatch(rid):
            rid = "req_" + uuid.uuid4().hex[:24]
        peer = scope.get("client")
        return cls(rid, str(scope.get("method", "")), str(scope.get("path", "")),
                   client=str(peer[0]) if peer else "")

    def headers(self) -> list[tuple[bytes, bytes]]:
        """The request id as every response carries it."""
        rid = self.request_id.encode()
        return [(b"x-request-id", rid), *([(b"request-id", rid)]
                                          if is_anthropic_path(self.path) else [])]

    def fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "method": self.method, "path": self.path, "status": self.status,
            "duration_ms": round((time.perf_counter() - self.started) * 1000, 1)}
        res = self.result
        if res is not None:
            injected = sum(o != "sampled" for o in res.origins)
            out |= {"prompt_tokens": res.prompt_tokens, "cached_tokens": res.cached_tokens,
                    "completion_tokens": res.completion_tokens, "injected_tokens": injected,
                    "fill_share": round(injected / max(1, res.completion_tokens), 3)}
            out |= res.cap.as_dict() if res.cap is not None else {}
        return out | {"request_id": self.request_id}

    def write(self) -> None:
        """The request's one line (nothing to build when no one reads the log's INFO)."""
        if not log.isEnabledFor(logging.INFO):
            return
        _line(self.fields())


def _line(fields: dict[str, Any]) -> None:
    log.info(" ".join(f"{k}={_value(v)}" for k, v in fields.items()), extra={"fields": fields})


FloodKey = tuple[str, str, str, int]  # client, method, path, status


@dataclass(slots=True)
class _Run:
    """One flood key's current interval: the lines written and the requests counted."""

    started: float
    written: int = 0
    counted: int = 0
    last_id: str = ""


class AccessLog:
    """The request lines, a client's repeated 4xx folded into a count per interval (see
    the module docstring). `clock` gives seconds (injected in tests)."""

    def __init__(self, interval: float = FLOOD_INTERVAL, burst: int = FLOOD_BURST,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.burst = burst
        self.clock = clock
        self._runs: dict[FloodKey, _Run] = {}  # oldest interval first
        self._counted = 0  # requests counted in every open interval

    @property
    def pending(self) -> bool:
        """Whether some interval holds requests counted but not yet written."""
        return self._counted > 0

    def write(self, access: Access) -> None:
        """`access`'s line, or, one more of a flood, a count towards its interval's line."""
        now = self.clock()
        self.flush(now)
        if not 400 <= access.status < 500:
            access.write()
            return
        key = (access.client, access.method, access.path, access.status)
        run = self._runs.setdefault(key, _Run(now))
        if run.written < self.burst:
            run.written += 1
            access.write()
        else:
            run.counted += 1
            run.last_id = access.request_id
            self._counted += 1

    def flush(self, now: float | None = None) -> None:
        """End the intervals over by `now` (None: every interval), writing their counts."""
        while self._runs:
            key, run = next(iter(self._runs.items()))
            ended = self.clock() if now is None else now
            if now is not None and ended - run.started < self.interval:
                return
            del self._runs[key]
            self._counted -= run.counted
            if run.counted and log.isEnabledFor(logging.INFO):
                client, method, path, status = key
                _line({"method": method, "path": path, "status": status, "client": client,
                       "repeated": run.counted,
                       "interval_s": round(min(ended - run.started, self.interval), 1),
                       "last_request_id": run.last_id})


def _value(v: object) -> str:
    """A logfmt value: as it is when plain, else quoted (a path may hold anything)."""
    s = str(v)
    return s if s and re.fullmatch(r"[^\s\"=\\]+", s) else json.dumps(s)


class JsonLines(logging.Formatter):
    """One JSON object per record: time, level, logger, then the message, or a request
    line's fields; `fields` given as ``extra`` join the object; a traceback as text."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {"time": self.formatTime(record), "level": record.levelname,
                               "logger": record.name}
        fields = record.__dict__.get("fields")
        if record.name != log.name or not fields:
            out["message"] = record.getMessage()
        out |= fields or {}
        if record.exc_info:
            out["traceback"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def configure_logging(fmt: str = "text", stream: TextIO | None = None) -> None:
    """ffwd's log records to `stream` (stderr), one per line in `fmt` (``text`` or
    ``json``): the request lines (INFO) and everything at WARNING and above. Other
    libraries' records keep their own handling."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonLines() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger("ffwd")
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    root.propagate = False
    log.setLevel(logging.INFO)
