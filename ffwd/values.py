"""Parsers of setting values: each takes a raw value (an environment string, a flag,
a JSON value) and returns it checked, or raises `SettingError` naming the setting,
the value and what it accepts. Nothing here reads the environment (`ffwd.config` does).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

Parser = Callable[[object], Any]


class SettingError(ValueError):
    """A malformed setting; `name` is the variable (or the request's ``ffwd.<key>``)."""

    def __init__(self, name: str, raw: object, expected: str, message: str | None = None) -> None:
        super().__init__(message or f"{name}={raw!r}: expected {expected}")
        self.name = name
        self.expected = expected


def int_in(var: str, minimum: int, maximum: int | None = None) -> Callable[[object], int]:
    """A parser of integers in ``[minimum, maximum]`` (digits only: no signs, no floats)."""
    expected = f"an integer >= {minimum}" if maximum is None else (
        f"an integer from {minimum} to {maximum}")

    def parse(raw: object) -> int:
        value: int | None = None
        if isinstance(raw, int) and not isinstance(raw, bool):
            value = raw
        elif isinstance(raw, str) and raw.strip().lstrip("+").isdigit() and len(raw) < 20:
            value = int(raw.strip())
        if value is None or value < minimum or (maximum is not None and value > maximum):
            raise SettingError(var, raw, expected)
        return value

    return parse


def float_at_least(var: str, minimum: float) -> Callable[[object], float]:
    """A parser of finite numbers >= `minimum`."""

    def parse(raw: object) -> float:
        value = None
        if isinstance(raw, int | float | str) and not isinstance(raw, bool):
            with contextlib.suppress(ValueError):
                value = float(raw)
        if value is None or not minimum <= value < float("inf"):
            raise SettingError(var, raw, f"a number >= {minimum:g}")
        return value

    return parse


ON, OFF = ("1", "true", "on", "yes"), ("", "0", "false", "off", "no")


def flag(var: str, expected: str = "1 or 0") -> Callable[[object], bool]:
    """A parser of on/off switches (1/0, true/false, on/off, yes/no; empty is off)."""

    def parse(raw: object) -> bool:
        s = raw.strip().lower() if isinstance(raw, str) else raw
        if isinstance(raw, bool) or s in ON or s in OFF:
            return bool(raw) if isinstance(raw, bool) else s in ON
        raise SettingError(var, raw, expected)

    return parse


def choice(var: str, options: tuple[str, ...], aliases: Mapping[str, str] | None = None) -> Any:
    """A parser of one of `options` (any case; unset or empty is the first, the default)."""

    def parse(raw: object) -> Any:
        key = raw.strip().lower() if isinstance(raw, str) else "" if raw is None else raw
        key = (aliases or {}).get(key, key) if isinstance(key, str) else key
        if key == "" or key in options:
            return key or options[0]
        raise SettingError(var, raw, f"one of {'|'.join(options)}")

    return parse


def trace_target(raw: object) -> str | bool:
    """FFWD_FILL_TRACE: False (off), True (invariant checks only) or a JSONL file's path."""
    if raw is None or isinstance(raw, bool):
        return bool(raw)
    if isinstance(raw, str):
        s = raw.strip()
        return True if s.lower() in ON else False if s.lower() in OFF else s
    raise SettingError("FFWD_FILL_TRACE", raw, "1, 0 or a path to a .jsonl file")


def parse_settings(
    kind: str,
    table: Mapping[str, tuple[str, Parser]],
    env: Mapping[str, str],
    overrides: Mapping[str, object] | None,
    aliases: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Parsed values from `env` (by variable name), then non-None `overrides` (by key,
    or by an alias of one)."""
    values = {key: parse(env[var]) for key, (var, parse) in table.items() if var in env}
    for name, raw in (overrides or {}).items():
        key = (aliases or {}).get(name, name)
        if key not in table:
            raise ValueError(f"unknown {kind} setting {name!r}: expected one of {', '.join(table)}")
        if raw is not None:
            values[key] = table[key][1](raw)
    return values
