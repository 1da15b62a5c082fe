"""The table the row builders fill: rows, the rules that gate them, delimiters.

A row is kept only when it emits at least 2 ids (one id saves nothing) and
never past an EOS id (ending the turn is the model's decision). The same row
found at several positions collects one rule per position; it may fire where
any of them holds.
"""

from __future__ import annotations

from collections.abc import Sequence

from ffwd.fill.session import FillKind, FillRow
from ffwd.templates.formats import ToolFormat
from ffwd.templates.formats.base import Rule
from ffwd.templates.rows.sentinels import Call

MAX_TRIGGER = 8

# A token at a structural character: (its id, what the character does, chars of the
# token before it, chars from it on). The same token can make different points:
# "</" ends a value and, elsewhere, the call.
Point = tuple[int, str, int, int]


class RowTable:
    """Rows under construction for one request's tools."""

    def __init__(self, fmt: ToolFormat, eos: frozenset[int]) -> None:
        self.fmt = fmt
        self.eos = eos
        self.rules: dict[FillRow, list[Rule]] = {}
        self.delimiters: set[int] = set()
        self.wheres: dict[Point, tuple[object, ...]] = {}

    def add(
        self, trigger: Sequence[int], emit: Sequence[int], kind: FillKind, rule: Rule | None
    ) -> None:
        """Record that `trigger` determines `emit` where `rule` holds (None: always)."""
        emit = self.cut(emit)
        if len(emit) < 2 or not trigger:
            return  # a one-token span saves nothing
        row = FillRow(tuple(trigger[-MAX_TRIGGER:]), tuple(emit), kind, rule is not None)
        rules = self.rules.setdefault(row, [])
        if rule is not None and rule not in rules:
            rules.append(rule)

    def cut(self, ids: Sequence[int]) -> list[int]:
        """`ids` up to the first EOS: ending the turn is the model's decision."""
        out = []
        for tok in ids:
            if tok in self.eos:
                break
            out.append(tok)
        return out

    def where(self, call: Call, i: int) -> tuple[object, ...]:
        """The parser's position after token `i` (what `AtPosition` compares)."""
        parser = self.fmt.new_parser()
        parser.feed(call.r.text[call.a0 : call.r.ends[i]])
        return parser.state.where

    def point(self, c: Call, char: int, role: str) -> tuple[int, Point]:
        """The token holding `char` (which does `role`), and the point it makes;
        the parser's position after it is worked out once per point."""
        r = c.r
        t = r.tok(char)
        point = (r.ids[t], role, char - r.starts[t], r.ends[t] - char)
        if point not in self.wheres:
            self.wheres[point] = self.where(c, t)
        return t, point
