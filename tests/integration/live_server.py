"""A live `ffwd serve` process on a free loopback port (used by conftest.py)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = ROOT / ".pytest_cache" / f"serve-{self.port}.log"
        self.log.parent.mkdir(exist_ok=True)
        cmd = [sys.executable, "-m", "ffwd.cli", "serve", "--port", str(self.port), *args]
        self._fh = self.log.open("w")
        self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=self._fh, stderr=subprocess.STDOUT,
                                     env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ffwd serve exited: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError("ffwd serve did not become healthy in 300 s")

    def stop(self, timeout: float = 10) -> None:
        """SIGTERM, then SIGKILL after `timeout` s (a Ray cluster needs ~15 s to go down)."""
        self.proc.terminate()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._fh.close()
