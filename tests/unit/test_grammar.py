"""The grammar tier without a model: per-format tool grammars, response formats,
the mask and the forced tokens, checked against whole template renderings."""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ffwd.bench.replay import assistant_ids, in_schema_order
from ffwd.bench.workloads.bfcl import load_entries
from ffwd.grammar import GrammarError, RequestGrammars
from ffwd.grammar.request import UNCHECKED
from ffwd.templates.formats import get_format
from ffwd.templates.render import render_chat
from ffwd.templates.rows import default_eos_ids
from ffwd.templates.tools import normalize_tools
from tests.unit._collection import template_for, written_formats
from tests.unit._tokenizers import tokenizer

STR = {"type": "string"}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": STR, "unit": {"enum": ["c", "f"]}, "days": {"type": "integer"}},
            "required": ["city"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {"type": "object", "properties": {"tz": STR}, "required": ["tz"]},
    },
}
TOOLS = [WEATHER, TIME]
USER = [{"role": "user", "content": "Weather in Oslo?"}]
# Formats whose tool calls the grammar constrains; the others say why they go free.
FORMATS = [f for f in written_formats() if f not in UNCHECKED]


@cache
def grammars(fmt: str) -> RequestGrammars:
    tok = tokenizer("default")
    return RequestGrammars(tok, template_for(fmt), fmt, len(tok), default_eos_ids(tok))


def turn_ids(fmt: str, tools: list[dict[str, Any]], calls: list[tuple[str, Any]],
             content: str | None = None, messages: list[dict[str, Any]] = USER) -> list[int]:
    """The ids a model writes for this assistant turn (rendered whole), through EOS."""
    tok = tokenizer("default")
    template = template_for(fmt)
    answer = {
        "role": "assistant",
        "content": content,
        "tool_calls": [{"type": "function", "function": {"name": n, "arguments": a}}
                       for n, a in calls],
    }
    prompt = render_chat(template, messages, tools, tokenizer=tok)
    full = render_chat(template, [*messages, answer], tools, False, tokenizer=tok)
    return assistant_ids(tok, prompt, full, default_eos_ids(tok))


def text_ids(text: str) -> list[int]:
    return list(tokenizer("default").encode(text, add_special_tokens=False))


def accepts(fmt: str, ids: list[int], choice: Any = "required", tools: Any = TOOLS,
            **kw: Any) -> bool:
    constraint = grammars(fmt).for_request(tools, choice, **kw)
    assert constraint is not None
    return bool(constraint.admit(ids) == len(ids))


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("category", ["simple_python", "multiple"])
def test_every_bfcl_ground_truth_call_is_accepted(fmt: str, category: str) -> None:
    for entry in load_entries(category):
        tools = normalize_tools(entry.tools)
        args = in_schema_order(entry.call.arguments, tools, entry.call.name)
        ids = turn_ids(fmt, tools, [(entry.call.name, args)], messages=entry.messages)
        assert accepts(fmt, ids, tools=tools), entry.id


@pytest.mark.parametrize("fmt", FORMATS)
def test_wrong_name_missing_key_and_wrong_type_are_rejected(fmt: str) -> None:
    good = turn_ids(fmt, TOOLS, [("get_weather", {"city": "Oslo", "days": 2})])
    assert accepts(fmt, good)
    for bad in (
        ("get_temperature", {"city": "Oslo"}),  # not a listed tool
        ("get_weather", {"days": 2}),  # required "city" missing
        ("get_weather", {"city": "Oslo", "days": "two"}),  # days is an integer
        ("get_weather", {"city": "Oslo", "unit": "k"}),  # not in the enum
    ):
        assert not accepts(fmt, turn_ids(fmt, TOOLS, [bad])), bad


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_named_choice_allows_only_that_function(fmt: str) -> None:
    named = {"type": "function", "function": {"name": "get_time"}}
    assert accepts(fmt, turn_ids(fmt, TOOLS, [("get_time", {"tz": "UTC"})]), named)
    assert not accepts(fmt, turn_ids(fmt, TOOLS, [("get_weather", {"city": "x"})]), named)


