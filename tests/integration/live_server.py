"""A live `ffwd serve` process on a free loopback port (used by conftest.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ffwd.bench.systems.servers import ChildServer, free_port

ROOT = Path(__file__).resolve().parents[2]


class Server(ChildServer):
    """``ffwd serve ARGS``; its log stays in .pytest_cache for a failing test to show."""

    def __init__(self, *args: str) -> None:
        port = free_port()
        log = ROOT / ".pytest_cache" / f"serve-{port}.log"
        log.parent.mkdir(exist_ok=True)
        cmd = [sys.executable, "-m", "ffwd.cli", "serve", "--port", str(port), *args]
        super().__init__("ffwd serve", cmd, port, log=log, startup_seconds=300,
                         env={**os.environ, "TOKENIZERS_PARALLELISM": "false"})
