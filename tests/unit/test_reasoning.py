"""Reasoning over llama.cpp's template collection: every template that reasons is found
(the markup around its reasoning, read off its rendering or the tags it names), and an
assistant turn with generated reasoning and an answer, or reasoning and tool calls,
rendered through the template comes back apart, exactly, whole and streamed id by id
over a real vocabulary. Reasoning and answers neither start nor end with whitespace
(the templates strip it) and hold no markup characters.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ffwd.templates.formats.base import ContentDelta, ReasoningDelta, ToolCallDelta
from ffwd.templates.formats.probe import PROBE_CALLS, PROBE_TOOLS, USER, assistant_message
from ffwd.templates.reasoning import ReasoningMarkup, opens, reasoning_markup, thinking_variables
from ffwd.templates.reasoning.markup import SWITCHES
from ffwd.templates.reasoning.parser import IN_REASONING, ReasoningParser
from ffwd.templates.render import render_chat
from ffwd.templates.turns import turn_start
from tests.unit._collection import Specials, need_models, recognized, templates
from tests.unit._tokenizers import tokenizer
from tests.unit.test_roundtrip import TEXT, pieces

THINK = ReasoningMarkup("<think>", "</think>")
PROSE = st.lists(TEXT, min_size=1, max_size=4).map(" ".join)


@cache
def markups() -> dict[str, ReasoningMarkup]:
    return {k: m for k, v in templates().items() if (m := reasoning_markup(v, Specials()))}


def parse(markup: ReasoningMarkup, pieces: list[str], opened: bool, inner: Any = None,
          cut: bool = False) -> tuple[str, str, ReasoningParser]:
    """The reasoning and the content `pieces` stream to, and the parser."""
    parser = ReasoningParser(markup, inner, opened)
    deltas = [d for p in pieces for d in parser.feed(p)] + parser.finish(cut)
    said = "".join(d.text for d in deltas if isinstance(d, ReasoningDelta))
    content = "".join(d.text for d in deltas if isinstance(d, ContentDelta))
    return said, content, parser


def test_the_templates_that_reason_are_found_and_those_that_do_not_are_not() -> None:
    need_models()
    found = markups()
    assert len(found) >= 40, sorted(found)
    assert found["Qwen-Qwen3-0.6B"] == THINK
    assert found["openai-gpt-oss-120b"] == ReasoningMarkup(
        "<|channel|>analysis<|message|>", "<|end|><|start|>assistant",
        "<|channel|>final<|message|>")
    assert found["tencent-Hy3"].start == "<think:opensource>"
    assert found["google-gemma-4-31B-it"].how == "named"
    for plain in ("meta-llama-Llama-3.1-8B-Instruct", "Qwen-Qwen2.5-7B-Instruct",
                  "mistralai-Mistral-Nemo-Instruct-2407", "google-gemma-2-2b-it"):
        assert plain not in found


def rendered_turn(template: str, message: dict[str, Any]) -> tuple[str, bool]:
    """What `message` adds after the generation prompt, and whether that prompt opened
    the reasoning block."""
    prompt = render_chat(template, [USER], PROBE_TOOLS, True, Specials(), **SWITCHES)
    full = render_chat(template, [USER, message], PROBE_TOOLS, False, Specials(), **SWITCHES)
    return full[turn_start(prompt, full):], prompt


RENDERED = sorted(k for k, m in markups().items() if m.how == "rendered")


@pytest.mark.parametrize("name", RENDERED)
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(thought=PROSE, answer=PROSE)
def test_rendered_reasoning_and_answer_read_back_apart(name: str, thought: str,
                                                       answer: str) -> None:
    markup = markups()[name]
    message = {"role": "assistant", "reasoning_content": thought, "content": answer}
    turn, prompt = rendered_turn(templates()[name], message)
    # The model ends its turn with an EOS: the reply is the turn less what follows an answer.
    sentinel, _ = rendered_turn(templates()[name], {**message, "content": "SENTINEL"})
    tail = sentinel[sentinel.rfind("SENTINEL") + len("SENTINEL"):]
    assert turn.endswith(tail), turn
    reply = turn[: len(turn) - len(tail)]
    opened = opens(markup, prompt)
    assert parse(markup, [reply], opened)[:2] == (thought, answer), reply
    split = pieces(tokenizer("default"), reply)
    assert "".join(split) == reply
    assert parse(markup, split, opened)[:2] == (thought, answer), reply


CALLING = sorted(k for k in RENDERED if k in recognized() and recognized()[k].format)


@pytest.mark.parametrize("name", CALLING)
@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck))
@given(thought=PROSE)
def test_calls_after_reasoning_are_read_as_calls(name: str, thought: str) -> None:
    fmt, markup = recognized()[name].format, markups()[name]
    assert fmt is not None
    calls = PROBE_CALLS if fmt.parallel else PROBE_CALLS[:1]
    message = {**assistant_message(calls), "reasoning_content": thought}
    turn, prompt = rendered_turn(templates()[name], message)
    for split in ([turn], pieces(tokenizer("default"), turn)):
        said, _, parser = parse(markup, split, opens(markup, prompt), fmt.new_parser(PROBE_TOOLS))
        assert said == (thought if thought in turn else ""), turn  # some drop it beside calls
        assert [(c.name, json.loads(c.arguments)) for c in parser.calls] == calls, turn


@settings(max_examples=50, deadline=None)
@given(thought=PROSE, answer=PROSE, opened=st.booleans(), cuts=st.lists(
    st.integers(0, 200), max_size=8))
def test_any_split_of_a_reply_gives_the_same_parts(thought: str, answer: str, opened: bool,
                                                   cuts: list[int]) -> None:
    reply = ("" if opened else "<think>") + f"\n{thought}\n</think>\n\n{answer}"
    at = sorted({min(c, len(reply)) for c in cuts})
    split = [reply[a:b] for a, b in zip([0, *at], [*at, len(reply)], strict=True)]
    assert parse(THINK, split, opened)[:2] == (thought, answer)


def test_a_reply_without_reasoning_is_all_answer_and_rows_wait_outside_reasoning() -> None:
    assert parse(THINK, ["Just ", "the answer."], opened=False)[:2] == ("", "Just the answer.")
    parser = ReasoningParser(THINK, None, opened=True)
    assert parser.feed("Mulling <tool_call> over") == [ReasoningDelta("Mulling <tool_call> over")]
    assert parser.state == IN_REASONING and parser.thinking
    assert parser.feed("</think>") == [] and parser.state != IN_REASONING


def test_reasoning_cut_off_by_the_token_limit_is_reasoning() -> None:
    assert parse(THINK, ["<think>", "still going\n", "</thi"], opened=False, cut=True)[:2] == \
        ("still going", "")


def test_harmony_reasoning_then_a_call_in_the_channel_header() -> None:
    need_models()
    fmt = recognized()["openai-gpt-oss-120b"].format
    assert fmt is not None
    reply = ("<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>"
             'commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Paris"}'
             "<|call|>")
    said, content, parser = parse(markups()["openai-gpt-oss-120b"], [reply], False,
                                  fmt.new_parser(PROBE_TOOLS))
    assert (said, content) == ("Need weather.", "")
    assert [(c.name, c.arguments) for c in parser.calls] == [("get_weather", '{"city": "Paris"}')]
    deltas = ReasoningParser(markups()["openai-gpt-oss-120b"], fmt.new_parser(), False).feed(
        "<|channel|>final<|message|>Hi.")
    assert deltas == [ContentDelta("Hi.")] and not any(isinstance(d, ToolCallDelta) for d in deltas)


def test_thinking_variables_are_those_the_template_reads() -> None:
    qwen = "{% if enable_thinking is defined and not enable_thinking %}{% endif %}"
    assert thinking_variables(qwen, False, "high") == {"enable_thinking": False}
    harmony = "Reasoning: {{ reasoning_effort }}"
    assert thinking_variables(harmony, None, "low") == {"reasoning_effort": "low"}
    assert thinking_variables(harmony, None, None) == {}
