"""Closing rows: after a value, after the arguments, at the end of the turn.

* value ends (formats that mark a value's end, XML): the markup up to the
  next parameter, or, once every key is written, up to the end of the call;
  and the id that picks another parameter -> its opening markup.
* close: the token that closes the arguments -> the markup up to where a
  further call and the end of the turn differ.
* turn-end: the token that starts the end of the turn -> the rest before EOS.
* delimiters: the ids that end an argument value (a closing quote and its merges).
"""

from __future__ import annotations

from collections.abc import Callable

from ffwd.templates.formats.base import AllKeysUsed, AtPosition, OnlyKeyLeft
from ffwd.templates.rows.align import View, common
from ffwd.templates.rows.keys import before_any_value
from ffwd.templates.rows.sentinels import Call
from ffwd.templates.rows.table import Point, RowTable

# (call, tool, next key, view from after the value end, where that key's name starts)
Follow = tuple[Call, str, str, View, int]


def value_end_rows(table: RowTable, calls: list[Call], encode: Callable[[str], list[int]]
                   ) -> None:
    """Formats that mark a value's end (XML): the markup up to the next
    parameter, or, once every key is written, up to the end of the call."""
    ends: dict[Point, list[View]] = {}
    lasts: dict[tuple[Point, str], list[View]] = {}
    follows: dict[Point, list[Follow]] = {}
    keys: dict[str, frozenset[str]] = {}
    for c in calls:
        args = c.lay.args
        tool = c.r.text[slice(*c.lay.name)]
        # All of the tool's keys (a call may render only some of them).
        keys[tool] = keys.get(tool, frozenset()) | {c.r.text[slice(*a.key_span)] for a in args}
        for i, arg in enumerate(args):
            if arg.end is None:
                continue
            t, point = table.point(c, arg.end, "value end")
            if i + 1 < len(args):
                nxt = args[i + 1]
                ends.setdefault(point, []).append(c.view(t + 1, nxt.lead))
                key = c.r.text[slice(*nxt.key_span)]
                view = c.view(t + 1, c.value_start(nxt))
                follows.setdefault(point, []).append((c, tool, key, view, nxt.key_span[0]))
            else:
                ends.setdefault(point, []).append(c.view(t + 1, c.lay.close))
                lasts.setdefault((point, tool), []).append(c.run(t + 1))
    for (point, tool), views in lasts.items():
        rule = AllKeysUsed(table.wheres[point], tool, keys[tool])
        table.add([point[0]], common(views, table.eos), "close", rule)
    for point, views in ends.items():
        base = common(views, table.eos)
        table.add([point[0]], base, "close", AtPosition(table.wheres[point]))
        _next_parameter(table, len(base), follows.get(point, []), keys, encode)


def _next_parameter(
    table: RowTable, skip: int, follows: list[Follow], keys: dict[str, frozenset[str]],
    encode: Callable[[str], list[int]],
) -> None:
    """After a value's closing markup, the id that picks another parameter
    over the end of the call -> that parameter's opening markup, or, when a
    single key is left, all of it up to the value (but what may merge with it)."""
    branches: dict[int, list[Follow]] = {}
    for f in follows:
        r, i = f[3][0], f[3][1]
        if i + skip < len(r.ids):
            branches.setdefault(r.ids[i + skip], []).append(f)
    for branch, members in branches.items():
        c, i = members[0][0], members[0][3][1]
        where = table.where(c, i + skip)
        by_key: dict[tuple[str, str], list[View]] = {}
        markup: list[View] = []  # up to the key's name: which key comes is open
        for _, tool, key, (r, i, cap, soft), k0 in members:
            by_key.setdefault((tool, key), []).append((r, i + skip + 1, cap, soft))
            markup.append((r, i + skip + 1, min(cap, k0), soft))
        for (tool, key), views in by_key.items():
            rule = OnlyKeyLeft(where, tool, key, keys[tool] - {key})
            r, start, cap, _ = views[0]
            opening = r.text[r.starts[start] : int(cap)] if start < len(r.ids) else ""
            run = before_any_value(common(views, table.eos), opening, encode)
            table.add([branch], run, "key", rule)
        table.add([branch], common(markup, table.eos), "key", AtPosition(where))


def close_rows(table: RowTable, calls: list[Call]) -> None:
    """The id that closes the arguments -> the markup up to where another call
    and the end of the turn part; the id that starts the end -> the rest."""
    closes: dict[Point, list[View]] = {}
    ends: dict[Point, list[View]] = {}
    for c in calls:
        r = c.r
        t, point = table.point(c, c.lay.close, "close")
        straddles = r.ends[t] > c.more  # the closing id already starts the end of the turn
        closes.setdefault(point, []).append(c.view(t + 1, c.end) if straddles else c.run(t + 1))
        if straddles or c.more == float("inf"):
            continue
        u, start = table.point(c, int(c.more), "turn end")
        if r.ids[u] not in table.eos:
            ends.setdefault(start, []).append(c.view(u + 1, c.end))
    for point, views in closes.items():
        rule = AtPosition(table.wheres[point])
        table.add([point[0]], common(views, table.eos), "close", rule)
    for point, views in ends.items():
        rule = AtPosition(table.wheres[point])
        table.add([point[0]], common(views, table.eos), "turn-end", rule)


def delimiters(table: RowTable, calls: list[Call]) -> None:
    """The ids whose token ends an argument value."""
    for c in calls:
        for arg in c.lay.args:
            if arg.delimiter is not None:
                table.delimiters.add(c.r.ids[c.r.tok(arg.delimiter)])
