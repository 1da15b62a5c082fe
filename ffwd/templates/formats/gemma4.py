"""gemma4: ``<|tool_call>call:NAME{key:VALUE,...}<tool_call|>``, values in Gemma's syntax.

Gemma 4's template writes the arguments as an object with bare keys (sorted),
strings between ``<|"|>`` quotes (nothing inside is escaped), numbers,
``true``/``false``, nested ``{k:v}`` and ``[a,b]``, and null as nothing
(``days:,``). `GemmaScan` reads that object a character at a time and writes
the JSON it means as it goes (so argument deltas stream as JSON);
`gemma_arguments` finds a rendered call's keys and values for the row compiler.

>>> s = GemmaScan()
>>> [s.feed(c) for c in '{city:<|"|>Paris "2"<|"|>,days:,x:[1,{a:true}]}'][-1], s.text
(True, '{"city": "Paris \\\\"2\\\\"", "days": null, "x": [1, {"a": true}]}')
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ffwd.templates.formats.base import ArgLayout
from ffwd.templates.formats.jsonscan import ObjectRead
from ffwd.templates.formats.named_layout import named_format
from ffwd.templates.formats.named_spec import Dialect, Named

QUOTE = '<|"|>'
_BARE = {"true": "true", "false": "false", "null": "null", "": "null",
         "True": "true", "False": "false", "None": "null"}


class GemmaScan(ObjectRead):
    """Gemma's object in, its JSON out (``chars``); the `JsonScan` interface."""

    def __init__(self) -> None:
        super().__init__()
        self._buf: list[str] = []  # a key's, a bare value's or a quote's characters
        self._quoting = False  # reading a string's opening quote

    @property
    def where(self) -> tuple[object, ...]:
        top = self.stack[-1] if self.stack else ["", ""]
        return (len(self.stack), top[1], self.in_str, self._quoting, self.scalar,
                len(self._buf) if self.in_str or self._quoting else 0)

    def feed(self, c: str) -> bool | None:
        if not self.stack:
            if c.isspace():
                return None
            if c != "{":
                return False
            return self._open(c)
        if self.in_str:
            return self._string(c)
        if self._quoting:
            return self._quote(c)
        if self.scalar:
            if c not in ",}]" and not c.isspace():
                self._buf.append(c)
                return None
            if not self._end_scalar():
                return False
        top = self.stack[-1]
        if top[1] == "key":
            return self._key(c)
        if c.isspace():
            return None
        if top[0] == "{" and top[1] == "first":
            if c == "}":
                return self._close()
            top[1] = "key"
            return self._key(c)
        if top[1] in ("value", "first"):
            return self._value(c)
        if c == ",":
            top[1] = "first" if top[0] == "{" else "value"
            self.chars.append(", ")
            return None
        return self._close() if c == ("}" if top[0] == "{" else "]") else False

    def _open(self, c: str) -> bool | None:
        self.stack.append([c, "first"])
        self.chars.append(c)
        return None

    def _key(self, c: str) -> bool | None:
        """A bare key, up to its colon."""
        if c in "}{[]" or (c == "," and not self._buf):
            return False
        if c != ":":
            self._buf.append(c)
            if len(self.stack) == 1:
                self.key = "".join(self._buf).lstrip()
            return None
        key = "".join(self._buf).strip()
        if len(key) > 2 * len(QUOTE) and key.startswith(QUOTE) and key.endswith(QUOTE):
            key = key[len(QUOTE):-len(QUOTE)]
        if not key:
            return False
        self._buf = []
        self.stack[-1][1] = "value"
        self.chars.append(json.dumps(key, ensure_ascii=False) + ": ")
        if len(self.stack) == 1:
            self._used.append(key)
            self.key = None
        return None

    def _value(self, c: str) -> bool | None:
        top = self.stack[-1]
        if top[0] == "[" and top[1] == "first" and c == "]":
            return self._close()
        top[1] = "comma"
        if c == QUOTE[0]:
            self._quoting, self._buf = True, [c]
            return None
        if c in "{[":
            return self._open(c)
        if c in ",}]":  # nothing written: null
            self.chars.append("null")
            return self.feed(c)
        self.scalar, self._buf = True, [c]
        return None

    def _quote(self, c: str) -> bool | None:
        self._buf.append(c)
        got = "".join(self._buf)
        if not QUOTE.startswith(got):
            return False
        if got == QUOTE:
            self._quoting, self.in_str, self._buf = False, True, []
            self.chars.append('"')
        return None

    def _string(self, c: str) -> bool | None:
        """String text, held back while it may be the closing quote."""
        self._buf.append(c)
        while self._buf and not QUOTE.startswith("".join(self._buf)):
            self.chars.append(json.dumps(self._buf.pop(0), ensure_ascii=False)[1:-1])
        if "".join(self._buf) == QUOTE:
            self.in_str, self._buf = False, []
            self.chars.append('"')
        return None

    def _end_scalar(self) -> bool:
        word = "".join(self._buf).strip()
        self.scalar, self._buf = False, []
        if word in _BARE:
            self.chars.append(_BARE[word])
            return True
        try:
            number = json.loads(word)
        except json.JSONDecodeError:
            return False
        if isinstance(number, bool) or not isinstance(number, int | float):
            return False
        self.chars.append(word)
        return True

    def _close(self) -> bool | None:
        kind, _ = self.stack.pop()
        self.chars.append("}" if kind == "{" else "]")
        return None if self.stack else True


