"""Record what an agent CLI sends to a server, and make suite fixtures of it (issue 41).

    python -m tools.agent_record proxy --upstream http://127.0.0.1:8001 --port 8000 \\
        --out /tmp/claude.jsonl
    python -m tools.agent_record fixture /tmp/claude.jsonl --lines 1-2 \\
        --agent "Claude Code 2.1.197" --command "claude -p '...'" \\
        --home /tmp/home --workdir /tmp/project --out tests/fixtures/agents/claude_code.json

``proxy`` listens on ``--port``, forwards every request to ``--upstream`` (an
``ffwd serve``) as it came, streams the answer back as it goes, and appends one
JSON line per request to ``--out``: method, path, query, headers and body as
sent, the answer's status and content type. Credentials are never written (the
headers in `SECRET_HEADERS`). Point the agent at the proxy as its docs say to
point it at the server.

``fixture`` keeps the recorded requests named by ``--lines`` (1-based, as
``2-4`` or ``1,3``) with nothing of the machine or the session in them
(`scrub`): no ids (UUIDs, session and device ids, as numbered placeholders, so
that requests that shared an id still do), no home or working directory, no
per-request headers; the replay test (`tests/integration/test_agent_replay.py`)
sends them to the embedded model.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

# Credentials, whatever the agent calls them: never written.
SECRET_HEADERS = frozenset({"authorization", "x-api-key", "cookie", "proxy-authorization"})
# Hop-by-hop and transport headers the proxy sets itself.
HOP_HEADERS = frozenset({"host", "content-length", "connection", "transfer-encoding",
                         "keep-alive", "accept-encoding"})
# Headers that name a session, a request or an installation: left out of fixtures.
SESSION_HEADER = re.compile(r"session|thread|window|turn|request-id|installation|affinity")
# Ids, each replaced by a numbered placeholder of its own shape.
IDS = ((re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"),
        "00000000-0000-4000-8000-{:012d}"),
       (re.compile(r"\b[0-9a-f]{64}\b"), "{:064d}"),
       (re.compile(r"\bses_[A-Za-z0-9]{20,}"), "ses_{:026d}"))
OS_VERSION = re.compile(r"(OS Version: [A-Za-z]+) [^\\\n\"]+")
HOME, WORKDIR = "/home/user", "/home/user/project"


def recorded_headers(headers: list[tuple[str, str]]) -> dict[str, str]:
    """The request's headers as a fixture keeps them: lower-cased names, no secrets.

    >>> recorded_headers([("Authorization", "Bearer k"), ("User-Agent", "claude-cli/2.1")])
    {'user-agent': 'claude-cli/2.1'}
    """
    return {k.lower(): v for k, v in headers if k.lower() not in SECRET_HEADERS}


def body_of(raw: bytes) -> Any:
    """The body as JSON when it is JSON, else as text (None when empty)."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode("utf-8", "replace")


def proxy_app(upstream: str, out: Path) -> Starlette:
    """The recording proxy (see the module docstring)."""
    client = httpx.AsyncClient(base_url=upstream, timeout=httpx.Timeout(None))
    lock = threading.Lock()

    def write(record: dict[str, Any]) -> None:
        with lock, out.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")

    async def forward(request: Request) -> Response:
        raw = await request.body()
        headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP_HEADERS]
        sent = client.build_request(request.method, request.url.path,
                                    params=request.url.query, headers=headers, content=raw)
        answer = await client.send(sent, stream=True)
        write({"method": request.method, "path": request.url.path,
               "query": request.url.query, "headers": recorded_headers(request.headers.items()),
               "body": body_of(raw), "status": answer.status_code,
               "content_type": answer.headers.get("content-type", "")})

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in answer.aiter_raw():
                    yield chunk
            finally:
                await answer.aclose()

        kept = {k: v for k, v in answer.headers.items() if k.lower() not in HOP_HEADERS
                and k.lower() != "content-encoding"}
        return StreamingResponse(chunks(), status_code=answer.status_code, headers=kept)

    methods = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
    return Starlette(routes=[Route("/{path:path}", forward, methods=methods)])


def scrub(text: str, seen: dict[str, str], home: str, workdir: str) -> str:
    """`text` without ids (`seen` numbers them across a fixture's requests), with the
    recording's `workdir` and `home` as ``/home/user/project`` and ``/home/user`` (as
    paths and as the slugs agents make of them), and no kernel version.

    >>> scrub('{"id": "2dd325b2-7e7b-4cbf-8577-d63d9d8c4ce5", "cwd": "/tmp/p/x", '
    ...       '"memory": "/tmp/h/.claude/projects/-tmp-p/"}', {}, "/tmp/h", "/tmp/p")
    '{"id": "00000000-0000-4000-8000-000000000001", "cwd": "/home/user/project/x", \
"memory": "/home/user/.claude/projects/-home-user-project/"}'
    """
    for pattern, shape in IDS:
        def number(m: re.Match[str], shape: str = shape) -> str:
            return seen.setdefault(m.group(0), shape.format(len(seen) + 1))
        text = pattern.sub(number, text)
    for path, kept in ((workdir, WORKDIR), (home, HOME)):
        text = text.replace(path, kept).replace(path.replace("/", "-"), kept.replace("/", "-"))
    return OS_VERSION.sub(r"\1", text)


def fixture(records: list[dict[str, Any]], home: str, workdir: str) -> list[dict[str, Any]]:
    """The recorded requests as a fixture keeps them (see the module docstring)."""
    seen: dict[str, str] = {}
    out = []
    for r in records:
        headers = {k: v for k, v in r["headers"].items()
                   if k not in HOP_HEADERS and not SESSION_HEADER.search(k)}
        kept = {"method": r["method"], "path": r["path"], "query": r["query"],
                "headers": headers, "body": r["body"]}
        out.append(json.loads(scrub(json.dumps(kept, ensure_ascii=False), seen, home, workdir)))
    return out


def lines(spec: str) -> list[int]:
    """1-based line numbers: ``2-4`` or ``1,3`` (0-based indices back).

    >>> lines("2-4"), lines("1,3")
    ([1, 2, 3], [0, 2])
    """
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo) - 1, int(hi or lo))
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    proxy = sub.add_parser("proxy", help="forward to --upstream, recording each request")
    proxy.add_argument("--upstream", required=True, help="the ffwd server's URL")
    proxy.add_argument("--host", default="127.0.0.1")
    proxy.add_argument("--port", type=int, default=8000)
    proxy.add_argument("--out", type=Path, required=True, help="the JSONL file to append to")
    fix = sub.add_parser("fixture", help="a recording's requests as a suite fixture")
    fix.add_argument("recording", type=Path)
    fix.add_argument("--lines", required=True, help="which requests: 1-based, 2-4 or 1,3")
    fix.add_argument("--agent", required=True, help="the CLI and its version")
    fix.add_argument("--command", dest="run", required=True, help="how it was run")
    fix.add_argument("--home", required=True, help="the HOME it ran with")
    fix.add_argument("--workdir", required=True, help="the directory it ran in")
    fix.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    if args.command == "proxy":
        uvicorn.run(proxy_app(args.upstream, args.out), host=args.host, port=args.port,
                    log_level="warning")
        return
    recorded = args.recording.read_text(encoding="utf-8").splitlines()
    records = [json.loads(recorded[i]) for i in lines(args.lines)]
    doc = {"agent": args.agent, "command": args.run,
           "requests": fixture(records, args.home, args.workdir)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
