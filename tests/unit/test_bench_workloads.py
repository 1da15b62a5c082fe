"""`ffwd bench` selection and run order: deterministic items, interleaved systems."""

from __future__ import annotations

import ast
from collections import Counter

from ffwd.bench.fidelity import identity
from ffwd.bench.run import schedule
from ffwd.bench.workloads import PROSE_QUESTIONS, Item, echo_items, prose_items, select


def test_echo_selection_is_deterministic_with_a_seed() -> None:
    a = echo_items(3, seed=7, max_chars=700, cap=200)
    b = echo_items(3, seed=7, max_chars=700, cap=200)
    c = echo_items(3, seed=8, max_chars=700, cap=200)
    assert a == b
    assert [i.id for i in a] != [i.id for i in c]
    assert [i.kind for i in a] == ["edit", "requote", "edit", "requote", "edit", "requote"]


def test_echo_items_carry_real_stdlib_source() -> None:
    for item in echo_items(2, seed=0, max_chars=700, cap=200):
        assert 0 < item.max_tokens <= 200
        if item.kind == "edit":
            source = item.messages[-1]["content"].split("```python\n", 1)[1].split("```", 1)[0]
        else:
            assert item.tools and item.messages[-3]["tool_calls"]
            source = item.messages[-2]["content"]
        assert isinstance(ast.parse(source).body[0], ast.FunctionDef)


def test_select_builds_every_workload_row() -> None:
    items = select(("tools", "echo", "prose"), 1, seed=0, bfcl=("simple_python",), quick=True)
    rows = Counter(i.workload for i in items)
    assert rows == {"tools/required": 1, "tools/auto": 1, "echo": 2, "prose": 1}
    assert all(i.single_call and i.tools for i in items if i.workload.startswith("tools"))
    assert len({i.key for i in items}) == len(items)


def test_prose_questions_are_drawn_by_the_seed() -> None:
    def questions(seed: int) -> list[str]:
        items = prose_items(3, seed=seed, max_tokens=8)
        assert all(i.workload == "prose" and not i.tools and i.max_tokens == 8 for i in items)
        return [i.messages[0]["content"] for i in items]

    drawn = questions(3)
    assert len(set(drawn)) == 3 and set(drawn) <= set(PROSE_QUESTIONS)
    assert questions(3) == drawn
    assert questions(4) != drawn
    assert len(prose_items(len(PROSE_QUESTIONS) + 1, seed=0, max_tokens=8)) == len(PROSE_QUESTIONS)


def test_schedule_interleaves_and_rotates() -> None:
    order = schedule([["A", "B", "C"]] * 2, repeats=2)
    assert [s for _, _, s in order] == list("ABC" "BCA" "BCA" "CAB")
    assert [(r, i) for r, i, _ in order[::3]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    # every system runs every item once per repeat
    assert Counter(order) == Counter({(r, i, s): 1 for r in range(2) for i in range(2)
                                      for s in "ABC"})


def test_schedule_runs_each_item_on_its_own_systems() -> None:
    order = schedule([["A", "B", "C"], ["A", "C"]], repeats=2)
    assert [(i, s) for r, i, s in order if r == 0] == [(0, "A"), (0, "B"), (0, "C"),
                                                       (1, "C"), (1, "A")]
    assert {s for _, i, s in order if i == 1} == {"A", "C"}


def test_identity_counts_per_workload() -> None:
    items = [Item("echo", "x", [], 4), Item("echo", "y", [], 4), Item("prose", "z", [], 4)]
    same = {"content": "a", "calls": []}
    outputs = {
        "echo x": {"off": same, "echo": same},
        "echo y": {"off": same, "echo": {"content": "b", "calls": []}},
        "prose z": {"off": same},
    }
    assert identity(items, outputs, "echo", "off") == {"echo": (1, 2)}
