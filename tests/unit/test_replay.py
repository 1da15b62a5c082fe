"""`ffwd replay` and the BFCL loader."""

from __future__ import annotations

import json

import pytest

from ffwd.bench.replay import ReplayResult, replay, replay_one
from ffwd.bench.workloads.bfcl import CATEGORIES, load_entries
from ffwd.cli import main
from ffwd.fill import FillPlan, FillRow
from ffwd.templates.formats import FORMATS, get_format
from tests.unit._tokenizers import tokenizer

BUILTIN = [f for f in FORMATS if get_format(f).builtin is not None]
JSON_TYPES = {"string", "number", "integer", "boolean", "array", "object", "null"}


def types(schema: object) -> set[str]:
    if isinstance(schema, dict):
        own = {schema["type"]} if isinstance(schema.get("type"), str) else set()
        return own.union(*(types(v) for v in schema.values()))
    if isinstance(schema, list):
        return set().union(*(types(v) for v in schema))
    return set()


def test_bfcl_entries_have_questions_openai_tools_and_first_values() -> None:
    entries = load_entries("simple_python", limit=5)
    assert [e.id for e in entries] == [f"simple_python_{i}" for i in range(5)]
    first = entries[0]
    assert first.messages[0]["role"] == "user"
    assert first.tools[0]["type"] == "function"
    assert first.tools[0]["function"]["parameters"]["type"] == "object"
    # {"base": [10], "height": [5], "unit": ["units", ""]} -> the first allowed values
    assert (first.call.name, first.call.arguments) == (
        "calculate_triangle_area",
        {"base": 10, "height": 5, "unit": "units"},
    )
    # {"x": [4], "y": [5], "z": ["", 0]}: z is optional and may be left out
    assert entries[2].call.arguments == {"x": 4, "y": 5}


@pytest.mark.parametrize("category", ["multiple", "simple_java", "live_simple"])
def test_bfcl_types_become_json_schema(category: str) -> None:
    for entry in load_entries(category, limit=30):
        assert types([t["function"]["parameters"] for t in entry.tools]) <= JSON_TYPES


def test_bfcl_bad_category_and_limit_are_named() -> None:
    with pytest.raises(ValueError, match="expected one of simple_python"):
        load_entries("simple_cobol")
    with pytest.raises(ValueError, match="limit=0"):
        load_entries("multiple", limit=0)
    assert "multiple" in CATEGORIES


def test_replay_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--bfcl", "simple_python", "--limit", "12", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"entries", "tokens", "injected", "fraction", "mismatches", "by_kind"} <= set(out)
    assert out["entries"] == 12 and out["mismatches"] == 0
    assert out["fraction"] == pytest.approx(out["injected"] / out["tokens"], abs=1e-4)
    assert sum(out["by_kind"].values()) == out["injected"]


def test_replay_table_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", "--bfcl", "multiple", "--limit", "3", "--format", "qwen_xml"]) == 0
    out = capsys.readouterr().out
    assert "qwen_xml" in out and "mismatches" in out and "injected by kind" in out


def test_required_saves_more_than_auto() -> None:
    entries = load_entries("multiple", limit=15)
    auto = replay(entries, tokenizer("default"), "hermes", "auto")
    required = replay(entries, tokenizer("default"), "hermes", "required")
    assert auto.mismatches == required.mismatches == 0
    assert required.fraction > auto.fraction > 0.3


def test_a_wrong_row_counts_as_a_mismatch_and_injects_nothing() -> None:
    plan = FillPlan(rows=(FillRow((5,), (6, 7), "key"), FillRow((8,), (9, 9), "close")))
    result = ReplayResult()
    replay_one(plan, None, [0], [5, 6, 7, 8, 9, 1], result)
    assert (result.tokens, result.injected, result.mismatches) == (6, 2, 1)
    assert result.by_kind["key"] == 2 and result.by_kind["close"] == 0
    assert result.examples == [{"at": 4, "proposed": [9, 9], "truth": [9, 1]}]


def test_a_required_argument_skips_the_empty_allowed_value() -> None:
    # {"fuel_efficiency": ["", 25.0]}, and the schema requires fuel_efficiency.
    entry = load_entries("simple_python", limit=201)[200]
    assert entry.call.arguments["fuel_efficiency"] == 25.0


def test_replay_with_the_grammar_injects_more_with_no_mismatch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["replay", "--bfcl", "multiple", "--limit", "8", "--format", *BUILTIN,
            "--tool-choice", "required", "--grammar", "--json"]
    assert main(argv) == 0
    cells = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [c["format"] for c in cells] == BUILTIN
    for cell in cells:
        assert cell["mismatches"] == cell["rows_alone"]["mismatches"] == 0
        assert cell["grammar_rejected"] == cell["disagreements"] == 0
        assert cell["both_proposed"] > 0 and cell["by_kind"]["grammar"] > 0
        assert cell["fraction"] > cell["rows_alone"]["fraction"]
