"""Fill settings: FFWD_FILL and the FFWD_FILL_* variables, per process and per request.

    FFWD_FILL                   off|strict|echo (0/1 alias off/strict)   off
    FFWD_FILL_MAX_SPAN          longest injected span, 2..4096            64
    FFWD_FILL_APPEND_CHUNK_SIZE ids per append forward, 0 = backend max   0
    FFWD_FILL_K                 echo anchor length, 2..64                 3
    FFWD_FILL_CANDIDATES        echo occurrences kept per k-gram, 1..1024 8
    FFWD_FILL_INDEX_MAX         ids the echo index remembers, >= 1024     131072
    FFWD_FILL_TRACE             1 (checks) or a .jsonl path (records)     off
    FFWD_GRAMMAR                on|off: constrain tool calls by grammar   on
    FFWD_FILL_RECALL            on|off: echo from earlier outputs too     on
    FFWD_FILL_RECALL_BYTES      the earlier outputs' index, 0 = none      64 MiB

A request's ``ffwd`` object may override the fill settings (`FillConfig.for_request`),
with JSON types only and never a resource of the server: tracing can be switched
off, or on when the operator configured it, but the trace file is the server's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from ffwd.fill.echo import EchoConfig
from ffwd.values import Parser, SettingError, flag, int_in, parse_settings, trace_target

FillMode = Literal["off", "strict", "echo"]
FILL_MODES: tuple[FillMode, ...] = ("off", "strict", "echo")

_MODE_ALIASES: dict[str, FillMode] = {
    "": "off", "off": "off", "0": "off",
    "strict": "strict", "1": "strict",
    "echo": "echo",
}


def resolve_fill_mode(raw: object) -> FillMode:
    """Map a raw FFWD_FILL value to off|strict|echo, or raise naming FFWD_FILL."""
    if raw is None:
        return "off"
    key = raw.strip().lower() if isinstance(raw, str) else raw
    if isinstance(key, str) and key in _MODE_ALIASES:
        return _MODE_ALIASES[key]
    raise SettingError("FFWD_FILL", raw, "off|strict|echo (or 0/1 for off/strict)")


# field -> (environment variable, parser); the request and the flags say "fill" for `mode`.
_FILL_SETTINGS: dict[str, tuple[str, Parser]] = {
    "mode": ("FFWD_FILL", resolve_fill_mode),
    "max_span": ("FFWD_FILL_MAX_SPAN", int_in("FFWD_FILL_MAX_SPAN", 2, 4096)),
    "append_chunk_size": (
        "FFWD_FILL_APPEND_CHUNK_SIZE", int_in("FFWD_FILL_APPEND_CHUNK_SIZE", 0, 1 << 16),
    ),
    "k": ("FFWD_FILL_K", int_in("FFWD_FILL_K", 2, 64)),
    "candidates": ("FFWD_FILL_CANDIDATES", int_in("FFWD_FILL_CANDIDATES", 1, 1024)),
    "index_max": ("FFWD_FILL_INDEX_MAX", int_in("FFWD_FILL_INDEX_MAX", 1024, 1 << 24)),
    "trace": ("FFWD_FILL_TRACE", trace_target),
    "grammar": ("FFWD_GRAMMAR", flag("FFWD_GRAMMAR", "on or off (or 1/0)")),
    "recall": ("FFWD_FILL_RECALL", flag("FFWD_FILL_RECALL", "on or off (or 1/0)")),
    "recall_bytes": ("FFWD_FILL_RECALL_BYTES",
                     int_in("FFWD_FILL_RECALL_BYTES", 0, 1 << 40)),
}
_FILL_ALIASES = {"fill": "mode"}
# The JSON type each request override must have (strict: no "8" for 8, no true for 1).
REQUEST_FILL_TYPES: dict[str, type] = {
    "fill": str, "max_span": int, "append_chunk_size": int, "k": int, "candidates": int,
    "index_max": int, "trace": bool, "grammar": bool, "recall": bool,
}


@dataclass(frozen=True, slots=True)
class FillConfig:
    """Resolved fill settings for a process or a request: every fill default, written
    once (they come from `ffwd bench` and `python -m tools.acceptance`)."""

    mode: FillMode = "off"
    # A copy that matches far back is drafted long at once, as llama.cpp's ngram-mod
    # drafts 48-64 ids; the span policy (ffwd.fill.spans) forwards only what pays.
    max_span: int = 64
    append_chunk_size: int = 0
    k: int = 3
    candidates: int = 8
    index_max: int = 131072
    trace: str | bool = False
    # Tool calls under a grammar (ffwd.grammar); response_format is constrained either way.
    grammar: bool = True
    # Echo also copies from earlier requests' outputs (ffwd.fill.recall), in an index of
    # at most `recall_bytes` per server (0: none); a request may switch it off.
    recall: bool = True
    recall_bytes: int = 64 << 20

    @property
    def strict_rows(self) -> bool:
        """Whether template and schema rows fire (in ``strict`` and in ``echo``)."""
        return self.mode in ("strict", "echo")

    @property
    def trace_path(self) -> str | None:
        return self.trace if isinstance(self.trace, str) else None

    @property
    def trace_checks(self) -> bool:
        """Cache-alignment assertions are on whenever tracing is on."""
        return self.trace is not False

    def echo_config(self) -> EchoConfig | None:
        if self.mode != "echo":
            return None
        return EchoConfig(
            k=self.k, max_span=self.max_span,
            max_candidates=self.candidates, index_max=self.index_max,
        )

    def with_overrides(self, overrides: Mapping[str, object] | None) -> FillConfig:
        """A copy with trusted (CLI, library) overrides applied (None values ignored)."""
        if not overrides:
            return self
        return replace(self, **parse_settings("fill", _FILL_SETTINGS, {}, overrides, _FILL_ALIASES))

    def for_request(self, overrides: Mapping[str, object] | None) -> FillConfig:
        """A copy with a request's ``ffwd`` overrides applied, under the request rules.

        Values must have their JSON type (`REQUEST_FILL_TYPES`) and the same
        ranges as the variables. ``trace`` is a switch only: ``false`` turns
        tracing off for this request, ``true`` keeps the server's own setting
        and is refused when the operator did not configure tracing. A request
        never names a file. Raises `SettingError` named ``ffwd.<key>``.

        >>> FillConfig(trace="/var/log/t.jsonl").for_request({"trace": False}).trace
        False
        >>> FillConfig().for_request({"k": "4"})
        Traceback (most recent call last):
        ...
        ffwd.values.SettingError: ffwd.k='4': expected a JSON integer
        """
        values: dict[str, Any] = {}
        for key, raw in (overrides or {}).items():
            name = f"ffwd.{key}"
            kind = REQUEST_FILL_TYPES.get(key)
            if kind is None:
                keys = ", ".join(REQUEST_FILL_TYPES)
                msg = f"unknown setting {name}: expected one of {keys}"
                raise SettingError(name, raw, keys, msg)
            if raw is None:
                continue
            if type(raw) is not kind:
                raise SettingError(name, raw, f"a JSON {_JSON_NAMES[kind]}")
            if key == "trace":
                if raw and self.trace is False:
                    raise SettingError(name, raw, "false: tracing is off on this server (the "
                                       "operator turns it on with FFWD_FILL_TRACE or --fill-trace)")
                values["trace"] = self.trace if raw else False
                continue
            field = _FILL_ALIASES.get(key, key)
            try:
                values[field] = _FILL_SETTINGS[field][1](raw)
            except SettingError as exc:
                raise SettingError(name, raw, exc.expected) from None
        return replace(self, **values)


_JSON_NAMES = {str: "string", int: "integer", bool: "boolean (true or false)"}

#
# Fill mode: chosen from `ffwd bench --workload all` (README's performance
# section): echo was the fastest mode on forced calls, edits and prose.
SERVER_DEFAULT_FILL: FillMode = "echo"


def resolve_fill_config(
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
    default_mode: FillMode = "off",
) -> FillConfig:
    """Fill settings from the environment (or `env`), then `overrides` on top.

    `default_mode` applies when neither says which mode (the server passes its own).
    """
    env = os.environ if env is None else env
    base = FillConfig(mode=resolve_fill_mode(default_mode))
    return replace(base, **parse_settings("fill", _FILL_SETTINGS, env, overrides, _FILL_ALIASES))
