"""The incremental parser and layout shared by the JSON tool-call formats.

A call is one JSON object ``{"name": ..., "arguments": {...}}`` (or
``"parameters"``); formats differ only in the framing around the objects
(`JsonFraming`): hermes wraps each in ``<tool_call>``/``</tool_call>``,
mistral lists them after ``[TOOL_CALLS]``, llama3_json makes the object the
whole message.

The parser scans characters with a container stack, so it always knows the
nesting depth, whether it is inside a string, and which argument key is being
written. It validates each finished call with `json.loads`; anything it cannot
parse is returned as content.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ffwd.templates.formats.base import ParseState, ToolCall, ToolCallDelta
from ffwd.templates.formats.marker import MarkerParser

_SCALAR = set("0123456789+-.eEtruefalsn")
_DECODER = json.JSONDecoder()


@dataclass(frozen=True, slots=True)
class JsonFraming:
    open: str  # marker before the call objects; "" = a call is the whole message
    close: str = ""  # tag after each object (hermes)
    list_open: str = ""  # "[" when the objects form a list (mistral)
    list_close: str = ""
    separator: str = ""  # between objects of one wrapper: "," (mistral), ";" (llama3)
    end: str = ""  # after the last object (or the list): Apriel's "</tool_calls>"
    name_keys: tuple[str, ...] = ("name",)  # Command-R: "tool_name"
    args_keys: tuple[str, ...] = ("arguments", "parameters")


class _Frame:
    __slots__ = ("expect", "key", "kind")

    def __init__(self, kind: str) -> None:
        self.kind = kind  # "{" or "["
        self.expect = "first"  # first | key | colon | value | comma
        self.key = ""


class JsonCallParser(MarkerParser):
    """Incremental parser for one message of a JSON tool-call format."""

    def __init__(self, framing: JsonFraming) -> None:
        self.f = framing
        self.open_marker = framing.open
        self._tag = ""  # partial closing tag (hermes)
        self._ending = False  # the list is closed: its closing tag follows
        super().__init__()

    def _reset_call(self) -> None:
        super()._reset_call()
        self._stack: list[_Frame] = []
        self._in_str = False
        self._esc = False
        self._role = ""  # what the open string is: key | name | args | value
        self._scalar = False
        self._buf: list[str] = []  # text of the open key or name string
        self._name: str | None = None
        self._tool: str | None = None
        self._args_open = False  # inside the arguments value
        self._args_seen = False
        self._args_string = False
        self._key: str | None = None
        self._used: list[str] = []
        self._frag: list[str] = []
        self._named = False  # name delta sent

    @property
    def state(self) -> ParseState:
        top = self._stack[-1] if self._stack else None
        where: tuple[object, ...] = (
            self._mode,
            len(self._stack),
            top.expect if top else "",
            self._in_str,
            self._role if self._in_str else "",
            self._scalar,
            self._tag,
            self._ending,
            self._held,
            self._after_call,
            self._at_start and not self.f.open,
        )
        name = None if self._args_seen else self._name
        return ParseState(where, self._tool, name, self._key, tuple(self._used))

    def _content(self, text: str) -> str | None:
        if self.f.open:
            return super()._content(text)
        # A call can only be the whole message: it starts with "{".
        s = self._held + text
        self._held = ""
        if self._at_start:
            body = s.lstrip()
            if not body:
                self._held = s
                return None
            self._at_start = False
            if body[0] == "{":
                self._begin(s[: len(s) - len(body)], "list")
                return body
        self._emit(s)
        return None

    def _call_complete(self) -> bool:
        return self._mode == "after"

    def _finish_markup(self) -> None:
        if self._mode != "after":
            self._fail()
            return
        tag = self._tag  # the object is complete: a missing closing tag is forgiven
        self._close_wrapper()
        self._emit(tag)

    def _flush(self) -> None:
        self._flush_args()

    # --- markup -------------------------------------------------------------------
    def _markup(self, text: str) -> str | None:
        for i, c in enumerate(text):
            mode = self._mode
            if mode == "object":
                self._raw.append(c)
                self._object_char(c)
            elif mode == "after":
                rest = self._after_char(c)
                if rest is not None:
                    return rest + text[i + 1 :]
            elif c.isspace():
                self._raw.append(c)
            elif mode == "open" and self.f.list_open:
                if c == self.f.list_open:
                    self._raw.append(c)
                    self._mode = "list"
                else:
                    self._fail(c)
            elif c == "{":  # open (no list) or list
                self._raw.append(c)
                self._mode = "object"
                self._stack = [_Frame("{")]
            elif mode == "list" and c == self.f.list_close and self.f.list_close:
                self._close_wrapper()
            else:
                self._fail(c)
            if self._mode == "content":
                return text[i + 1 :]
        return None

    def _after_char(self, c: str) -> str | None:
        """After a call object: separator, list end or closing tag. Returns
        text to re-read as content when the framing ends early."""
        f = self.f
        if f.close or self._ending or (f.end and not f.list_open and c != "{"):
            return self._closing_tag(c, f.close or f.end)
        if c.isspace():
            return None
        if f.separator and c == f.separator:
            self._raw = [c]
            self._mode = "list"
            return None
        if f.list_close and c == f.list_close:
            if f.end:  # the list's own closing tag follows
                self._ending = True
                return None
            self._close_wrapper()
            return ""
        if f.end and not f.list_open:  # another object of the section
            self._raw = []
            self._mode = "list"
            return self._markup(c) or None
        self._close_wrapper()
        return c

    def _closing_tag(self, c: str, tag: str) -> str | None:
        """The framing's closing tag, whitespace allowed before it; without it the
        call stands and what follows is content."""
        if not self._tag and c.isspace():
            return None
        if tag.startswith(self._tag + c):
            self._tag += c
            if self._tag == tag:
                self._close_wrapper()
                return ""
            return None
        rest = self._tag + c  # no closing tag: keep the call, read on as content
        self._close_wrapper()
        return rest

    def _close_wrapper(self) -> None:
        super()._close_wrapper()
        self._tag = ""
        self._ending = False

    # --- the call object, one character at a time -------------------------------
    def _object_char(self, c: str) -> None:
        if self._args_open:
            self._frag.append(c)
        if self._in_str:
            self._string_char(c)
            return
        if c.isspace():
            self._scalar = False
            return
        top = self._stack[-1]
        if self._scalar and c in _SCALAR:
            return
        self._scalar = False
        if top.kind == "{":
            if top.expect in ("first", "key"):
                if c == '"':
                    self._open_string("key")
                elif c == "}" and top.expect == "first":
                    self._close_container()
                else:
                    self._fail()
            elif top.expect == "colon":
                if c == ":":
                    top.expect = "value"
                    self._value_follows()
                else:
                    self._fail()
            elif top.expect == "value":
                self._start_value(c)
            elif c == ",":
                top.expect = "key"
            elif c == "}":
                self._close_container()
            else:
                self._fail()
        elif top.expect in ("first", "value"):
            if c == "]" and top.expect == "first":
                self._close_container()
            else:
                self._start_value(c)
        elif c == ",":
            top.expect = "value"
        elif c == "]":
            self._close_container()
        else:
            self._fail()

    def _open_string(self, role: str) -> None:
        self._in_str, self._esc, self._role = True, False, role
        self._buf = []
        if role == "key" and self._in_args_object():
            if self._key is not None:
                self._used.append(self._key)
            self._key = ""

    def _string_char(self, c: str) -> None:
        if self._esc:
            self._esc = False
        elif c == "\\":
            self._esc = True
        elif c == '"':
            self._in_str = False
            self._end_string()
            return
        if self._role in ("key", "name"):
            self._buf.append(c)
            if self._role == "name":
                self._name = "".join(self._buf)
            elif self._in_args_object():
                self._key = "".join(self._buf)

    def _end_string(self) -> None:
        top = self._stack[-1]
        if self._role == "key":
            top.key = "".join(self._buf)
            top.expect = "colon"
        elif self._role == "name":
            self._name = self._tool = "".join(self._buf)
            top.expect = "comma"
            self._send_name()
        else:
            top.expect = "comma"
            if self._role == "args":
                self._args_done()
        self._role = ""

    def _in_args_object(self) -> bool:
        return len(self._stack) == 2 and self._args_open and not self._args_string

    def _value_follows(self) -> None:
        if self._in_args_object() and self._key is not None:
            self._used.append(self._key)
            self._key = None

    def _start_value(self, c: str) -> None:
        top = self._stack[-1]
        top.expect = "comma"
        top_key = top.key if len(self._stack) == 1 else None
        if top_key in self.f.name_keys:
            if c != '"' or self._name is not None:
                self._fail()
                return
            self._open_string("name")
            self._name = ""
            return
        if top_key in self.f.args_keys:
            if c not in '{"' or self._args_seen:
                self._fail()
                return
            self._args_open = self._args_seen = True
            self._args_string = c == '"'
            self._frag.append(c)
        if c == '"':
            self._open_string("args" if top_key in self.f.args_keys else "value")
        elif c in "{[":
            self._stack.append(_Frame(c))
        elif c in _SCALAR:
            self._scalar = True
        else:
            self._fail()

    def _close_container(self) -> None:
        self._stack.pop()
        if not self._stack:
            self._call_done()
        elif len(self._stack) == 1 and self._args_open:
            self._args_done()

    def _args_done(self) -> None:
        self._args_open = False
        if self._key is not None:
            self._used.append(self._key)
            self._key = None

    def _send_name(self) -> None:
        if self._named or self._tool is None:
            return
        try:
            json.loads(f'"{self._tool}"')
        except json.JSONDecodeError:
            self._fail()
            return
        self._named = True
        self._out.append(ToolCallDelta(len(self.calls), name=json.loads(f'"{self._tool}"')))

    def _flush_args(self) -> None:
        if self._named and self._frag and not self._args_string:
            self._out.append(ToolCallDelta(len(self.calls), arguments="".join(self._frag)))
            self._frag = []

    def _call_done(self) -> None:
        raw = "".join(self._raw)
        start = raw.find("{")
        try:
            obj = json.loads(raw[start:])
        except json.JSONDecodeError:
            obj = None
        name = next((obj[k] for k in self.f.name_keys if isinstance(obj, dict) and k in obj),
                    None)
        args_key = next((k for k in self.f.args_keys if isinstance(obj, dict) and k in obj), None)
        args: Any = obj.get(args_key, {}) if isinstance(obj, dict) and args_key else {}
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError:
                args = None
        if not isinstance(name, str) or not isinstance(args, dict):
            self._fail()
            return
        text = (
            json.dumps(args, ensure_ascii=False) if self._args_string or args_key is None else None
        )
        if text is None:
            text = _value_text(raw[start:], args_key)
        if not self._named:
            self._named = True
            self._out.append(ToolCallDelta(len(self.calls), name=name))
        if self._args_string or args_key is None:
            self._out.append(ToolCallDelta(len(self.calls), arguments=text))
        else:
            self._flush_args()
        self.calls.append(ToolCall(name, text))
        self._reset_call()
        self._mode = "after"


def _value_text(obj_text: str, key: str | None) -> str:
    """The raw text of the arguments object inside a call object's text."""
    if key is None:
        return "{}"
    i = obj_text.find(json.dumps(key))
    i = obj_text.find(":", i) + 1
    while obj_text[i].isspace():
        i += 1
    _, end = _DECODER.raw_decode(obj_text, i)
    return obj_text[i:end]
