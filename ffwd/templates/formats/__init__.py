"""Tool-call formats: one module each, looked up by name.

``FORMATS`` maps ``hermes``, ``qwen_xml``, ``llama3_json`` and ``mistral`` to
their `ToolFormat`. ``get_format(name)`` returns one (``ValueError`` naming
the accepted names otherwise); ``detect_format(template_text)`` picks the
format a chat template writes. Each format has ``open_marker``,
``builtin_template``, ``new_parser(tools=None)`` (incremental: ``feed``,
``finish``, ``calls``, ``held_back``, ``state``) and
``new_context(tokenizer, rules)`` (a fresh per-request `StrictFillContext`;
`ffwd.templates.rows.CompiledTools.new_context` supplies the rules).
"""

from __future__ import annotations

from ffwd.templates.formats import hermes, llama3_json, mistral, qwen_xml
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

FORMATS: dict[str, ToolFormat] = {
    f.name: f for f in (hermes.FORMAT, qwen_xml.FORMAT, llama3_json.FORMAT, mistral.FORMAT)
}

# Most specific first: qwen_xml templates also contain "<tool_call>".
_DETECT_ORDER = ("qwen_xml", "mistral", "hermes", "llama3_json")


def get_format(name: str) -> ToolFormat:
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(
            f"tool-call format {name!r}: expected one of {', '.join(FORMATS)}"
        ) from None


def detect_format(template_text: str) -> str:
    """The format whose markers the template writes.

    >>> detect_format('{{ "<tool_call>\\\\n<function=" + name }}')
    'qwen_xml'
    """
    for name in _DETECT_ORDER:
        if any(sig in template_text for sig in FORMATS[name].signatures):
            return name
    raise ValueError(
        "cannot tell which tool-call format this chat template writes; "
        f"pass one explicitly (one of {', '.join(FORMATS)})"
    )


__all__ = [
    "FORMATS",
    "ContentDelta",
    "Delta",
    "ParseState",
    "ToolCall",
    "ToolCallContext",
    "ToolCallDelta",
    "ToolFormat",
    "ToolParser",
    "detect_format",
    "get_format",
]
