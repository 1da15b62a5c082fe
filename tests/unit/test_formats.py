"""Tool-call formats: detection, incremental parsing, malformed markup, held-back text."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ffwd.templates.formats import (
    FORMATS,
    ContentDelta,
    Delta,
    ToolCallDelta,
    get_format,
    recognize,
)
from ffwd.templates.formats.values import convert_value
from ffwd.templates.render import render_chat

TURN_ENDS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>")
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("get_weather", {"city": "Paris", "unit": "c"}),
    ("send-email", {"to": ["a@b.c"], "body": 'Hi "there"\nbye {x}', "urgent": True}),
    ("météo.du_jour", {}),
    ("book", {"guest": {"name": "Ann", "nights": [1, 2]}, "n": -2.5}),
]


def turn(fmt: str, calls: list[tuple[str, dict[str, Any]]], content: str | None = None) -> str:
    """The assistant turn as the format's builtin template writes it, without its end marker."""
    message = {
        "role": "assistant",
        "content": content,
        "tool_calls": [{"function": {"name": n, "arguments": a}} for n, a in calls],
    }
    template = get_format(fmt).builtin_template
    prompt = render_chat(template, [{"role": "user", "content": "hi"}])
    text = render_chat(
        template, [{"role": "user", "content": "hi"}, message], add_generation_prompt=False
    )
    assert text.startswith(prompt)
    text = text[len(prompt) :]
    for end in TURN_ENDS:
        text = text.split(end)[0]
    return text


def parse(fmt: str, pieces: list[str]) -> tuple[list[Delta], Any]:
    parser = get_format(fmt).new_parser()
    deltas: list[Delta] = []
    for piece in pieces:
        deltas += parser.feed(piece)
    deltas += parser.finish()
    return deltas, parser


def content(deltas: list[Delta]) -> str:
    return "".join(d.text for d in deltas if isinstance(d, ContentDelta))


def streamed_calls(deltas: list[Delta]) -> list[tuple[str | None, str]]:
    """(name, concatenated argument fragments) per call index, from the deltas alone."""
    calls: dict[int, list[Any]] = {}
    for d in deltas:
        if isinstance(d, ToolCallDelta):
            entry = calls.setdefault(d.index, [None, ""])
            if d.name is not None:
                assert entry[0] is None and entry[1] == "", "the name comes first, once"
                entry[0] = d.name
            entry[1] += d.arguments
    return [(n, a) for n, a in (calls[i] for i in sorted(calls))]


def expected(fmt: str) -> list[tuple[str, dict[str, Any]]]:
    return CALLS[:1] if fmt == "llama3_json" else CALLS


BUILTIN = [f for f in FORMATS if get_format(f).builtin is not None]


def test_an_unknown_format_is_an_error_naming_the_formats() -> None:
    with pytest.raises(ValueError, match="expected one of hermes, qwen_xml"):
        get_format("xml")


@pytest.mark.parametrize("fmt", BUILTIN)
def test_builtin_template_is_recognised_as_its_format(fmt: str) -> None:
    found = recognize(get_format(fmt).builtin_template)
    assert found.format is not None and found.format.name == fmt and found.how == "rendered"


def test_a_template_without_calls_is_recognised_as_none() -> None:
    found = recognize("{% for m in messages %}{{ m.content }}{% endfor %}")
    assert found.format is None and "does not write" in found.how


@pytest.mark.parametrize("fmt", BUILTIN)
def test_whole_text_gives_the_calls(fmt: str) -> None:
    calls = expected(fmt)
    deltas, parser = parse(fmt, [turn(fmt, calls)])
    assert [(c.name, json.loads(c.arguments)) for c in parser.calls] == calls
    assert content(deltas).strip() == ""
    # The stream alone tells the same story: name first, fragments add up.
    assert streamed_calls(deltas) == [(c.name, c.arguments) for c in parser.calls]


@pytest.mark.parametrize("fmt", BUILTIN)
def test_one_character_at_a_time_gives_the_same_calls(fmt: str) -> None:
    text = turn(fmt, expected(fmt))
    whole = parse(fmt, [text])[1].calls
    deltas, parser = parse(fmt, list(text))
    assert parser.calls == whole
    assert streamed_calls(deltas) == [(c.name, c.arguments) for c in whole]


@pytest.mark.parametrize("fmt", BUILTIN)
@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_random_chunks_give_the_same_calls_and_content(fmt: str, cuts: list[int]) -> None:
    prefix = "" if fmt == "llama3_json" else "Sure <b>. "
    text = turn(fmt, expected(fmt), prefix or None)
    bounds = sorted({min(c, len(text)) for c in cuts} | {0, len(text)})
    pieces = [text[a:b] for a, b in itertools.pairwise(bounds)]
    deltas, parser = parse(fmt, pieces)
    assert [(c.name, json.loads(c.arguments)) for c in parser.calls] == expected(fmt)
    assert content(deltas).strip() == prefix.strip()


@pytest.mark.parametrize(
    ("fmt", "text"),
    [
        ("hermes", '<tool_call>\n{"name": oops}\n</tool_call>'),
        ("hermes", '<tool_call>\n{"arguments": {}}\n</tool_call>'),
        ("hermes", '<tool_call>\n{"name": "f", "arguments": [1]}\n</tool_call>'),
        ("qwen_xml", "<tool_call>\n<func=f>\n</tool_call>"),
        ("qwen_xml", "<tool_call>\n<function=f>\n<oops>\n</function>\n</tool_call>"),
        ("llama3_json", '{"nome": "f", "parameters": {}} and more'),
        ("llama3_json", "{not json at all"),
        ("mistral", "[TOOL_CALLS]not a list"),
        ("mistral", '[TOOL_CALLS][{"name": "f", "arguments": {"a": }}]'),
    ],
)
def test_malformed_markup_comes_back_as_content(fmt: str, text: str) -> None:
    for pieces in ([text], list(text)):
        deltas, parser = parse(fmt, pieces)
        assert parser.calls == []
        assert content(deltas) == text


