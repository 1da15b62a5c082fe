"""Fixtures of the integration tier: live servers on the embedded model."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.live_server import Server


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    s = Server("--fill", "echo")  # llama.cpp: auto for the embedded GGUF on the CPU
    yield s
    s.stop()


@pytest.fixture(scope="session")
def exact_server() -> Iterator[Server]:
    """The default configuration under --deterministic: greedy output is bit-identical
    however it is computed (cold or warm cache, streamed or whole, fill on or off)."""
    s = Server("--fill", "echo", "--deterministic")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def guarded_server() -> Iterator[Server]:
    """With an API key, one sequence at a time and a one-request queue."""
    s = Server("--api-key", "s3cret", "--max-queue", "1", "--parallel", "1")
    yield s
    s.stop()
