"""Opening rows: the forced opening, the scaffold after a marker, the rest of a name.

* scaffold: the marker's tokens -> what follows up to where tools differ
  (with one tool: the name and the markup up to the first argument);
  ``required``/named: the prompt's last tokens -> that whole run, marker
  included (proposed by `FillSession.start` before the first sample).
* name: the name tokens written so far, once unique among the tools -> the
  rest of the name and the markup up to the first argument.
"""

from __future__ import annotations

from collections.abc import Callable

from ffwd.templates.formats.base import AtPosition, NameSoFar
from ffwd.templates.rows.align import lcp, unique_prefixes
from ffwd.templates.rows.sentinels import Call
from ffwd.templates.rows.table import RowTable

ANCHOR = 2  # tokens before a name that anchor its rows


def forced_rows(table: RowTable, calls: list[Call], shared: list[int], tail: list[int],
                encode: Callable[[str], list[int]]) -> None:
    """A forced call: the prompt's last ids `tail` trigger the turn's opening run.

    Generation starts a fresh token after the prompt, so the opening markup is
    the turn's text up to the name's first token, tokenized on its own (where
    the prompt merges into the turn, ``[/INST][TOOL_CALLS]``, a whole rendering
    would show it merged), then the ids all names share. It fires only where
    nothing is written yet: the tail's ids may recur inside a call."""
    heads = {_head(c) for c in calls}
    fresh = AtPosition(table.fmt.new_parser().state.where)
    if len(heads) == 1:
        head, to_name = heads.pop()
        table.add(tail, [*encode(head), *(shared if to_name else [])], "scaffold", fresh)
    else:  # what all openings share, before the last id (it may merge with what differs)
        table.add(tail, lcp([encode(h) for h, _ in heads])[:-1], "scaffold", fresh)


def _head(c: Call) -> tuple[str, bool]:
    """The turn's text up to its first call's name (and whether it gets there), or
    up to markup that varies by call (Solar's call id) when that comes first."""
    name = c.r.starts[c.r.tok(c.lay.name[0])]
    cut = min([name, *(c.r.starts[c.r.tok(t)] for s, t in c.stops if s > c.a0)])
    return c.r.text[c.a0 : cut], cut == name


def scaffold_rows(table: RowTable, occurrences: list[Call], shared: list[int]) -> None:
    """The marker's ids -> the markup up to the name, and what all names share."""
    for c in occurrences:
        r = c.r
        first, last = r.tok(c.lay.open[0]), r.tok(c.lay.open[1] - 1)
        if r.starts[first] < c.lay.open[0] and first < last:
            first += 1  # merged with what precedes the marker: not part of the trigger
        name = r.tok(c.lay.name[0])
        # Never into markup that varies by call (Solar's id before the name).
        stop = min([name, *(r.tok(t) for s, t in c.stops if s >= c.lay.open[1])])
        emit = [*r.ids[last + 1 : stop], *(shared if stop == name else [])]
        table.add(r.ids[first : last + 1], emit, "scaffold", AtPosition(table.where(c, last)))


def name_rows(
    table: RowTable, c0: Call, runs: dict[str, list[int]], by_tool: dict[str, list[Call]], b: int
) -> None:
    """Once the name ids written so far fit one tool: the rest of its run
    (`runs`: each tool's ids from its name on; `b`: how many all tools share)."""
    n0 = c0.r.tok(c0.lay.name[0])
    anchor = c0.r.ids[max(0, n0 - ANCHOR) : n0]
    for name, unique in unique_prefixes({n: r[b:] for n, r in runs.items()}).items():
        run = runs[name]
        c = by_tool[name][0]
        ns, ne = c.lay.name
        start = c.r.tok(ns)
        for j in range(max(1, unique), len(run) - b - 1):  # an emit needs 2 ids
            text = c.r.text[ns : max(ns, min(ne, c.r.ends[start + b + j - 1]))]
            trigger = [*anchor, *run[: b + j]][b : len(anchor) + b + j]
            table.add(trigger, run[b + j :], "name", NameSoFar(text))
