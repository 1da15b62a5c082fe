"""Fill settings as the server's defaults give them (a plain module for the unit tests)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from ffwd.config import FillConfig
from ffwd.fill import EchoConfig


def echo_config(**changes: Any) -> EchoConfig:
    """`ffwd.config`'s echo settings, with `changes`."""
    base = FillConfig(mode="echo").echo_config()
    assert base is not None
    return replace(base, **changes)