@pytest.mark.parametrize("fmt", ["hermes", "qwen_xml", "mistral"])
def test_an_unfinished_call_comes_back_as_content(fmt: str) -> None:
    text = turn(fmt, CALLS[:1])
    cut = text[: len(text) * 2 // 3]
    deltas, parser = parse(fmt, [cut])
    assert parser.calls == []
    assert content(deltas) == cut


@pytest.mark.parametrize("fmt", ["hermes", "qwen_xml", "mistral"])
def test_text_that_may_start_a_marker_is_held_back(fmt: str) -> None:
    marker = get_format(fmt).open_marker
    parser = get_format(fmt).new_parser()
    out = parser.feed("Hello " + marker[:4])
    assert content(out) == "Hello "
    assert parser.held_back == marker[:4]
    out = parser.feed("x")  # no marker after all
    assert content(out) == marker[:4] + "x"
    assert parser.held_back == ""
    parser.feed(" " + marker[:3])
    assert content(parser.finish()) == marker[:3]


def test_content_around_calls_is_kept() -> None:
    text = "Let me look.\n" + turn("hermes", CALLS[:1]) + "\nDone."
    deltas, parser = parse("hermes", list(text))
    assert [c.name for c in parser.calls] == ["get_weather"]
    assert content(deltas) == "Let me look.\n\nDone."


def test_mistral_calls_in_one_list() -> None:
    _, parser = parse(
        "mistral",
        ['[TOOL_CALLS][{"name": "a", "arguments": {"x": 1}}, ', '{"name": "b", "arguments": {}}]'],
    )
    assert [(c.name, c.arguments) for c in parser.calls] == [("a", '{"x": 1}'), ("b", "{}")]


def test_arguments_given_as_a_json_string_are_decoded() -> None:
    _, parser = parse(
        "hermes", ['<tool_call>\n{"name": "f", "arguments": "{\\"a\\": 1}"}\n</tool_call>']
    )
    assert [(c.name, json.loads(c.arguments)) for c in parser.calls] == [("f", {"a": 1})]


def test_qwen_xml_values_follow_the_schema() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "n": {"type": "integer"},
                        "s": {"type": "string"},
                        "b": {"type": "boolean"},
                    },
                },
            },
        }
    ]
    parser = get_format("qwen_xml").new_parser(tools)
    parser.feed(
        "<tool_call>\n<function=f>\n<parameter=n>\n5\n</parameter>\n<parameter=s>\n5\n"
        "</parameter>\n<parameter=b>\nTrue\n</parameter>\n</function>\n</tool_call>"
    )
    assert json.loads(parser.calls[0].arguments) == {"n": 5, "s": "5", "b": True}
    assert convert_value("not json", None) == "not json"


@pytest.mark.parametrize("fmt", [f for f in BUILTIN if get_format(f).parallel])
def test_a_cut_message_drops_its_unfinished_call(fmt: str) -> None:
    text = turn(fmt, CALLS[:2])
    second = text.rindex(CALLS[1][0])  # the second call's name: cut inside that call
    parser = get_format(fmt).new_parser()
    deltas = [*parser.feed(text[: second + 4]), *parser.finish(cut=True)]
    assert [c.name for c in parser.calls] == ["get_weather"]
    assert not [d for d in deltas if isinstance(d, ContentDelta) and d.text.strip()]
    # Uncut, the same text comes back as content (the model wrote it as it was).
    plain = get_format(fmt).new_parser()
    deltas = [*plain.feed(text[: second + 4]), *plain.finish()]
    assert any(isinstance(d, ContentDelta) and CALLS[1][0][:4] in d.text for d in deltas)


HARMONY_CALL = ('<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant'
                '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>'
                '{"city": "Oslo"}<|call|>')


@pytest.mark.parametrize("step", [1, 3, len(HARMONY_CALL)])
def test_harmony_reads_a_call_in_the_channel_header_and_keeps_its_header_out_of_content(
        step: int) -> None:
    parser = get_format("harmony").new_parser()
    out = [d for i in range(0, len(HARMONY_CALL), step) for d in parser.feed(
        HARMONY_CALL[i:i + step])] + parser.finish()
    assert [(c.name, json.loads(c.arguments)) for c in parser.calls] == [
        ("get_weather", {"city": "Oslo"})]
    content = "".join(d.text for d in out if isinstance(d, ContentDelta))
    assert content == "<|channel|>analysis<|message|>Need weather.<|end|>"


def test_harmony_rows_cut_from_the_role_header_do_not_fire_in_the_channel_header() -> None:
    fmt = get_format("harmony")
    role, channel = fmt.new_parser(), fmt.new_parser()
    role.feed(" to=functions.f")
    channel.feed("<|channel|>commentary to=functions.f")
    assert role.state.tool == channel.state.tool is None
    assert role.state.name == channel.state.name == "f"
    assert role.state.where != channel.state.where


def test_harmony_final_message_is_content() -> None:
    parser = get_format("harmony").new_parser()
    text = "<|channel|>final<|message|>Hello.<|return|>"
    out = parser.feed(text) + parser.finish()
    assert parser.calls == []
    assert "".join(d.text for d in out if isinstance(d, ContentDelta)) == text
