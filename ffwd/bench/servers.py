"""The server processes `ffwd bench` talks to over loopback HTTP, as any client would.

`ChildServer` starts a command that serves HTTP on a free loopback port,
waits for its ``/health``, and stops it (its own process only). The two kinds:

* `ffwd_server`: ``ffwd serve`` on one engine, fill off by default (each
  request names its mode), no prompt cache, the bench's thread count.
* `llama_server`: llama.cpp's own server (`ffwd.bench.llama_server`) on the
  same GGUF, threads, context and batch size.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

STARTUP_SECONDS = 600  # a first transformers start converts the GGUF (~20 s); be generous


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ChildServer:
    """One server process on 127.0.0.1:`port`, logging to a temporary file."""

    def __init__(self, name: str, command: list[str], port: int) -> None:
        self.name = name
        self.url = f"http://127.0.0.1:{port}"
        fd, log = tempfile.mkstemp(prefix=f"ffwd-bench-{name}-", suffix=".log")
        self.log = Path(log)
        with os.fdopen(fd, "w") as fh:  # the environment (FFWD_* included) is inherited
            self.proc = subprocess.Popen(command, stdout=fh, stderr=subprocess.STDOUT)
        self._wait_healthy()

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited while starting:\n{self.tail()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"{self.name} was not healthy after {STARTUP_SECONDS} s:\n{self.tail()}")

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.unlink(missing_ok=True)

    def __enter__(self) -> ChildServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def ffwd_server(model: str, backend: str, threads: int, dtype: str) -> ChildServer:
    """``ffwd serve`` on `backend`; FFWD_FILL_* settings in the environment apply."""
    port = free_port()
    cmd = [sys.executable, "-m", "ffwd.cli", "serve", "--model", model, "--backend", backend,
           "--threads", str(threads), "--port", str(port), "--prompt-cache-bytes", "0",
           "--fill", "off", "--dtype", dtype]
    return ChildServer(f"ffwd-{backend}", cmd, port)


def llama_server(gguf: str, threads: int, n_ctx: int, n_batch: int) -> ChildServer:
    port = free_port()
    cmd = [sys.executable, "-m", "ffwd.bench.llama_server", "--model", gguf, "--port", str(port),
           "--threads", str(threads), "--ctx", str(n_ctx), "--batch", str(n_batch)]
    return ChildServer("llama-server", cmd, port)