@pytest.mark.parametrize("fmt", [f for f in FORMATS if get_format(f).parallel])
def test_parallel_calls_follow_parallel_tool_calls(fmt: str) -> None:
    two = turn_ids(fmt, TOOLS, [("get_time", {"tz": "UTC"}), ("get_weather", {"city": "x"})])
    assert accepts(fmt, two)
    assert not accepts(fmt, two, parallel=False)
    assert accepts(fmt, turn_ids(fmt, TOOLS, [("get_time", {"tz": "UTC"})]), parallel=False)


@pytest.mark.parametrize("fmt", FORMATS)
def test_auto_is_lazy_free_text_until_the_call_opens(fmt: str) -> None:
    tok = tokenizer("default")
    eos = [tok.eos_token_id]
    assert accepts(fmt, [*text_ids("It is sunny in Oslo."), *eos], "auto")
    call = turn_ids(fmt, TOOLS, [("get_time", {"tz": "UTC"})])
    assert accepts(fmt, call, "auto")
    # Once the call opens, it is constrained: a name that is not a tool is refused.
    bad = turn_ids(fmt, TOOLS, [("get_temperature", {"tz": "UTC"})])
    assert not accepts(fmt, bad, "auto")


@pytest.mark.parametrize("fmt", ["hermes", "qwen_xml"])
def test_a_call_after_content_is_constrained_too(fmt: str) -> None:
    ids = turn_ids(fmt, TOOLS, [("get_time", {"tz": "UTC"})], content="Let me check.")
    assert accepts(fmt, ids, "auto")
    bad = turn_ids(fmt, TOOLS, [("get_time", {"zone": "UTC"})], content="Let me check.")
    assert not accepts(fmt, bad, "auto")


@pytest.mark.parametrize("fmt", ["hermes", "qwen_xml"])
def test_tool_arguments_are_closed_unless_the_schema_opens_them(fmt: str) -> None:
    extra = ("get_time", {"tz": "UTC", "locale": "en"})
    strict = json.loads(json.dumps(TIME))
    strict["function"]["strict"] = True
    assert not accepts(fmt, turn_ids(fmt, [TIME], [extra]), tools=[TIME])
    assert not accepts(fmt, turn_ids(fmt, [strict], [extra]), tools=[strict])
    # The schema's own words are not keys either (a small model's favourite mistake).
    words = ("get_time", {"tz": "UTC", "type": "string"})
    assert not accepts(fmt, turn_ids(fmt, [TIME], [words]), tools=[TIME])
    opened = json.loads(json.dumps(TIME))
    opened["function"]["parameters"]["additionalProperties"] = True
    assert accepts(fmt, turn_ids(fmt, [opened], [extra]), tools=[opened])
    typed = json.loads(json.dumps(TIME))
    typed["function"]["parameters"]["additionalProperties"] = {"type": "integer"}
    assert not accepts(fmt, turn_ids(fmt, [typed], [extra]), tools=[typed])
    assert accepts(fmt, turn_ids(fmt, [typed], [("get_time", {"tz": "UTC", "n": 3})]),
                   tools=[typed])
    nested = {"type": "function", "function": {"name": "book", "parameters": {
        "type": "object", "properties": {"who": {"type": "object", "properties": {
            "name": STR}}}}}}
    inner = ("book", {"who": {"name": "Ada", "age": 36}})
    assert not accepts(fmt, turn_ids(fmt, [nested], [inner]), tools=[nested])
    # An object that lists no properties is a free-form map (keys are the caller's data).
    free = {"type": "function", "function": {"name": "deal", "parameters": {
        "type": "object", "properties": {"cards": {"type": "object"}}}}}
    hands = ("deal", {"cards": {"Ada": 3, "Alan": 5}})
    assert accepts(fmt, turn_ids(fmt, [free], [hands]), tools=[free])


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_call_without_arguments_is_accepted_as_the_template_writes_it(fmt: str) -> None:
    bare = {"type": "function", "function": {"name": "ping", "parameters": {
        "type": "object", "properties": {}}}}
    optional = {"type": "function", "function": {"name": "ls", "parameters": {
        "type": "object", "properties": {"path": STR}}}}
    for tool in (bare, optional):
        ids = turn_ids(fmt, [tool], [(tool["function"]["name"], {})])
        assert accepts(fmt, ids, tools=[tool]), tool


