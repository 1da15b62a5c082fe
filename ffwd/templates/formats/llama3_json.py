"""llama3_json: ``{"name": ..., "parameters": {...}}`` as the whole assistant message.

Llama 3.1/3.2 style. A message whose first non-blank character is ``{`` is
read as a call; one call per message (``;`` separated calls are accepted).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ffwd.templates.formats.base import CallLayout, ToolFormat
from ffwd.templates.formats.jsoncall import JsonFraming, json_parser_factory
from ffwd.templates.formats.jsonlayout import locate_json_call

FRAMING = JsonFraming(open="", separator=";")


def locate(text: str, start: int, name: str, args: Mapping[str, Any]) -> CallLayout | None:
    return locate_json_call(text, start, name, args, "")


FORMAT = ToolFormat(
    name="llama3_json",
    open_marker="",
    builtin="llama3_json",
    signatures=('"parameters"', "<|python_tag|>", "ipython"),
    parser=json_parser_factory(FRAMING),
    locate=locate,
    parallel=False,
)
