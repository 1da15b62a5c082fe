"""Key rows: the rest of an argument key once its prefix is unique.

* a key's first ids, once unique among the tool's unused keys -> the rest of
  the key and its separator;
* after the separator that commits to another key (JSON's comma), when a
  single key is left -> the markup up to it and all of it.
"""

from __future__ import annotations

from collections.abc import Callable

from ffwd.templates.formats.base import ArgLayout, KeySoFar, OnlyKeyLeft
from ffwd.templates.rows.align import common, lcp
from ffwd.templates.rows.sentinels import Call
from ffwd.templates.rows.table import RowTable

Occurrence = tuple[Call, ArgLayout]
# How values begin: letters, digits, signs, quotes, brackets, blanks, non-ASCII.
VALUE_STARTS = ("a", "P", "0", "-", '"', "'", "[", "{", " ", "\n", "é", "t", "<")


def key_rows(table: RowTable, calls: list[Call], encode: Callable[[str], list[int]]) -> None:
    """Rows for every key of the tool that `calls` (all of one tool) render."""
    c0 = calls[0]
    tool = c0.r.text[slice(*c0.lay.name)]
    occurrences: dict[str, list[Occurrence]] = {}
    for c in calls:
        for arg in c.lay.args:
            occurrences.setdefault(arg.key, []).append((c, arg))
    raw = {k: occ[0][0].r.text[slice(*occ[0][1].key_span)] for k, occ in occurrences.items()}
    runs = {k: run for k, occ in occurrences.items()
            if (run := _key_run(table, occ, encode)) is not None}
    for key, run in runs.items():
        c, arg = occurrences[key][0]
        ks, ke = arg.key_span
        start = c.r.tok(ks)
        width = c.r.tok(ke - 1) - start + 1
        anchors = sorted({o.r.ids[o.r.tok(a.key_span[0]) - 1] for o, a in occurrences[key]})
        # j = 0: right after the key's opening quote, when it is the one key left.
        for j in range(min(width, len(run) - 2) + 1):  # an emit needs 2 ids
            rivals = frozenset(
                raw[k]
                for k in occurrences
                if k != key and (k not in runs or runs[k][:j] == run[:j])
            )
            text = c.r.text[ks : min(ke, c.r.ends[start + j - 1])]
            rule = KeySoFar(tool, raw[key], text, rivals)
            for anchor in anchors:
                table.add([anchor, *run[:j]], run[j:], "key", rule)
        others = frozenset(raw.values()) - {raw[key]}
        _only_key_left(table, tool, raw[key], others, occurrences[key], run)


def _only_key_left(
    table: RowTable,
    tool: str,
    key: str,
    others: frozenset[str],
    occurrences: list[Occurrence],
    run: list[int],
) -> None:
    """After the separator that commits to another key (JSON's comma), with
    `key` the only one left: the markup up to it and its whole run."""
    seen = set()
    for o, a in occurrences:
        if a.lead < 0:
            continue
        lead, point = table.point(o, a.lead, "lead")
        first = o.r.tok(a.key_span[0])
        between = tuple(o.r.ids[lead + 1 : first])
        if lead < first and (point, between) not in seen:
            seen.add((point, between))
            rule = OnlyKeyLeft(table.wheres[point], tool, key, others)
            table.add([point[0]], [*between, *run], "key", rule)


def before_any_value(run: list[int], markup: str, encode: Callable[[str], list[int]]
                      ) -> list[int]:
    """The part of `run` that stays the same whatever value follows the markup: its
    last character may merge with the value (``|`` + ``>X`` before one, ``|>`` + ``P``
    before another)."""
    for start in VALUE_STARTS:
        run = lcp([run, encode(markup + start)])
    return run


def _key_run(table: RowTable, occurrences: list[Occurrence],
             encode: Callable[[str], list[int]]) -> list[int] | None:
    """The ids every rendering of a key shares, from its first token on, or
    None when the key does not start on a token boundary everywhere."""
    tails = []
    for c, arg in occurrences:
        i = c.r.tok(arg.key_span[0])
        if c.r.starts[i] != arg.key_span[0]:
            return None
        tails.append(c.run(i))
    run = common(tails, table.eos)
    c, arg = occurrences[0]
    run = before_any_value(run, c.r.text[arg.key_span[0] : c.value_start(arg)], encode)
    width = c.r.tok(arg.key_span[1] - 1) - c.r.tok(arg.key_span[0]) + 1
    return run if len(run) >= width else None
