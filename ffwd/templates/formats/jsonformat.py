"""A `JsonFraming` as a `ToolFormat`: its parser and where its rendered calls sit."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ffwd.templates.formats.base import CallLayout, ToolFormat
from ffwd.templates.formats.jsoncall import JsonCallParser, JsonFraming
from ffwd.templates.formats.jsonlayout import locate_json_call


def json_format(name: str, framing: JsonFraming, *, builtin: str | None = None,
                parallel: bool = True, models: str = "") -> ToolFormat:
    """The `ToolFormat` of calls framed by `framing`."""
    shared = bool(framing.list_open or framing.end)  # later calls follow the first's marker

    def locate(text: str, start: int, fn: str, args: Mapping[str, Any]) -> CallLayout | None:
        if shared and text.find(framing.open, start) < 0:
            return locate_json_call(text, start, fn, args, "")
        return locate_json_call(text, start, fn, args, framing.open)

    def parser(tools: Sequence[Mapping[str, Any]] | None = None) -> JsonCallParser:
        return JsonCallParser(framing)

    return ToolFormat(name, framing.open, parser, locate,
                      parallel=parallel, builtin=builtin, models=models)
