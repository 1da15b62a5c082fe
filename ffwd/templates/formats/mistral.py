"""mistral: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``, then EOS."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ffwd.templates.formats.base import CallLayout, ToolFormat
from ffwd.templates.formats.jsoncall import JsonFraming, json_parser_factory
from ffwd.templates.formats.jsonlayout import locate_json_call

OPEN = "[TOOL_CALLS]"
FRAMING = JsonFraming(open=OPEN, list_open="[", list_close="]", separator=",")


def locate(text: str, start: int, name: str, args: Mapping[str, Any]) -> CallLayout | None:
    if text.find(OPEN, start) < 0:  # later calls of one list follow the first's marker
        return locate_json_call(text, start, name, args, "")
    return locate_json_call(text, start, name, args, OPEN)


FORMAT = ToolFormat(
    name="mistral",
    open_marker=OPEN,
    builtin="mistral",
    signatures=(OPEN,),
    parser=json_parser_factory(FRAMING),
    locate=locate,
)
