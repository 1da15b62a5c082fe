"""hermes: ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``.

Qwen2.5, Hermes and SmolLM-style models; the builtin for models whose own
template has no tools (the embedded SmolLM2 among them).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ffwd.templates.formats.base import CallLayout, ToolFormat
from ffwd.templates.formats.jsoncall import JsonFraming, json_parser_factory
from ffwd.templates.formats.jsonlayout import locate_json_call

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
FRAMING = JsonFraming(open=OPEN, close=CLOSE)


def locate(text: str, start: int, name: str, args: Mapping[str, Any]) -> CallLayout | None:
    return locate_json_call(text, start, name, args, OPEN)


FORMAT = ToolFormat(
    name="hermes",
    open_marker=OPEN,
    builtin="hermes",
    signatures=(OPEN,),
    parser=json_parser_factory(FRAMING),
    locate=locate,
)
