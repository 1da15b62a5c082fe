"""A known assistant turn with tool calls, rendered through a chat template, and read back.

`probe_turn(template, calls)` is the text an assistant turn of `calls` (of
`PROBE_TOOLS`) adds to a conversation; `reads(fmt, text, calls)` says whether
a format's parser reads exactly those calls out of it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ffwd.templates.formats.base import ToolFormat
from ffwd.templates.render import render_chat

PROBE_TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather now.",
     "parameters": {"type": "object", "properties": {
         "city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "description": "Time now.",
     "parameters": {"type": "object", "properties": {
         "zone": {"type": "string"}, "exact": {"type": "boolean"}}, "required": ["zone"]}}},
]
PROBE_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("get_weather", {"city": "Paris", "days": 3}), ("get_time", {"zone": "UTC", "exact": True})]
USER = {"role": "user", "content": "Weather and time in Paris?"}


def assistant_message(calls: Sequence[tuple[str, Mapping[str, Any]]],
                      content: str | None = None, first_id: int = 0) -> dict[str, Any]:
    """An assistant turn making `calls` as clients send it back: each call with its id,
    ``call{first_id}`` on (templates write ids: Solar's, Mistral's, Command-R's)."""
    return {"role": "assistant", "content": content, "tool_calls": [
        {"id": f"call{first_id + i}", "type": "function",
         "function": {"name": n, "arguments": dict(a)}} for i, (n, a) in enumerate(calls)]}


def probe_turn(template: str, calls: Sequence[tuple[str, Mapping[str, Any]]],
               tokenizer: Any = None, tools: Sequence[Mapping[str, Any]] = PROBE_TOOLS) -> str:
    """What an assistant turn of `calls` (of `tools`) adds to the conversation's text."""
    message = assistant_message(calls)
    full = render_chat(template, [USER, message], tools, False, tokenizer)
    # The turn as a generation continues it; where the generation prompt opens what a
    # written turn does not (a reasoning block), from the end of the user's turn.
    for generation in (True, False):
        prompt = render_chat(template, [USER], tools, generation, tokenizer)
        if full.startswith(prompt):
            return full[len(prompt):]
    raise ValueError("the template renders the conversation's start differently once an "
                     "assistant turn follows")


def reads(fmt: ToolFormat, text: str, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> bool:
    """Whether `fmt`'s parser reads exactly `calls` out of `text`."""
    parser = fmt.new_parser(PROBE_TOOLS)
    parser.feed(text)
    parser.finish()
    try:
        got = [(c.name, json.loads(c.arguments)) for c in parser.calls]
    except json.JSONDecodeError:
        return False
    return got == [(n, dict(a)) for n, a in calls]
