"""Tool-call formats: one module each, one line each in the registry below.

``FORMATS`` maps each format's name to its `ToolFormat` (parser, layout, how
its arguments are written), in the order `recognize` tries them.
``get_format(name)`` returns one (``ValueError`` naming the accepted names
otherwise). ``recognize(template, tokenizer)`` renders a known assistant turn
with tool calls through a chat template and returns the format that reads
those calls back exactly, or one derived from the rendering, or None with
the reason (`ffwd.templates.formats.recognize`).
"""

from __future__ import annotations

from ffwd.templates.formats.base import (
    ContentDelta,
    Delta,
    ParseState,
    ToolCall,
    ToolCallContext,
    ToolCallDelta,
    ToolFormat,
    ToolParser,
)
from ffwd.templates.formats.recognize import Recognized, recognize
from ffwd.templates.formats.registry import FORMATS, as_format, get_format

__all__ = [
    "FORMATS",
    "ContentDelta",
    "Delta",
    "ParseState",
    "Recognized",
    "ToolCall",
    "ToolCallContext",
    "ToolCallDelta",
    "ToolFormat",
    "ToolParser",
    "as_format",
    "get_format",
    "recognize",
]
