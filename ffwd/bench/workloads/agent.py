"""The ``agent`` workload: multi-turn tool conversations, generated from a seed.

Each conversation is a coding agent's recorded trace on one function of a
standard-library module and one ticket, asked of the model as four requests:

1. ``read``: the user names a ticket, a file and a change; the next step is a
   ``read_file`` call.
2. ``edit``: ``read_file`` returned the function's source; the next step is
   the function with the change applied (a re-quote with an edit).
3. ``write``: the user says to save it; the next step is a ``write_file``
   call whose ``content`` is the changed function (a re-quote of the agent's
   own last turn).
4. ``close``: ``get_ticket`` returned the ticket's record (JSON, generated
   from a seeded vocabulary); the next step is an ``update_ticket`` call that
   quotes it.

One `Item` per request, holding the conversation up to it; a conversation's
items come in order. The assistant turns in the history are fixed text
written here (the call the agent should make, the function with the change
applied by `apply_edit`), like a recorded trace: no turn depends on what a
system wrote, so items run in any order and every system sees the same
prompts. Tools are offered with ``tool_choice=auto``; the call steps stop at
the first complete call (`Item.single_call`). A small model may answer in
prose instead of calling (the report's parse rate says how often).

Across conversations things recur as in an agent's day: the conversations
share a pool of about half as many tasks (a function, its file, its ticket),
so each file is read, and each ticket looked up, by two or more
conversations with the same call arguments. A later conversation on a task
is a retry (the same change) or a follow-up (another change drawn anew) —
either way the function's code and the calls come back in outputs of a
different request, which an index over earlier requests' outputs can see and
one over the current request cannot.
"""

from __future__ import annotations

import ast
import json
import random
import re
from dataclasses import dataclass
from typing import Any

from ffwd.bench.workloads.items import Function, Item, functions

SYSTEM = ("You are a coding agent in a Python repository. Use the tools to read and write "
          "files and to read and update tickets. Keep answers short.")
OWNERS = ("amara", "bo", "chen", "dara", "eitan", "fatima", "goran", "hana", "ivo", "jun",
          "kofi", "lena")
LABELS = ("bug", "cleanup", "docs", "api", "refactor", "perf", "tests", "style")
SAVE = ("Good. Save it to the file.", "Looks right, write it back.",
        "Fine. Write the new version to the file.")
CLOSE = ("Now close the ticket with a note that says what changed.",
         "Close the ticket and say in the note what you did.")


def _tool(name: str, description: str, properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties,
                       "required": list(properties)}}}


_STR = {"type": "string"}
AGENT_TOOLS = [
    _tool("read_file", "Return a file's text.", {"path": _STR}),
    _tool("write_file", "Replace a file's text.", {"path": _STR, "content": _STR}),
    _tool("get_ticket", "Return a ticket's record.", {"id": _STR}),
    _tool("update_ticket", "Change a ticket's status and add a note.", {
        "id": _STR, "status": {"type": "string", "enum": ["open", "in_progress", "closed"]},
        "note": _STR}),
]


# --- edits -------------------------------------------------------------------------


def _renamable(fn: Function) -> list[str]:
    params = [a.arg for a in fn.node.args.args if a.arg not in ("self", "cls") and len(a.arg) > 1]
    used = {n.id for n in ast.walk(fn.node) if isinstance(n, ast.Name)}
    return [p for p in params if p in used]


def _constants(fn: Function) -> list[int]:
    return sorted({n.value for n in ast.walk(fn.node)
                   if isinstance(n, ast.Constant) and type(n.value) is int and n.value > 1})


def _one_line_docstring(fn: Function) -> str | None:
    """`fn`'s source with its docstring cut to its first line (None: nothing to cut)."""
    doc = ast.get_docstring(fn.node)
    first = fn.node.body[0]
    if doc is None or "\n" not in doc.strip() or first.end_lineno is None:
        return None
    summary = doc.strip().splitlines()[0].strip()
    if not summary or '"""' in summary or "\\" in summary:
        return None
    lines = fn.source.splitlines(keepends=True)
    new = " " * first.col_offset + f'"""{summary}"""\n'
    return "".join(lines[: first.lineno - 1] + [new] + lines[first.end_lineno :])


def edits(fn: Function) -> list[tuple[str, str]]:
    """Every change this workload may ask for on `fn`: ``(instruction, new source)``.

    A parameter renamed (``x`` -> ``x_value``, wherever the name stands alone), a
    constant doubled (each literal occurrence), a docstring cut to its first line.
    """
    out = []
    for old in _renamable(fn):
        new = re.sub(rf"(?<![\w.]){re.escape(old)}(?!\w)", f"{old}_value", fn.source)
        out.append((f"rename the parameter `{old}` to `{old}_value`", new))
    for value in _constants(fn):
        new = re.sub(rf"(?<![\w.]){value}(?![\w.])", str(value * 2), fn.source)
        if new != fn.source:
            out.append((f"change the constant {value} to {value * 2}", new))
    short = _one_line_docstring(fn)
    if short is not None:
        out.append(("cut the docstring to its first line", short))
    return out


