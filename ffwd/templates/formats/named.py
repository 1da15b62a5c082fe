"""Calls written as markup around a name: most tool-call formats.

A reply's calls read ``[section_open] call ... [section_close]``, each call
``call_open NAME name_close ARGUMENTS call_close``. ARGUMENTS is one JSON
object, or, with `Kv`, pairs ``key_open KEY key_close VALUE value_close``
whose values are raw text for strings and JSON (or Python's ``True``) for
the rest. Markers are `ffwd.templates.formats.markers` markers: whitespace
in them matches any, and slots stand for what varies by call.

`Named` describes a format; `NamedParser(spec, tools)` reads one reply
incrementally (the `ToolParser` protocol) and `locate_named(spec, ...)`
finds a rendered call's parts for the row compiler.

>>> from ffwd.templates.formats.named_spec import Kv, Named
>>> glm = Named("<tool_call>", "\\n", "</tool_call>",
...             kv=Kv("<arg_key>", "</arg_key>\\n<arg_value>", "</arg_value>\\n"))
>>> p = NamedParser(glm)
>>> _ = p.feed("Sure.<tool_call>f\\n<arg_key>a</arg_key>\\n<arg_value>5</arg_value>\\n</tool_call>")
>>> p.calls
[ToolCall(name='f', arguments='{"a": 5}')]
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

from ffwd.templates.formats.base import ParseState, ToolCall, ToolCallDelta
from ffwd.templates.formats.jsonscan import JsonScan
from ffwd.templates.formats.marker import MarkerParser, held_suffix
from ffwd.templates.formats.markers import WS, Atom, Choice, Marker, Slot, atoms, first_word, text
from ffwd.templates.formats.named_spec import Named, ObjectScan
from ffwd.templates.formats.values import convert_value, property_schemas


class Part(Enum):
    NAME = "name"
    JSON = "json"
    PAIRS = "pairs"  # another pair, or the end of the arguments
    KEY = "key"
    VALUE = "value"
    CLOSED = "closed"  # the call's markup is read to its end
    NEXT = "next"  # another call of the section, or its end
    DONE = "done"  # the section is read to its end


Item = Atom | Part
FIELDS = (Part.NAME, Part.KEY, Slot.ID, Slot.INDEX, Slot.TYPE)


class NamedParser(MarkerParser):
    """Incremental parser for one reply of a `Named` format."""

    def __init__(self, spec: Named, tools: Sequence[Mapping[str, Any]] | None = None) -> None:
        self.spec = spec
        self.open_marker = spec.open_marker
        self._schemas = property_schemas(tools)
        head = [*atoms(spec.section_open), *atoms(spec.call_open)]
        self._first = head[len(self.open_marker):]
        close = text(spec.call_close)
        self._close_word = first_word(close)
        self._close_rest = atoms(close.strip()[len(self._close_word):])
        super().__init__()

    def _reset_call(self) -> None:
        super()._reset_call()
        self._items: list[Item] = []
        self._i = 0
        self._branch = "open"
        self._field: list[str] = []
        self._choice: Choice | None = None
        self._choice_at = 0
        self._json: ObjectScan | None = None
        self._name: str | None = None
        self._tool: str | None = None
        self._key: str | None = None
        self._type: str | None = None
        self._used: list[str] = []
        self._args: list[str] = []
        self._frag: list[str] = []
        self._done = False  # the call is complete (only closing markup may follow)
        self._tail: list[str] = []  # closing markup read since

    @property
    def state(self) -> ParseState:
        choice = self._choice.progress if self._choice is not None else ()
        js = self._json.where if self._json is not None else ()
        where = (self._mode, self._branch, self._i, choice, js, bool(self._field),
                 self._ending(), self._held, self._after_call)
        started = self._used or self._key is not None or (self._json and self._json.chars)
        name = None if started or self._done else self._name
        if self._json is not None:
            key, used = self._json.key, self._json.used
        elif self._items[self._i:self._i + 1] == [Part.VALUE]:  # the key is written
            key, used = None, (*self._used, *([self._key] if self._key else []))
        else:
            key, used = self._key, tuple(self._used)
        return ParseState(where, self._tool, name, key, used)

    def _ending(self) -> str:
        """Inside a value, the part of its end that may be the start of its closing marker."""
        kv = self.spec.kv
        if kv is None or self._key is None or self._items[self._i:self._i + 1] != [Part.VALUE]:
            return ""
        raw = "".join(self._field[-64:])
        return raw[len(raw) - held_suffix(raw, text(kv.value_close, self._key).strip()):]

    def _call_complete(self) -> bool:
        return self._done

    def _finish_markup(self) -> None:
        if self._done:  # a missing closing marker is forgiven
            self._close_wrapper()
        else:
            self._fail()

    def _flush(self) -> None:
        if self._frag and self._tool is not None:
            self._send("".join(self._frag))
            self._frag = []

    def _begin(self, raw: str, mode: str) -> None:
        super()._begin(raw, mode)
        self._items, self._i = [*self._first, *self._call_items()], 0

    # --- markup, a character at a time -----------------------------------------
    def _markup(self, text_: str) -> str | None:
        for i, c in enumerate(text_):
            self._raw.append(c)
            rest = self._char(c)
            if rest is not None:
                return rest + text_[i + 1:]
            if self._mode == "content":
                return text_[i + 1:]
        return None

    def _char(self, c: str) -> str | None:
        """Read `c`; text to read again as content when the calls ended before it."""
        if self._done:
            self._tail.append(c)
        while self._i < len(self._items):
            item = self._items[self._i]
            if item is WS:
                if c.isspace():
                    return None
                self._i += 1
                continue
            if isinstance(item, str):
                if c != item:
                    return self._mismatch()
                self._i += 1
                return self._settle()
            return self._part(item, c)
        return self._mismatch()

    def _mismatch(self) -> str | None:
        """Markup that does not fit: after a complete call, the call stands and what
        followed it is content; before, the call's text is content."""
        if self._done:
            rest = "".join(self._tail)
            self._close_wrapper()
            return rest
        self._fail()
        return None

    def _settle(self) -> str | None:
        """Run the parts that read no character."""
        while self._i < len(self._items):
            item = self._items[self._i]
            if item is Part.CLOSED:
                self._i += 1
                self._closed()
            elif item is Part.DONE:
                self._close_wrapper()
                return None
            else:
                return None
        return None

    def _part(self, item: Part | Slot, c: str) -> str | None:
        if item in FIELDS:
            return self._field_char(item, c)
        if item is Part.JSON:
            return self._json_char(c)
        if item is Part.VALUE:
            self._value_char(c)
            return None
        return self._choose(item, c)

    def _field_char(self, item: Part | Slot, c: str) -> str | None:
        """A name, key or slot: it ends at whitespace (not a key) or where what follows starts."""
        if not self._field and c.isspace():
            return None
        ends = c in self._stops() or (c.isspace() and item is not Part.KEY)
        if ends:
            value = "".join(self._field).strip()
            if not value and item in (Part.NAME, Part.KEY):
                self._fail()
                return None
            self._field = []
            self._i += 1
            self._field_done(item, value)
            return self._char(c)
        self._field.append(c)
        if item is Part.NAME:
            self._name = "".join(self._field)
        elif item is Part.KEY:
            self._key = "".join(self._field)
        return None

    def _stops(self) -> set[str]:
        """The characters that may start what follows the current field."""
        for a in self._items[self._i + 1:]:
            if isinstance(a, str):
                return {a}
            if a is Part.JSON:
                return {"{"}
            if a is Part.PAIRS:
                assert self.spec.kv is not None
                return {_first_char(self.spec.kv.key_open), _first_char(self.spec.call_close)}
            if a is not WS:
                return set()
        return set()

    def _field_done(self, item: Part | Slot, value: str) -> None:
        if item is Part.NAME:
            self._name = self._tool = value
            self._out.append(ToolCallDelta(len(self.calls), name=value))
        elif item is Part.KEY:
            self._key = value
        elif item is Slot.TYPE:
            self._type = value

    def _json_char(self, c: str) -> str | None:
        if self._json is None:
            self._json = self.spec.dialect.scan() if self.spec.dialect else JsonScan()
        written = len(self._json.chars)
        got = self._json.feed(c)
        if got is False:
            self._fail()
            return None
        self._frag.extend(self._json.chars[written:])
        if got:
            if not isinstance(self._json.value(), dict):
                self._fail()
                return None
            self._i += 1
            self._complete(self._json.text)
            return self._settle()
        return None

    def _value_char(self, c: str) -> None:
        self._field.append(c)
        kv = self.spec.kv
        assert kv is not None and self._key is not None
        close = text(kv.value_close, self._key).strip()
        raw = "".join(self._field)
        if not raw.endswith(close):
            return
        raw = _trim(raw[: len(raw) - len(close)], text(kv.key_close), text(kv.value_close))
        key, self._field, self._key = self._key, [], None
        is_string = kv.is_string(self._type) if kv.is_string and self._type is not None else None
        schema = self._schemas.get(self._tool or "", {}).get(key)
        value = convert_value(raw, schema, is_string)
        piece = json.dumps(key, ensure_ascii=False) + ": " + json.dumps(value, ensure_ascii=False)
        self._send(("{" if not self._args else ", ") + piece)
        self._used.append(key)
        self._type = None
        self._i += 1

    def _choose(self, item: Part | Slot, c: str) -> str | None:
        """A branch: another pair or the end of the arguments; another call or the
        end of the section."""
        if self._choice is None:
            self._choice, self._choice_at = Choice(self._options(item)), len(self._raw) - 1
        got = self._choice.feed(c)
        if got is None:
            return None
        if got is False or got is True:
            if item is Part.NEXT:  # the section ends unclosed: what follows is content
                rest = "".join(self._raw[self._choice_at:])
                self._close_wrapper()
                return rest
            return self._mismatch()
        branch, again = got
        left = self._choice.rest(branch)
        self._choice, self._branch = None, branch
        self._items, self._i = [*left, *self._follow(item, branch)], 0
        if item is Part.PAIRS and branch == "end":
            self._send("}" if self._args else "{}")
            self._complete("".join(self._args))
        out = self._settle()
        for ch in self._raw[len(self._raw) - again:] if again else ():
            if out is not None or self._mode == "content":
                break
            out = self._char(ch)
        return out

    def _options(self, item: Part | Slot) -> dict[str, list[Atom]]:
        spec = self.spec
        if item is Part.PAIRS:
            assert spec.kv is not None
            return {"key": atoms(spec.kv.key_open), "end": atoms(self._close_word)}
        return {"call": atoms(spec.call_open), "end": atoms(spec.section_close)}

    def _follow(self, item: Part | Slot, branch: str) -> list[Item]:
        if branch == "key":
            assert self.spec.kv is not None
            return [Part.KEY, *atoms(self.spec.kv.key_close), Part.VALUE, Part.PAIRS]
        if branch == "call":
            return self._call_items()
        if item is Part.PAIRS:
            return [*self._close_rest, Part.CLOSED]
        return [Part.DONE]

    def _call_items(self) -> list[Item]:
        spec = self.spec
        args: list[Item] = [Part.PAIRS] if spec.kv else [Part.JSON, *atoms(spec.call_close),
                                                         Part.CLOSED]
        return [Part.NAME, *atoms(spec.name_close), *args]

    def _complete(self, arguments: str) -> None:
        """The call is complete: it counts, whatever closing markup follows."""
        self._flush()
        self.calls.append(ToolCall(self._tool or "", arguments))
        self._done, self._tail = True, []

    def _closed(self) -> None:
        """The call's closing markup is read: another call of the section may follow."""
        self._reset_call()
        self._branch = "after"
        if self.spec.section_open and self.spec.section_close:
            self._items, self._i = [Part.NEXT], 0
        else:
            self._close_wrapper()

    def _send(self, fragment: str) -> None:
        if self._json is None:
            self._args.append(fragment)
        self._out.append(ToolCallDelta(len(self.calls), arguments=fragment))


def _first_char(marker: Marker) -> str:
    return next((a for a in atoms(marker) if isinstance(a, str)), "")


def _trim(raw: str, before: str, after: str) -> str:
    """A value without the whitespace its markers put around it (one newline each side)."""
    lead = before[len(before.rstrip()):]
    trail = after[: len(after) - len(after.lstrip())]
    if lead and raw.startswith(lead):
        raw = raw[len(lead):]
    if trail and raw.endswith(trail):
        raw = raw[: len(raw) - len(trail)]
    return raw
