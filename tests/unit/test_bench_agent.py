"""The agent workload: seeded, deterministic, conversations in order, re-quotes and
calls that recur across conversations."""

from __future__ import annotations

import ast
import json
import random
from collections import Counter, defaultdict
from itertools import pairwise
from typing import Any

from ffwd.bench.workloads import ECHO_MODULES, select
from ffwd.bench.workloads.agent import AGENT_TOOLS, agent_items, apply_edit, edits
from ffwd.bench.workloads.items import Function, Item, functions

ITEMS = agent_items(4, seed=0, max_chars=700, cap=300, modules=ECHO_MODULES)


def conversations(items: list[Item]) -> dict[str, list[Item]]:
    out: dict[str, list[Item]] = defaultdict(list)
    for item in items:
        out[item.id.split(":")[1].split(".")[0]].append(item)
    return out


def calls(item: Item) -> list[tuple[str, dict[str, Any]]]:
    return [(c["function"]["name"], json.loads(c["function"]["arguments"]))
            for m in item.messages for c in m.get("tool_calls") or []]


def test_the_same_seed_gives_the_same_items_and_another_seed_others() -> None:
    again = agent_items(4, seed=0, max_chars=700, cap=300, modules=ECHO_MODULES)
    other = agent_items(4, seed=1, max_chars=700, cap=300, modules=ECHO_MODULES)
    assert again == ITEMS
    assert [i.id for i in ITEMS] != [i.id for i in other]
    assert len({i.key for i in ITEMS}) == len(ITEMS) == 16


def test_each_conversation_is_four_requests_in_order_each_extending_the_last() -> None:
    convs = conversations(ITEMS)
    assert list(convs) == ["0", "1", "2", "3"]  # conversations one after another
    for items in convs.values():
        assert [i.kind for i in items] == ["read", "edit", "write", "close"]
        assert [i.id.split(":")[1].split(".")[1] for i in items] == ["1", "2", "3", "4"]
        for before, after in pairwise(items):
            assert after.messages[: len(before.messages)] == before.messages
            assert len(after.messages) > len(before.messages)
        # every request ends where the model speaks next: after a user turn or a tool result
        assert all(i.messages[-1]["role"] in ("user", "tool") for i in items)
        assert [i.single_call for i in items] == [True, False, True, True]
        assert all(i.tools == AGENT_TOOLS and i.tool_choice == "auto" for i in items)
        assert all(0 < i.max_tokens <= 300 for i in items)


def test_tool_results_carry_text_that_later_turns_requote() -> None:
    for items in conversations(ITEMS).values():
        read, edit, write, close = items
        source = edit.messages[-1]["content"]  # read_file's result: the function's source
        assert isinstance(ast.parse(source).body[0], ast.FunctionDef)
        # the agent's edited function, in its reply and again in write_file's content
        reply = write.messages[-2]["content"]
        code = reply.split("```python\n", 1)[1].split("```", 1)[0]
        assert isinstance(ast.parse(code).body[0], ast.FunctionDef) and code != source
        written = dict(calls(close))["write_file"]
        assert written["content"] == code
        # the ticket: named by the user, looked up, its record the last tool result
        ticket = json.loads(close.messages[-1]["content"])
        assert ticket["id"] in read.messages[-1]["content"]
        assert dict(calls(close))["get_ticket"] == {"id": ticket["id"]}
        assert ticket["file"] == dict(calls(close))["read_file"]["path"] == written["path"]


def test_calls_files_and_code_recur_across_conversations() -> None:
    convs = conversations(ITEMS)
    finals = [items[-1] for items in convs.values()]
    reads = Counter(json.dumps(dict(calls(i))["read_file"]) for i in finals)
    tickets = Counter(json.dumps(dict(calls(i))["get_ticket"]) for i in finals)
    assert sorted(reads.values()) == [2, 2] and sorted(tickets.values()) == [2, 2]
    sources = Counter(items[1].messages[-1]["content"] for items in convs.values())
    assert sorted(sources.values()) == [2, 2]  # the same file text in two conversations


def test_edits_are_valid_python_and_change_what_they_say() -> None:
    fns = [f for m in ("heapq", "textwrap", "statistics") for f in functions(m, 200, 900)]
    assert fns
    for fn in fns:
        for instruction, new in edits(fn):
            assert new != fn.source and isinstance(ast.parse(new).body[0], ast.FunctionDef)
            if instruction.startswith("rename"):
                old = instruction.split("`")[1]
                args = [a.arg for a in ast.parse(new).body[0].args.args]  # type: ignore[attr-defined]
                assert f"{old}_value" in args and old not in args
        _, new = apply_edit(fn, random.Random(0))
        assert new != fn.source


def test_a_function_with_nothing_to_change_gets_a_docstring() -> None:
    src = "def f(a):\n    return a\n"
    node = ast.parse(src).body[0]
    assert isinstance(node, ast.FunctionDef)
    fn = Function("m", "f", src, node)
    assert edits(fn) == []
    instruction, new = apply_edit(fn, random.Random(0))
    assert instruction == "add a one-line docstring"
    assert ast.get_docstring(ast.parse(new).body[0]) is not None  # type: ignore[arg-type]


def test_select_builds_the_agent_row_from_the_seed() -> None:
    items = select(("agent",), 2, seed=5, quick=True)
    assert Counter(i.workload for i in items) == {"agent": 8}
    assert items == select(("agent",), 2, seed=5, quick=True)
    one = select(("agent",), 1, seed=5, quick=True)
    assert [i.kind for i in one] == ["read", "edit", "write", "close"]
