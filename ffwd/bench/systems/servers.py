"""The server processes `ffwd bench` talks to over loopback HTTP, as any client would.

`ChildServer` starts a command that serves HTTP on a free loopback port,
waits for its ``/health``, and stops it (its own process only). The two kinds:

* `ffwd_server`: ``ffwd serve`` on one engine, fill off by default (each
  request names its mode), no prompt cache, the bench's thread count,
  optionally ``--deterministic``.
* `llama_server`: llama.cpp's own server (the native build, else the xllamacpp
  fallback: `ffwd.bench.systems.llama_server`) on the same GGUF, threads,
  context and batch size, optionally with one of its draft-free speculation
  modes.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import httpx

STARTUP_SECONDS = 600  # a first transformers start converts the GGUF (~20 s); be generous


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ChildServer:
    """One server process on 127.0.0.1:`port`, logging to `log` (default: a temporary
    file, removed on `stop`), with the environment `env` (default: this process's)."""

    def __init__(
        self, name: str, command: list[str], port: int, *,
        log: Path | None = None, env: Mapping[str, str] | None = None,
        startup_seconds: float = STARTUP_SECONDS,
    ) -> None:
        self.name = name
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self._temporary = log is None
        if log is None:
            fd, path = tempfile.mkstemp(prefix=f"ffwd-bench-{name}-", suffix=".log")
            os.close(fd)
            log = Path(path)
        self.log = log
        with log.open("w") as fh:  # by default FFWD_* settings and all are inherited
            self.proc = subprocess.Popen(command, stdout=fh, stderr=subprocess.STDOUT, env=env)
        self._wait_healthy(startup_seconds)

    def _wait_healthy(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
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
        raise RuntimeError(f"{self.name} was not healthy after {seconds} s:\n{self.tail()}")

    def tail(self, chars: int = 3000) -> str:
        return self.log.read_text(errors="replace")[-chars:]

    def stop(self, timeout: float = 15) -> None:
        """SIGTERM, then SIGKILL after `timeout` s."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._temporary:
            self.log.unlink(missing_ok=True)

    def __enter__(self) -> ChildServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def ffwd_server(
    model: str, backend: str, threads: int, dtype: str, kv_cache: str | None = None,
    deterministic: bool = False, parallel: int | None = None,
) -> ChildServer:
    """``ffwd serve`` on `backend` (llama.cpp: `kv_cache`, None for its default; the
    exact mode where `deterministic`; `parallel` sequences, None for its default);
    FFWD_FILL_* settings in the environment apply."""
    port = free_port()
    cmd = [sys.executable, "-m", "ffwd.cli", "serve", "--model", model, "--backend", backend,
           "--threads", str(threads), "--port", str(port), "--prompt-cache-bytes", "0",
           "--fill", "off", "--dtype", dtype, *(["--kv-cache", kv_cache] if kv_cache else []),
           *(["--deterministic"] if deterministic else []),
           *(["--parallel", str(parallel)] if parallel else [])]
    return ChildServer(f"ffwd-{backend}", cmd, port)


def llama_server(
    gguf: str, threads: int, n_ctx: int, n_batch: int, spec: str | None = None,
    flash: str | None = None, parallel: int = 1, upstream: bool = False,
) -> ChildServer:
    """llama.cpp's server; `spec`: one of its draft-free speculation modes (default off);
    `flash`: its -fa setting (None: its default); `parallel` slots of `n_ctx` ids each;
    `upstream`: the build without patches/llama.cpp.
    It runs in the operator's environment, not ffwd's OpenMP spin (`peer_environment`)."""
    from ffwd.bench.systems.llama_server import command
    from ffwd.config.engine import peer_environment

    port = free_port()
    cmd = command(gguf, port, threads, n_ctx, n_batch, spec, flash, parallel, upstream)
    name = "-".join(["llama-server", *(["upstream"] if upstream else []),
                     *([f"fa-{flash}"] if flash else []), *([spec] if spec else [])])
    return ChildServer(name, cmd, port, env=peer_environment())
