"""The repeat workload: seeded pairs of requests whose second redoes the first's work, and
the issue-31 targets read from its second requests."""

from __future__ import annotations

import json

from ffwd.bench.targets import LONG_SPAN, REPEAT_SHARE, repeat_targets
from ffwd.bench.workloads import ECHO_MODULES, select
from ffwd.bench.workloads.repeat import repeat_items

ITEMS = repeat_items(2, seed=0, max_chars=700, cap=300, modules=ECHO_MODULES)


def test_seeded_pairs_in_order_first_then_second() -> None:
    assert repeat_items(2, seed=0, max_chars=700, cap=300, modules=ECHO_MODULES) == ITEMS
    assert [i.id for i in ITEMS] != [i.id for i in repeat_items(
        2, seed=1, max_chars=700, cap=300, modules=ECHO_MODULES)]
    kinds = [i.kind for i in ITEMS]
    assert kinds == ["again.1", "again.2", "rewrite.1", "rewrite.2", "call.1", "call.2"] * 2
    assert len({i.key for i in ITEMS}) == len(ITEMS)
    assert all(i.workload == "repeat" and 0 < i.max_tokens <= 300 for i in ITEMS)
    assert [i.key for i in select(("repeat",), 2, 0, quick=True)] == [i.key for i in ITEMS]


def test_the_second_request_redoes_the_first() -> None:
    for first, second in zip(ITEMS[::2], ITEMS[1::2], strict=True):
        kind = first.kind.split(".")[0]
        if kind == "again":  # the very same request
            assert first.messages == second.messages and first.max_tokens == second.max_tokens
        elif kind == "rewrite":  # the file read again holds a change the first asked for
            assert first.single_call and second.single_call
            read_1, read_2 = first.messages[-1]["content"], second.messages[-1]["content"]
            assert read_1 != read_2 and first.messages[1] != second.messages[1]
            assert {t["function"]["name"] for t in first.tools} >= {"read_file", "write_file"}
        else:  # the same conversation, the call made once, then asked for again elsewhere
            assert second.messages[: len(first.messages)] == first.messages
            made = second.messages[len(first.messages)]["tool_calls"][0]["function"]
            assert made["name"] == "search_code"
            assert set(json.loads(made["arguments"])) == {
                "pattern", "path", "max_results", "case_sensitive"}
            assert "same search" in second.messages[-1]["content"]


def row(kind: str, tokens: int, origins: dict[str, int], first: int | None,
        system: str = "ffwd-echo") -> dict[str, object]:
    return {"workload": "repeat", "kind": kind, "system": system, "tokens": tokens,
            "origins": origins, "first_span": first}


def test_repeat_targets_read_only_the_second_requests_of_the_system() -> None:
    runs = [row("again.1", 100, {"echo": 10}, 2), row("again.2", 100, {"recall": 70}, 48),
            row("call.2", 50, {"recall": 20, "echo": 10, "grammar": 15}, 12),
            row("again.2", 100, {}, None, system="llama-server:ngram-mod")]
    share, span = repeat_targets(runs)
    # 100 of 150 ids (grammar's ids are not copies): short of 80%; spans 12 and 48: 48
    assert (share["value"], share["met"]) == (100 / 150, False) and REPEAT_SHARE == 0.8
    assert (span["value"], span["met"]) == (48, True) and LONG_SPAN == 16
    assert repeat_targets([row("again.1", 100, {"recall": 99}, 64)]) == []
