"""The live server keeps idle connections longer than its clients do: a plain httpx
client reuses a connection after 5.5 s idle (uvicorn's own 5 s closed it, and a request
racing that close failed), and every response says how long the connection stays."""

from __future__ import annotations

import socket

from ffwd.config import DEFAULT_KEEP_ALIVE
from tests.integration.live_server import Server
from tools.keepalive import soak


def test_a_connection_idle_for_5_5_s_is_reused_and_answers(server: Server) -> None:
    got = soak(server.url, reuses=2, gap=(5.5, 5.5))
    assert got["failed"] == 0, got
    assert got["reuses"] == 2, got  # the same connection each time, not a new one
    assert got["keep_alive_header"] == f"timeout={DEFAULT_KEEP_ALIVE}"


def response_head(server: Server, request: bytes) -> list[str]:
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
        s.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    return data.split(b"\r\n\r\n")[0].decode().lower().split("\r\n")


def test_no_keep_alive_promise_on_a_connection_that_closes(server: Server) -> None:
    for request in (b"GET /health HTTP/1.0\r\n\r\n",
                    b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"):
        head = response_head(server, request)
        assert head[0].endswith("200 ok") and "connection: close" in head, head
        assert not any(h.startswith("keep-alive:") for h in head), head
    head = response_head(server, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert f"keep-alive: timeout={DEFAULT_KEEP_ALIVE}" in head, head
