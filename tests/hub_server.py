"""A Hugging Face Hub on loopback: the parts of its API huggingface_hub downloads through.

* ``GET /api/models/ORG/NAME``: the model info, its file list (``siblings``) and commit;
* ``HEAD /ORG/NAME/resolve/REV/FILE``: the file's commit, ETag and size headers;
* ``GET`` of the same: its bytes, from the offset a ``Range: bytes=N-`` asks (206).

Unknown repositories and files answer 404 with the Hub's error code header.
Every request is recorded (`requests`: method, path, Range header). With
`cut_after` set, the next GET of a file sends that many bytes of it and drops
the connection (a download interrupted midway), then GETs are whole again.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMIT = "fedcba9876543210fedcba9876543210fedcba98"


class Hub:
    """Repositories of files served on ``http://127.0.0.1:PORT`` (`endpoint`)."""

    def __init__(self, repos: dict[str, dict[str, Path]]) -> None:
        self.repos = repos
        self.requests: list[tuple[str, str, str | None]] = []
        self.cut_after: int | None = None
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_HEAD(self) -> None:
                hub.answer(self, body=False)

            def do_GET(self) -> None:
                hub.answer(self, body=True)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        self.requests.append((h.command, h.path, h.headers.get("Range")))
        path = h.path.split("?")[0]
        if path.startswith("/api/models/"):
            return self._info(h, path.removeprefix("/api/models/"))
        repo, sep, rest = path.lstrip("/").partition("/resolve/")
        _rev, _, name = rest.partition("/")
        if not sep or repo not in self.repos:
            return _error(h, 404, "RepoNotFound")
        if name not in self.repos[repo]:
            return _error(h, 404, "EntryNotFound")
        self._file(h, self.repos[repo][name].read_bytes(), body)

    def _info(self, h: BaseHTTPRequestHandler, repo: str) -> None:
        if repo not in self.repos:
            return _error(h, 404, "RepoNotFound")
        data = json.dumps({"id": repo, "sha": COMMIT, "siblings": [
            {"rfilename": name} for name in self.repos[repo]]}).encode()
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _file(self, h: BaseHTTPRequestHandler, data: bytes, body: bool) -> None:
        start = int(h.headers.get("Range", "bytes=0-").removeprefix("bytes=").split("-")[0])
        h.send_response(206 if start else 200)
        h.send_header("X-Repo-Commit", COMMIT)
        h.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        h.send_header("Accept-Ranges", "bytes")
        h.send_header("Content-Length", str(len(data) - start))
        if start:
            h.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        h.end_headers()
        if not body:
            return
        if self.cut_after is not None:
            cut, self.cut_after = self.cut_after, None
            h.wfile.write(data[start:start + cut])
            h.wfile.flush()
            h.close_connection = True
            return
        h.wfile.write(data[start:])


def _error(h: BaseHTTPRequestHandler, status: int, code: str) -> None:
    h.send_response(status)
    h.send_header("X-Error-Code", code)
    h.send_header("X-Repo-Commit", COMMIT)
    h.send_header("Content-Length", "0")
    h.end_headers()
