"""Which tool-call format a chat template writes, read off its own rendering.

`recognize(template, tokenizer=None)` renders a known assistant turn (two
calls of two tools, string, integer and boolean arguments; one call where
the template takes one a turn) through the template and feeds what the turn
added to every registered format's parser, in registry order: the first
that reads back exactly those calls is the template's format. Where none
does, `ffwd.templates.formats.derive` cuts a format out of the rendering
(the markup around the name and the arguments) and keeps it if it reads the
calls back. Otherwise the answer is None, with the reason, and the model
serves plain chat.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ffwd.templates.formats.base import ToolFormat
from ffwd.templates.formats.derive import derive
from ffwd.templates.formats.probe import PROBE_CALLS, probe_turn, reads
from ffwd.templates.formats.registry import FORMATS


@dataclass(frozen=True)
class Recognized:
    """A template's format (None: it has none ffwd reads) and how it was found."""

    format: ToolFormat | None
    how: str  # "rendered", "derived", or why there is no format


def recognize(template: str, tokenizer: Any = None) -> Recognized:
    """The format `template` writes (see the module docstring)."""
    turns: list[tuple[str, list[tuple[str, dict[str, Any]]]]] = []
    for calls in (PROBE_CALLS, PROBE_CALLS[:1]):
        try:
            turns.append((probe_turn(template, calls, tokenizer), calls))
        except ValueError as exc:
            why = str(exc)
    if not turns:
        return Recognized(None, f"the template cannot render a tool call ({why})")
    for fmt in FORMATS.values():
        if any(reads(fmt, text, calls) for text, calls in turns if fmt.parallel or len(calls) == 1):
            return Recognized(fmt, "rendered")
    derived = derive(template, tokenizer)
    if derived is not None:
        return Recognized(derived, "derived")
    text, _ = turns[-1]
    if "get_weather" not in text:
        return Recognized(None, "the template does not write an assistant's tool calls")
    return Recognized(None, "no known format reads the template's tool calls, and none could "
                            "be derived from them")
