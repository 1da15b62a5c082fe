"""harmony: OpenAI's gpt-oss. A call is a message whose header names a recipient.

The template writes the recipient in the role header,
``<|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{...}<|call|>``
(the generation prompt ends at ``<|start|>assistant``); models also write it in
the channel header, ``<|channel|>commentary to=functions.NAME <|constrain|>json
<|message|>{...}<|call|>``. Both are read. The header's text after the name
(channel, content type) is a `HEAD` slot; the header before the recipient is
held back while it may still turn out to be a call's, so no markup of a call
reaches the client as content. One call a message: ``<|call|>`` ends the turn.

Which header the recipient sits in is part of the parser's state, so rows cut
from the template's renderings (the role header) fire only on calls written
that way.

>>> p = FORMAT.new_parser()
>>> _ = p.feed("<|channel|>commentary to=functions.f <|constrain|>json<|message|>")
>>> _ = p.feed('{"a": 1}<|call|>')
>>> p.calls
[ToolCall(name='f', arguments='{"a": 1}')]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from ffwd.templates.formats.base import CallLayout, ParseState, ToolFormat
from ffwd.templates.formats.marker import held_suffix
from ffwd.templates.formats.markers import HEAD, Slot
from ffwd.templates.formats.named import NamedParser, Part
from ffwd.templates.formats.named_layout import locate_named
from ffwd.templates.formats.named_spec import Named

SPEC = Named("to=functions.", (HEAD, "<|message|>"), "<|call|>")
MESSAGE, HEADERS = "<|message|>", ("<|start|>", "<|channel|>")
MAX_HEAD = 64  # characters of header after the name: more is no call's


class HarmonyParser(NamedParser):
    def __init__(self, tools: Sequence[Mapping[str, Any]] | None = None) -> None:
        super().__init__(SPEC, tools)
        self._form = ""

    @property
    def state(self) -> ParseState:
        base = super().state
        return replace(base, where=(*base.where, self._form))

    def _content(self, text: str) -> str | None:
        """Content up to the header of a call; the header itself goes with the call."""
        s = self._held + text
        self._held = ""
        i = s.find(self.open_marker)
        head = _header_start(s if i < 0 else s[:i])
        if i < 0:
            keep = max(len(s) - head if head >= 0 else 0,
                       *(held_suffix(s, m) for m in (self.open_marker, *HEADERS)))
            self._emit(s[: len(s) - keep])
            self._held = s[len(s) - keep:]
            return None
        cut = head if head >= 0 else i
        self._emit(s[:cut])
        self._begin(s[cut:i] + self.open_marker, "open")
        self._form = "channel" if "<|channel|>" in s[cut:i] else "role"
        return s[i + len(self.open_marker):]

    def _part(self, item: Part | Slot, c: str) -> str | None:
        if item is not HEAD:
            return super()._part(item, c)
        self._field.append(c)
        rest = self._items[self._i + 1:]
        literal = "".join(a for a in rest[: len(MESSAGE)] if isinstance(a, str))
        field = "".join(self._field)
        if field.endswith(literal):
            self._field = []
            self._i += 1 + len(literal)
            return self._settle()
        if len(field) > MAX_HEAD + len(literal):
            return self._mismatch()
        return None

    def _stops(self) -> set[str]:
        if self._items[self._i + 1: self._i + 2] == [HEAD]:  # the name ends at the header
            return {"<"}
        return super()._stops()


def _header_start(text: str) -> int:
    """Where the last message header in `text` that has not reached its message begins
    (-1: none is open)."""
    after = text.rfind(MESSAGE)
    after = 0 if after < 0 else after + len(MESSAGE)
    found = [j for j in (text.find(h, after) for h in HEADERS) if j >= 0]
    return min(found) if found else -1


def _parser(tools: Sequence[Mapping[str, Any]] | None = None) -> HarmonyParser:
    return HarmonyParser(tools)


def _locate(text: str, start: int, name: str, args: Mapping[str, Any]) -> CallLayout | None:
    return locate_named(SPEC, text, start, name, args)


FORMAT = ToolFormat("harmony", SPEC.open_marker, _parser, _locate, parallel=False,
                    models="gpt-oss")