Member = tuple[tuple[int, int], tuple[int, int], int]  # key span, value span, comma before


def gemma_arguments(
    text: str, a0: int, args: Mapping[str, Any]
) -> tuple[tuple[ArgLayout, ...], int] | None:
    """The layout of the rendered arguments object at `a0` (its members in the order
    written: the template sorts them), and where it ends.

    >>> t = '{city:<|"|>Paris<|"|>,days:3}'
    >>> lay, end = gemma_arguments(t, 0, {"days": 3, "city": "Paris"})
    >>> [(a.key, t[slice(*a.value_span)]) for a in lay], end == len(t)
    ([('city', '<|"|>Paris<|"|>'), ('days', '3')], True)
    """
    found = _members(text, a0)
    if found is None:
        return None
    members, a1 = found
    keys = [text[slice(*k)] for k, _, _ in members]
    if sorted(keys) != sorted(args):
        return None
    out = []
    for key, ((ks, ke), (vs, ve), comma) in zip(keys, members, strict=True):
        quoted = text.startswith(QUOTE, vs) and ve - vs >= 2 * len(QUOTE)
        out.append(ArgLayout(key, (ks, ke), (vs, ve), comma, ve - len(QUOTE) if quoted else None))
    return tuple(out), a1


def _members(text: str, i: int) -> tuple[list[Member], int] | None:
    """The members of the object at `i`, and the index after it."""
    if not text.startswith("{", i):
        return None
    out: list[Member] = []
    i, comma = _blank(text, i + 1), -1
    while i < len(text) and text[i] != "}":
        colon = text.find(":", i)
        if colon < 0:
            return None
        vs = _blank(text, colon + 1)
        ve = _skip(text, vs)
        if ve < 0:
            return None
        out.append(((i, colon), (vs, ve), comma))
        i = _blank(text, ve)
        if text.startswith(",", i):
            comma, i = i, _blank(text, i + 1)
    return (out, i + 1) if i < len(text) else None


def _skip(text: str, i: int) -> int:
    """The index after the value at `i` (-1: it does not end)."""
    if text.startswith(QUOTE, i):
        j = text.find(QUOTE, i + len(QUOTE))
        return -1 if j < 0 else j + len(QUOTE)
    if text.startswith("{", i):
        found = _members(text, i)
        return -1 if found is None else found[1]
    if text.startswith("[", i):
        i = _blank(text, i + 1)
        while i < len(text) and text[i] != "]":
            i = _skip(text, i)
            if i < 0:
                return -1
            i = _blank(text, i)
            if text.startswith(",", i):
                i = _blank(text, i + 1)
        return i + 1 if i < len(text) else -1
    while i < len(text) and text[i] not in ",}]":
        i += 1
    return i


def _blank(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


FORMAT = named_format(
    "gemma4", Named("<|tool_call>call:", "", "<tool_call|>",
                    dialect=Dialect("gemma", GemmaScan, gemma_arguments), marker="<|tool_call>"),
    models="Gemma 4")
