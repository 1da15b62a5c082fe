"""The ``repeat`` workload: agents redo work, and the second time is mostly known.

`limit` groups, each of three pairs of requests run in order, the second of
each pair after the first (items ``repeat:KIND.1`` then ``repeat:KIND.2``):

* ``again``: the same request sent twice (a function and a small change to make
  to it; the whole function back).
* ``rewrite``: a file read and written back with a small change, then read
  again (now holding that change) and written back with another: the second
  ``write_file`` call re-quotes most of the first one's ``content``.
* ``call``: a tool call, then, in the same conversation, the same call with one
  argument changed.

What an index over earlier requests (ffwd's recall, llama.cpp's ngram-mod
pool) knows from a pair's first request is most of its second. A system that
keeps such state keeps it within a repeat of the bench (a session,
`ffwd.bench.systems.System.begin`), so every pair starts cold in each repeat.
The call steps name the call the agent makes (``tool_choice`` names the
function: the step is that call, as in an agent's trace; ``ffwd-off`` and the
peers get the same prompt decoded plainly, as on ``tools/required``) and stop
at the first complete call (`Item.single_call`).
"""

from __future__ import annotations

import json
import random
from typing import Any

from ffwd.bench.workloads.agent import (
    AGENT_TOOLS,
    SYSTEM,
    apply_edit,
    call_turn,
    edits,
    tool_turn,
)
from ffwd.bench.workloads.items import Function, Item, functions

SEARCH_TOOL = {"type": "function", "function": {
    "name": "search_code", "description": "Find lines of code that match a pattern.",
    "parameters": {"type": "object", "properties": {
        "pattern": {"type": "string", "description": "a regular expression"},
        "path": {"type": "string", "description": "a file or directory"},
        "max_results": {"type": "integer"},
        "case_sensitive": {"type": "boolean"}},
        "required": ["pattern", "path", "max_results", "case_sensitive"]}}}
TOOLS = [*AGENT_TOOLS, SEARCH_TOOL]


def _named(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name}}


def _budget(text: str, cap: int, extra: int = 48) -> int:
    return min(cap, len(text) * 2 // 7 + extra)  # ~3.5 characters of code per id


def _pair(group: int, kind: str, first: Item, second: Item) -> list[Item]:
    return [Item("repeat", f"repeat:{kind}.{n}:{group}:{it.id}", it.messages, it.max_tokens,
                 it.tools, it.tool_choice, it.single_call, f"{kind}.{n}")
            for n, it in ((1, first), (2, second))]


def again(fn: Function, rng: random.Random, cap: int) -> tuple[Item, Item]:
    """The same edit request, twice."""
    instruction, new = apply_edit(fn, rng)
    user = (f"```python\n{fn.source}```\n\nIn this function, {instruction}. "
            "Write out the whole function.")
    item = Item("", f"{fn.module}.{fn.name}", [{"role": "user", "content": user}],
                _budget(new, cap))
    return item, item


def rewrite(fn: Function, rng: random.Random, cap: int) -> tuple[Item, Item]:
    """Read a file and write it back changed; later, read it again and write it back
    with another change."""
    path = "src/" + fn.module.replace(".", "/") + ".py"
    first = apply_edit(fn, rng)
    others = [change for change, _ in edits(fn) if change != first[0]]
    second = rng.choice(others) if others else "add a one-line comment at its top"
    budget = _budget(json.dumps(first[1]), cap, 64)  # the call and the file as JSON text
    items = []
    for n, (source, instruction) in enumerate(((fn.source, first[0]), (first[1], second))):
        history = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": f"In `{path}`, {instruction} in `{fn.name}`, then "
                                        "write the whole file back."},
            call_turn(f"call_r{n}", "read_file", {"path": path}),
            tool_turn(f"call_r{n}", source),
        ]
        items.append(Item("", f"{fn.module}.{fn.name}", history, budget, TOOLS,
                          _named("write_file"), single_call=True))
    return items[0], items[1]


def call(fn: Function, rng: random.Random) -> tuple[Item, Item]:
    """A search call, then the same search in another file."""
    name = fn.name.split(".")[-1]
    path = "src/" + fn.module.replace(".", "/") + ".py"
    other = "tests/test_" + fn.module.split(".")[-1] + ".py"
    args = {"pattern": rf"\b{name}\(", "path": path, "max_results": rng.choice((10, 20, 50)),
            "case_sensitive": True}
    ask = (f"Search `{path}` for calls of `{name}` (the pattern `{args['pattern']}`, "
           f"case-sensitive, at most {args['max_results']} results).")
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM},
                                     {"role": "user", "content": ask}]
    first = Item("", f"{fn.module}.{fn.name}", list(history), 96, TOOLS, _named("search_code"),
                 single_call=True)
    found = "\n".join(f"{path}:{rng.randint(10, 400)}: {line.strip()}"
                      for line in fn.source.splitlines()[:3] if line.strip())
    history += [call_turn("call_s1", "search_code", args), tool_turn("call_s1", found),
                {"role": "user", "content": f"Now the same search in `{other}`."}]
    return first, Item("", first.id, history, 96, TOOLS, _named("search_code"),
                       single_call=True)


def repeat_items(limit: int, seed: int, *, max_chars: int, cap: int,
                 modules: tuple[str, ...]) -> list[Item]:
    """`limit` groups of the three pairs (module docstring), on functions of `modules`
    drawn with `seed`."""
    rng = random.Random(f"repeat-{seed}")
    pool = [f for m in modules for f in functions(m, 200, max_chars)]
    out: list[Item] = []
    for g, fn in enumerate(rng.sample(pool, min(limit, len(pool)))):
        out += _pair(g, "again", *again(fn, rng, cap))
        out += _pair(g, "rewrite", *rewrite(fn, rng, cap))
        out += _pair(g, "call", *call(fn, rng))
    return out