@pytest.mark.parametrize(("fmt", "written", "others"), [
    # Mistral Small 3.2's call ids: nine letters or digits, each call its own.
    ("mistral_v11_ids", r"\[CALL_ID\](\w+)\[ARGS\]", {"Zq81abCD0": True, "abc12345": False,
                                                     "abc-12345": False}),
    # Kimi's call indexes: digits.
    ("kimi_k2", r"functions\.get_time:(\d+)<", {"17": True, "x": False}),
    ("kimi_k3", r'index="(\d+)"', {"3": True, "a1": False}),
])
def test_markup_that_varies_by_call_is_the_models_to_write_in_its_shape(
        fmt: str, written: str, others: dict[str, bool]) -> None:
    tok = tokenizer("default")
    ids = turn_ids(fmt, TOOLS, [("get_time", {"tz": "UTC"})])
    text = tok.decode(ids)
    found = re.search(written, text)
    assert found is not None and accepts(fmt, ids), text
    for other, ok in others.items():
        changed = text[: found.start(1)] + other + text[found.end(1):]
        assert accepts(fmt, text_ids(changed)) == ok, changed


GRAMMAR_TEXT = ("start:", "%json", "x-guidance", " | ", "\n")


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_schema_llguidance_cannot_compile_names_the_tool(
        fmt: str, caplog: pytest.LogCaptureFixture) -> None:
    bad = {"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer", "minimum": 5,
                                               "maximum": 1}},
        "required": ["n"]}}}
    with caplog.at_level("DEBUG", logger="ffwd.grammar"), pytest.raises(GrammarError) as err:
        grammars(fmt).for_request([TIME, bad], "required")
    message = str(err.value)
    # One sentence: the tool, and what is wrong; the grammar goes to the debug log only.
    assert message.startswith("tool 'lookup': its parameters schema cannot be enforced: "
                              "Unsatisfiable schema: "), message
    assert not any(t in message for t in GRAMMAR_TEXT), message
    assert err.value.param == "tools"
    assert any("start:" in r.getMessage() and r.levelname == "DEBUG" for r in caplog.records)


def test_response_format_json_schema_is_constrained() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    constraint = grammars("hermes").for_request([], "none", response_format=rf)
    assert constraint is not None
    eos = tokenizer("default").eos_token_id
    assert constraint.admit([*text_ids('{"n": 3}'), eos]) == len(text_ids('{"n": 3}')) + 1
    assert constraint.admit(text_ids('{"n": "3"}')) < len(text_ids('{"n": "3"}'))
    plain = grammars("hermes").for_request([], "none", response_format={"type": "json_object"})
    assert plain is not None and plain.admit(text_ids("hello")) == 0
    # Closed as tool arguments are (test_closed_objects): listed keys only.
    extra = text_ids('{"n": 3, "m": 4}')
    closed = grammars("hermes").for_request([], "none", response_format=rf)
    assert closed is not None and closed.admit(extra) < len(extra)


def test_a_json_schema_format_without_a_schema_is_any_json_object() -> None:
    # OpenAI's `schema` is optional: a named format without one means any JSON object.
    for spec in ({"name": "anything"}, {"name": "anything", "schema": None, "strict": True}):
        rf = {"type": "json_schema", "json_schema": spec}
        constraint = grammars("hermes").for_request([], "none", response_format=rf)
        assert constraint is not None
        for text in ('{"a": [1, {"b": null}]}', "{}"):
            assert constraint.admit(text_ids(text)) == len(text_ids(text))
        assert constraint.admit(text_ids("[1]")) == 0 and constraint.admit(text_ids("hi")) == 0


@pytest.mark.parametrize("rf", [{"type": "yaml"}, {"type": "json_schema"}, "json", {},
                                {"type": "json_schema", "json_schema": {"schema": "x"}}])
