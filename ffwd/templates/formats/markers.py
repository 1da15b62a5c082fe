"""Markers: the fixed text of a format, with slots for what varies by call.

A `Marker` is a string, or a tuple of strings and `Slot`s: Mistral's
``("[CALL_ID]", ID, "[ARGS]")``, DSML's ``('" string="', TYPE, '">')``. Whitespace
in a marker matches any run of whitespace, or none: the templates of one
family differ in it, and so do models. `atoms(marker)` spells a marker as the
parser matches it (one character, `WS`, or a slot); `pattern(marker)` as a
regular expression for finding it in a rendering; `first_word(marker)` is
the text that announces it in a reply (up to its first whitespace or slot).

>>> atoms(("<a>\\n", ID))
['<', 'a', '>', <Slot.WS: 'ws'>, <Slot.ID: 'id'>]
>>> bool(pattern("<a>\\n<b>").fullmatch("<a><b>")), first_word("<tool_call>\\n<function=")
(True, '<tool_call>')
"""

from __future__ import annotations

import re
from enum import Enum

Marker = str | tuple["str | Slot", ...]


class Slot(Enum):
    WS = "ws"  # any whitespace, or none
    ID = "id"  # a call id (Mistral, Solar)
    INDEX = "index"  # a call's index (Kimi)
    TYPE = "type"  # a value's type, as the template writes it (DSML, Kimi K3)
    KEY = "key"  # the key of the value being closed (MiniMax M3's closing tag)
    HEAD = "head"  # a message header's text, up to the literal after it (harmony)


WS, ID, INDEX, TYPE, KEY, HEAD = Slot.WS, Slot.ID, Slot.INDEX, Slot.TYPE, Slot.KEY, Slot.HEAD
Atom = str | Slot
# What a slot's text may hold (never whitespace: it ends a slot).
SLOT_TEXT = r"[^\s<>\"'\[\]|:]*"


def parts(marker: Marker) -> tuple[str | Slot, ...]:
    return (marker,) if isinstance(marker, str) else marker


def atoms(marker: Marker, key: str | None = None) -> list[Atom]:
    """`marker` as characters, `WS` runs and slots (`KEY` spelled out when `key` is known)."""
    out: list[Atom] = []
    for part in parts(marker):
        if isinstance(part, Slot):
            out += list(key) if part is KEY and key is not None else [part]
            continue
        for c in part:
            if not c.isspace():
                out.append(c)
            elif not out or out[-1] is not WS:
                out.append(WS)
    return out


def text(marker: Marker, key: str = "") -> str:
    """The marker's literal text (slots as nothing, `KEY` as `key`)."""
    return "".join(key if p is KEY else "" if isinstance(p, Slot) else p for p in parts(marker))


def pattern(marker: Marker, key: str | None = None) -> re.Pattern[str]:
    """A regular expression for `marker` in a rendering."""
    out = []
    for a in atoms(marker, key):
        if a is WS:
            out.append(r"\s*")
        elif a in (ID, INDEX):
            out.append(f"({SLOT_TEXT})")  # a group: its span varies from call to call
        elif a is HEAD:
            out.append(r"[^\n]*?")
        elif isinstance(a, Slot):
            out.append(SLOT_TEXT)
        else:
            out.append(re.escape(a))
    return re.compile("".join(out))


def first_word(marker: Marker) -> str:
    """The marker's first text up to whitespace or a slot: what starts it in a reply."""
    head = parts(marker)[0] if parts(marker) else ""
    if not isinstance(head, str):
        return ""
    word = head.strip().split()
    return word[0] if word else ""


def find(text_: str, marker: Marker, start: int = 0, key: str | None = None
         ) -> re.Match[str] | None:
    """The first occurrence of `marker` at or after `start`."""
    return pattern(marker, key).search(text_, start)


def match(text_: str, marker: Marker, at: int, key: str | None = None) -> re.Match[str] | None:
    """`marker` (and any whitespace before it) right at `at`."""
    return re.compile(r"\s*" + pattern(marker, key).pattern).match(text_, at)


def groups(m: re.Match[str]) -> tuple[tuple[int, int], ...]:
    """The spans of a match's slots that vary from call to call."""
    return tuple(m.span(i) for i in range(1, (m.re.groups or 0) + 1) if m.span(i)[0] >= 0)


class Choice:
    """Several markers matched at once, a character at a time, until one wins.

    Each option is a list of atoms; only its characters and `WS` runs are
    matched here (its first slot, if any, ends it). Whitespace is allowed
    before every option. Where one option is complete and a longer one still
    fits, the choice waits: the longer wins if it completes, else the shorter,
    and the characters read past it are read again after it (`feed`'s count).

    >>> ch = Choice({"key": atoms("<"), "end": atoms("</f>")})
    >>> [ch.feed(c) for c in "\\n</f>"][-1], Choice({"key": atoms("<")}).feed("<")
    (('end', 0), ('key', 0))
    >>> ch = Choice({"key": atoms("<"), "end": atoms("</f>")})
    >>> [ch.feed(c) for c in "<c"][-1]
    ('key', 1)
    """

    def __init__(self, options: dict[str, list[Atom]]) -> None:
        self.options = {k: [WS, *v] for k, v in options.items()}
        self.at = {k: 0 for k in options}
        self.fed = 0
        self.done: dict[str, tuple[int, int]] = {}  # complete: (characters it took, atoms)

    @property
    def progress(self) -> tuple[int, ...]:
        return (*self.at.values(), *(n for n, _ in self.done.values()))

    def feed(self, c: str) -> tuple[str, int] | bool | None:
        """(the winner, how many characters to read again after it), None while it is
        open, False when nothing fits."""
        self.fed += 1
        alive = {}
        for name, i in self.at.items():
            j = _advance(self.options[name], i, c)
            if j is None:
                continue
            left = self.options[name][j:]
            if all(a is WS for a in left) or (left[0] is not WS and isinstance(left[0], Slot)):
                self.done[name] = (self.fed, j)
            else:
                alive[name] = j
        self.at = alive
        if self.at:
            return None
        if not self.done:
            return False
        name = max(self.done, key=lambda k: self.done[k][0])
        return name, self.fed - self.done[name][0]

    def rest(self, name: str) -> list[Atom]:
        """What the chosen option has left to match."""
        return self.options[name][self.done[name][1]:]


def _advance(opt: list[Atom], i: int, c: str) -> int | None:
    """The position after `c` in `opt` from `i`, or None when `c` does not fit."""
    while i < len(opt):
        a = opt[i]
        if a is WS:
            if c.isspace():
                return i
            i += 1
            continue
        if isinstance(a, Slot):
            return None
        return i + 1 if a == c else None
    return None
