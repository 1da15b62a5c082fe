"""One JSON object read a character at a time: where it stands, and when it ends.

`JsonScan` keeps a container stack, so it always knows the nesting depth,
whether it is inside a string, and which top-level key is being written (the
argument key, for template rows). ``feed(c)`` returns True on the character
that closes the object, None while it goes on, and False on a character no
JSON object could have there.

>>> s = JsonScan()
>>> [s.feed(c) for c in '{"a": [1]}'][-1], s.text, s.used
(True, '{"a": [1]}', ('a',))
"""

from __future__ import annotations

import json

_SCALAR = set("0123456789+-.eEtruefalsn")


class ObjectRead:
    """What a scan of one arguments object has read: ``chars``, the JSON text it
    reads as; the top-level keys written; where it stands (container stack)."""

    def __init__(self) -> None:
        self.chars: list[str] = []
        self.stack: list[list[str]] = []  # per container: [kind, expect]
        self.in_str = False
        self.scalar = False
        self.key: str | None = None  # the top-level key being written
        self._used: list[str] = []

    @property
    def text(self) -> str:
        return "".join(self.chars)

    @property
    def used(self) -> tuple[str, ...]:
        """The top-level keys written (those whose colon is read)."""
        return tuple(self._used)

    def value(self) -> object:
        """The finished object, or None if its text is not JSON."""
        try:
            return json.loads(self.text)
        except json.JSONDecodeError:
            return None


class JsonScan(ObjectRead):
    """An object's characters in, its structure out (module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self._esc = False
        self._role = ""  # what the open string is: key | value
        self._buf: list[str] = []

    @property
    def where(self) -> tuple[object, ...]:
        top = self.stack[-1] if self.stack else ["", ""]
        return (len(self.stack), top[1], self.in_str, self._role if self.in_str else "",
                self.scalar)

    def feed(self, c: str) -> bool | None:
        if not self.stack and c.isspace():
            return None
        self.chars.append(c)
        if self.in_str:
            self._string(c)
            return None
        if c.isspace():
            self.scalar = False
            return None
        if not self.stack:
            if c != "{":
                return False
            self.stack.append(["{", "first"])
            return None
        if self.scalar and c in _SCALAR:
            return None
        self.scalar = False
        return self._structure(c)

    def _structure(self, c: str) -> bool | None:
        top = self.stack[-1]
        kind, expect = top
        if kind == "{" and expect in ("first", "key"):
            if c == '"':
                self._open_string("key")
                return None
            return self._close() if c == "}" and expect == "first" else False
        if kind == "{" and expect == "colon":
            if c != ":":
                return False
            top[1] = "value"
            if len(self.stack) == 1 and self.key is not None:  # the key is written
                self._used.append(self.key)
                self.key = None
            return None
        if expect in ("value", "first"):  # an object's value, or an array's item
            if kind == "[" and c == "]" and expect == "first":
                return self._close()
            return self._value(c)
        if c == ",":
            top[1] = "key" if kind == "{" else "value"
            return None
        return self._close() if c == ("}" if kind == "{" else "]") else False

    def _value(self, c: str) -> bool | None:
        self.stack[-1][1] = "comma"
        if c == '"':
            self._open_string("value")
            return None
        if c in "{[":
            self.stack.append([c, "first"])
            return None
        if c in _SCALAR:
            self.scalar = True
            return None
        return False

    def _open_string(self, role: str) -> None:
        self.in_str, self._esc, self._role, self._buf = True, False, role, []
        if role == "key" and len(self.stack) == 1:
            self.key = ""

    def _string(self, c: str) -> None:
        if self._esc:
            self._esc = False
        elif c == "\\":
            self._esc = True
        elif c == '"':
            self.in_str = False
            if self._role == "key":
                self.stack[-1][1] = "colon"
            self._role = ""
            return
        if self._role == "key" and len(self.stack) == 1:
            self._buf.append(c)
            self.key = "".join(self._buf)

    def _close(self) -> bool | None:
        self.stack.pop()
        return None if self.stack else True