def test_a_bad_response_format_is_an_error_naming_it(rf: Any) -> None:
    with pytest.raises(GrammarError, match="response_format") as err:
        grammars("hermes").for_request([], "none", response_format=rf)
    assert err.value.param == "response_format"


def test_no_grammar_without_anything_to_constrain() -> None:
    assert grammars("hermes").for_request([], "none") is None
    assert grammars("hermes").for_request(TOOLS, "none") is None
    assert grammars("hermes").for_request([], "none", response_format={"type": "text"}) is None


def test_the_mask_lets_only_grammar_ids_through_and_follows_rollbacks() -> None:
    constraint = grammars("hermes").for_request(TOOLS, "required")
    assert constraint is not None
    logits = torch.randn(len(tokenizer("default")), generator=torch.Generator().manual_seed(0))
    forced = list(constraint.propose(constraint).ids)  # type: ignore[union-attr, arg-type]
    masked = constraint.mask(logits, [])
    assert int(masked.argmax()) == forced[0] and torch.isinf(masked).sum() == logits.numel() - 1
    # Further along, then back: the matcher follows whatever output it is shown.
    constraint.mask(logits, forced)
    assert constraint.position == len(forced)
    again = constraint.mask(logits, forced[:1])
    assert constraint.position == 1 and int(again.argmax()) == forced[1]


def test_the_end_of_turn_follows_a_complete_grammar() -> None:
    """A complete grammar allows only EOS, and the matcher takes it (replay pushes it)."""
    constraint = grammars("mistral").for_request(TOOLS, "required", parallel=False)
    assert constraint is not None
    ids = turn_ids("mistral", TOOLS, [("get_time", {"tz": "UTC"})])
    assert ids[-1] == tokenizer("default").eos_token_id
    constraint.sync(ids[:-1])
    assert constraint.done
    constraint.sync(ids)
    assert constraint.position == len(ids)


FORCED_CASES = [(TOOLS, "required", None), (TOOLS, "auto", None),
                ([], "none", {"type": "json_object"}),
                ([], "none", {"type": "json_schema", "json_schema": {"name": "x", "schema": {
                    "type": "object", "properties": {"a": {"enum": ["xy", "xz"]},
                                                     "b": {"type": "integer"}},
                    "required": ["a", "b"]}}})]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(fmt=st.sampled_from(sorted(FORMATS)), case=st.sampled_from(FORCED_CASES),
       seed=st.integers(0, 2**16))
def test_a_forced_span_is_always_what_the_grammar_accepts(fmt: str, case: Any,
                                                          seed: int) -> None:
    """Wherever a walk through the grammar stands, the ids it forces (fast-forwarded under
    ``assert``, never checked by the model) are each allowed by the mask and admitted
    whole: an injected span never disagrees with the grammar."""
    tools, choice, rf = case
    constraint = grammars(fmt).for_request(tools, choice, response_format=rf)
    assert constraint is not None
    vocab = len(tokenizer("default"))
    g = torch.Generator().manual_seed(seed)
    out: list[int] = []
    for _ in range(40):
        proposal = constraint.propose(constraint)  # type: ignore[arg-type]
        if proposal is not None:
            forced = list(proposal.ids)
            assert constraint.admit(forced) == len(forced)
            for j, tok in enumerate(forced):
                assert torch.isfinite(constraint.mask(torch.zeros(vocab), out + forced[:j])[tok])
            out += forced
            constraint.observe(forced)
        if constraint.done:
            break
        sampled = int(constraint.mask(torch.randn(vocab, generator=g), out).argmax())
        out.append(sampled)
        constraint.observe([sampled])


@pytest.mark.parametrize("fmt", sorted(UNCHECKED))
def test_an_unchecked_format_leaves_tool_calls_free_and_says_why(fmt: str) -> None:
    g = grammars(fmt)
    assert g.tools_unconstrained is not None and fmt in g.tools_unconstrained
    assert g.for_request(TOOLS, "required") is None
    # A JSON response format without tools is still constrained.
    assert g.for_request([], "none", response_format={"type": "json_object"}) is not None
