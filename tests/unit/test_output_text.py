"""The text layer without a model: a reply is the join of the deltas it streamed,
a repeated call is held back and dropped, markup that fails to parse is noted (the
generation then disarms the rows), and the parser gates the template rows."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ffwd.engine.events import TokenEvent
from ffwd.engine.sample.text import OutputText, ToolCalls
from ffwd.fill import FillRow
from ffwd.templates.formats import get_format
from ffwd.templates.formats.base import ContentDelta, NameSoFar, Rule, ToolCallDelta
from ffwd.templates.formats.repeats import RepeatFilter
from ffwd.templates.text import Detokenizer, decode_ids, token_text
from tests.unit._tokenizers import tokenizer


def call(index: int, name: str | None = None, arguments: str = "") -> ToolCallDelta:
    return ToolCallDelta(index, name, arguments)


def test_worked_example_from_the_docstring() -> None:
    f = RepeatFilter()
    first = f.feed([call(0, "f"), call(0, arguments='{"a": 1}')], completed=1)
    assert [d.arguments for d in first if isinstance(d, ToolCallDelta)] == ["", '{"a": 1}']
    assert f.feed([call(1, "f"), call(1, arguments='{"a":')]) == []  # may repeat: held
    assert f.feed([call(1, arguments=" 1}")], completed=1) == []  # it did: dropped
    assert f.repeated and f.dropped == 1 and f.made == [("f", '{"a": 1}')]


def test_a_call_that_differs_goes_out_whole_and_late() -> None:
    f = RepeatFilter()
    f.feed([call(0, "f"), call(0, arguments='{"a": 1}')], completed=1)
    assert f.feed([call(1, "f"), call(1, arguments='{"a": ')]) == []
    out = f.feed([call(1, arguments="2}")], completed=1)
    assert out == [call(1, "f"), call(1, arguments='{"a": '), call(1, arguments="2}")]
    assert not f.repeated and len(f.made) == 2
    # Another name never waits; content releases whatever is held.
    assert f.feed([call(2, "g")]) == [call(2, "g")]
    assert f.feed([call(3, "f"), ContentDelta("x")]) == [call(3, "f"), ContentDelta("x")]


def events(text: str) -> list[TokenEvent]:
    return [TokenEvent(i, "sampled") for i in tokenizer("default").encode(text)]


TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {}}}]


def run(text: str, rules: dict[FillRow, tuple[Rule, ...]] | None = None
        ) -> tuple[OutputText, list[TokenEvent]]:
    out = OutputText(tokenizer("default"), calls=ToolCalls(get_format("hermes"), TOOLS,
                                                            rules or {}))
    sent = []
    for e in events(text):
        sent.append(out.feed(e))
        if out.calls_done:
            break
    return out, sent


def joined(sent: list[TokenEvent], out: OutputText, cut: bool) -> tuple[str, list[list[str]]]:
    content, calls = "", {}
    for d in [x for e in sent for x in e.deltas] + list(out.finish(cut)[1]):
        if isinstance(d, ContentDelta):
            content += d.text
        else:
            calls.setdefault(d.index, [d.name or "", ""])[1] += d.arguments
    return content, list(calls.values())


def test_a_repeated_call_is_dropped_and_the_reply_is_what_was_streamed() -> None:
    one = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
    out, sent = run(f"{one}\n{one}\n<tool_call>\n")
    assert out.calls_done and out.repeats.dropped == 1
    content, calls = joined(sent, out, cut=True)
    assert calls == [["f", '{"a": 1}']] and content == ""
    assert [(c.name, json.loads(c.arguments)) for c in out.calls] == [("f", {"a": 1})]


def test_a_cut_call_is_returned_as_far_as_it_was_written() -> None:
    out, sent = run('<tool_call>\n{"name": "f", "arguments": {"a": 1, "b"')
    content, calls = joined(sent, out, cut=True)
    assert calls == [["f", '{"a": 1, "b"']] and content == ""
    assert [(c.name, c.arguments) for c in out.calls] == [("f", '{"a": 1, "b"')]


def test_markup_that_fails_to_parse_is_noted_on_the_feed_that_met_it() -> None:
    out = OutputText(tokenizer("default"), calls=ToolCalls(get_format("hermes"), TOOLS))
    bad = '<tool_call>\n{"name": "f", "arguments": ]'
    failed = []
    for e in events(bad):
        out.feed(e)
        failed.append(out.failed)
    assert out.parser is not None and out.parser.failures == 1
    assert failed.count(True) == 1  # only the feed that met it
    out.finish(cut=False)
    assert not out.failed


@pytest.mark.parametrize("stop", [(), ("zq",)], ids=["no-stop", "held-by-a-stop"])
def test_the_parser_gates_a_row_where_its_rendering_had_it(stop: tuple[str, ...]) -> None:
    row = FillRow((1,), (2,), "name", requires_context=True)
    calls = ToolCalls(get_format("hermes"), TOOLS, {row: (NameSoFar("f"),)})
    out = OutputText(tokenizer("default"), stop, calls)
    allowed = []
    for e in events('<tool_call>\n{"name": "f'):
        out.feed(e)
        allowed.append(out.allows(row))
    assert allowed[-1] and not any(allowed[:-1])  # only once the name written is "f"
    out.feed(events("z")[0])
    # "fz" is no longer the name; under a stop string "zq" the z is held back, so the
    # parser has not read it: the row still may not fire.
    assert not out.allows(row)
    assert out.parser is not None and out.parser.state.name == ("f" if stop else "fz")


@given(ids=st.lists(st.integers(0, 49151), max_size=40), chunk=st.integers(1, 4))
@settings(max_examples=200, deadline=None)
def test_a_byte_level_output_decodes_from_its_ids_bytes_as_the_tokenizer_does(
        ids: list[int], chunk: int) -> None:
    """The embedded model's byte-level vocabulary: what the detokenizer releases, id by id
    from the ids' bytes (no tokenizer call), is the tokenizer's own text of them all, and
    the tokenizer-window path gives the same."""
    tok = tokenizer("default")
    fast, windows = Detokenizer(tok, token_text(tok)), Detokenizer(tok)
    assert fast._bytes is not None  # the byte path is the one taken
    out_fast, out_windows = [], []
    for i in range(0, len(ids), chunk):
        out_fast.append(fast.feed(ids[i : i + chunk]))
        out_windows.append(windows.feed(ids[i : i + chunk]))
    out_fast.append(fast.flush())
    out_windows.append(windows.flush())
    assert "".join(out_fast) == "".join(out_windows) == decode_ids(tok, ids)