def apply_edit(fn: Function, rng: random.Random) -> tuple[str, str]:
    """One change drawn from `edits` (always one: a function with nothing else to
    change gets a docstring)."""
    options = edits(fn)
    if options:
        return rng.choice(options)
    body = fn.node.body[0]
    lines = fn.source.splitlines(keepends=True)
    doc = " " * body.col_offset + f'"""Do what `{fn.name.split(".")[-1]}` is named for."""\n'
    return "add a one-line docstring", "".join(
        lines[: body.lineno - 1] + [doc] + lines[body.lineno - 1 :])


# --- tasks and conversations -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Task:
    """One function and its file, and the ticket that asks for a change to it."""

    fn: Function
    path: str
    ticket: dict[str, Any]
    change: tuple[str, str]  # (instruction, new source): what the ticket asks for


def make_task(fn: Function, rng: random.Random) -> Task:
    path = "src/" + fn.module.replace(".", "/") + ".py"
    change = apply_edit(fn, rng)
    owner, reporter = rng.sample(OWNERS, 2)
    ticket = {
        "id": f"TCK-{rng.randint(1000, 9999)}",
        "title": f"{fn.name}: {change[0]}",
        "status": "open",
        "owner": owner,
        "labels": sorted(rng.sample(LABELS, 2)),
        "file": path,
        "function": fn.name,
        "opened": f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
        "description": f"Reported by {reporter}: in {path}, {change[0]} in `{fn.name}`.",
    }
    return Task(fn, path, ticket, change)


def call_turn(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [{
        "id": call_id, "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)}}]}


def tool_turn(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def conversation(
    c: int, task: Task, change: tuple[str, str], rng: random.Random, cap: int
) -> list[Item]:
    """Conversation `c` on `task`, asking for `change`: its four requests, in order."""
    fn, tid = task.fn, task.ticket["id"]
    instruction, new = change[0], change[1].rstrip("\n") + "\n"
    budget = min(cap, len(new) * 2 // 7 + 48)  # ~3.5 characters of code per id
    history: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": f"Ticket {tid}: in `{task.path}`, {instruction} in "
                                    f"`{fn.name}`. Read the file first."},
    ]
    steps = [("read", 48, True, [
        call_turn(f"call_{c}_1", "read_file", {"path": task.path}),
        tool_turn(f"call_{c}_1", fn.source)])]
    steps.append(("edit", budget, False, [
        {"role": "assistant", "content": f"Here is `{fn.name}` with the change:\n\n"
                                         f"```python\n{new}```"},
        {"role": "user", "content": rng.choice(SAVE)}]))
    steps.append(("write", min(cap, budget + 16), True, [
        call_turn(f"call_{c}_2", "write_file", {"path": task.path, "content": new}),
        tool_turn(f"call_{c}_2", json.dumps({"ok": True, "path": task.path,
                                           "bytes": len(new.encode())})),
        {"role": "user", "content": rng.choice(CLOSE)},
        call_turn(f"call_{c}_3", "get_ticket", {"id": tid}),
        tool_turn(f"call_{c}_3", json.dumps(task.ticket, indent=1))]))
    steps.append(("close", 96, True, []))
    items = []
    for step, (kind, max_tokens, call, then) in enumerate(steps, 1):
        items.append(Item("agent", f"agent:{c}.{step}:{fn.module}.{fn.name}", list(history),
                          max_tokens, AGENT_TOOLS, "auto", single_call=call, kind=kind))
        history += then
    return items


def agent_items(limit: int, seed: int, *, max_chars: int, cap: int,
                modules: tuple[str, ...]) -> list[Item]:
    """`limit` conversations (4 requests each) over ``ceil(limit / 2)`` tasks drawn with
    `seed` from functions of `modules`; conversation ``c`` works on task ``c % tasks``."""
    rng = random.Random(f"agent-{seed}")
    pool = [f for m in modules for f in functions(m, 200, max_chars)]
    tasks = [make_task(fn, rng) for fn in rng.sample(pool, min((limit + 1) // 2, len(pool)))]
    out: list[Item] = []
    for c in range(limit):
        task = tasks[c % len(tasks)]
        # a task's first conversation, or a retry, does what the ticket asks
        same = c < len(tasks) or rng.random() < 0.5
        change = task.change if same else apply_edit(task.fn, rng)
        out += conversation(c, task, change, rng, cap)
    return out
