"""Strict rows compiled from whole renderings, checked against whole renderings.

The main check replays real assistant turns (rendered by the template and
tokenized as a whole) through a `FillSession`: every row that fires must
propose exactly the ids that follow, for all four formats on both tokenizers.
"""

from __future__ import annotations

from typing import Any

import pytest

from ffwd.bench.replay import ReplayResult, assistant_ids, replay_turn
from ffwd.fill import FillSession
from ffwd.templates.formats import get_format
from ffwd.templates.formats.probe import assistant_message as answer
from ffwd.templates.render import render_chat
from ffwd.templates.rows import CompiledTools, compile_tools, default_eos_ids
from ffwd.templates.turns import turn_start
from tests.unit._collection import need_models, template_for, written_formats
from tests.unit._tokenizers import SPECS, tokenizer

STR = {"type": "string"}
INT = {"type": "integer"}


def tool(name: str, props: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    params = {"type": "object", "properties": props, "required": required or []}
    return {
        "type": "function",
        "function": {"name": name, "description": name, "parameters": params},
    }


TOOLS = [
    tool("get_weather", {"city": STR, "unit": {"type": "string", "enum": ["c", "f"]}}, ["city"]),
    tool("get_weather_forecast", {"city": STR, "days": INT}, ["city", "days"]),
    tool("math.hypot", {"x": {"type": "number"}, "y": {"type": "number"}}, ["x", "y"]),
    tool("send-email", {"to": {"type": "array", "items": STR}, "body": STR}, ["to"]),
    tool("météo_du_jour", {"ville": STR}, ["ville"]),
    tool("ping", {}),
    tool(
        "book", {"guest": {"type": "object", "properties": {"name": STR}}, "nights": INT}, ["guest"]
    ),
]
CALLS: list[tuple[str, dict[str, Any]]] = [
    ("get_weather", {"city": "Paris", "unit": "c"}),
    ("get_weather", {"city": "New York"}),
    ("get_weather_forecast", {"city": "Tōkyō", "days": 3}),
    ("get_weather_forecast", {"days": 10, "city": "-"}),
    ("math.hypot", {"x": 4, "y": -5.5}),
    ("send-email", {"to": ["a@b.c", "d@e.f"], "body": 'He said "}}" and <tool_call> {"a": 1}'}),
    ("météo_du_jour", {"ville": "Zürich"}),
    ("ping", {}),
    ("book", {"guest": {"name": "Ann"}, "nights": 2}),
    ("book", {"nights": 1, "guest": {}}),
]
USER = [{"role": "user", "content": "Help me."}]
# Formats whose call ends where its arguments end: the model then writes another
# call or ends the turn, so nothing after the name is determined markup.
UNCLOSED = {"mistral_v11", "mistral_v11_ids"}
# Formats whose calls carry an id or an index that differs by call (Kimi's "functions.f:0",
# Solar's and Mistral's ids, Command-R's "tool_call_id"): a forced opening stops there.
IDS = {"mistral_v11_ids", "kimi_k2", "kimi_k3", "solar", "command_r"}
# Templates that write the arguments sorted by key (Gemma 4's dictsort).
SORTED = {"gemma4"}
# Templates whose turn does not open the same way at the start of a conversation and
# later (DeepSeek R1's first-call-only "<｜tool▁calls▁begin｜>", Apriel's reasoning):
# nothing is forced before the first sample.
OPEN_START = {"deepseek_r1", "apriel"}
# Gemma's vocabulary reads "▁" as a space, so DeepSeek's markup ("<｜tool▁sep｜>") decodes
# as text a model could write with spaces; DeepSeek's own vocabulary has it as one token.
CASES = [(spec, fmt) for spec in SPECS for fmt in written_formats()
         if not (spec == "gemma3" and "▁" in get_format(fmt).open_marker)]


def setup(spec: str, fmt: str) -> tuple[Any, str, str]:
    """The tokenizer, and a template that writes `fmt` (its builtin, else a real one)."""
    return tokenizer(spec), template_for(fmt), fmt


def compiled(
    spec: str, fmt: str, tools: list[dict[str, Any]], choice: Any = "auto"
) -> CompiledTools:
    tok, template, name = setup(spec, fmt)
    return compile_tools(tok, template, tools, choice, default_eos_ids(tok), name)


def replay(
    spec: str, fmt: str, ct: CompiledTools, tools: list[dict[str, Any]], turns: list[dict[str, Any]]
) -> ReplayResult:
    tok, template, _ = setup(spec, fmt)
    result = ReplayResult()
    for turn in turns:
        replay_turn(ct, template, tok, USER, tools, turn, result)
    return result


def decode(spec: str, ids: Any) -> str:
    return str(tokenizer(spec).decode(list(ids), skip_special_tokens=False))


@pytest.mark.parametrize(("spec", "fmt"), CASES)
@pytest.mark.parametrize("choice", ["auto", "required"])
def test_rows_agree_with_whole_renderings(spec: str, fmt: str, choice: str) -> None:
    ct = compiled(spec, fmt, TOOLS, choice)
    result = replay(spec, fmt, ct, TOOLS, [answer([c]) for c in CALLS])
    assert result.mismatches == 0, result.examples
    if fmt not in UNCLOSED & IDS:  # there only names and keys are determined
        assert result.injected > result.tokens // 5
    # Every format's names and keys are filled; what else depends on its markup (no
    # scaffold where the name follows the marker, nothing to close after mistral's "}}").
    for kind in ("name", "key"):
        # Gemma 4's bare keys are one id each in Gemma 3's vocabulary, and the colon
        # after each merges with the value's quote (":<"): no key row saves an id.
        if not (kind == "key" and fmt in SORTED and spec == "gemma3"):
            assert result.by_kind[kind] > 0, kind
    if fmt not in UNCLOSED:
        assert result.by_kind["scaffold"] + result.by_kind["close"] + result.by_kind["turn-end"]


@pytest.mark.parametrize(("spec", "fmt"), [c for c in CASES if c[1] != "llama3_json"])
def test_two_calls_and_content_in_one_turn(spec: str, fmt: str) -> None:
    ct = compiled(spec, fmt, TOOLS)
    turns = [answer(CALLS[:2]), answer([CALLS[7], CALLS[4]], "Let me check.")]
    result = replay(spec, fmt, ct, TOOLS, turns)
    assert result.mismatches == 0, result.examples
    if fmt in UNCLOSED & IDS:  # ids and what follows the arguments are the model's own
        assert result.by_kind["name"] > 0 and result.by_kind["key"] > 0
    else:
        assert result.injected > result.tokens // 5


@pytest.mark.parametrize(("spec", "fmt"), CASES)
def test_a_single_tool_scaffold_carries_the_name_up_to_the_first_argument(
    spec: str, fmt: str
) -> None:
    weather = TOOLS[:1]
    ct = compiled(spec, fmt, weather)
    scaffolds = [r for r in ct.plan.rows if r.kind == "scaffold"]
    assert scaffolds
    for row in scaffolds:
        text = decode(spec, row.emit)
        assert "get_weather" in text or fmt in IDS  # an id may come first (Solar)
        # Which argument comes first is open, but where the template sorts them.
        assert "unit" not in text and ("city" not in text or fmt in SORTED)
    result = replay(spec, fmt, ct, weather, [answer([CALLS[0]])])
    assert result.mismatches == 0 and result.by_kind["name"] == 0


def first_turn(spec: str, fmt: str, tools: list[dict[str, Any]], call: tuple[str, Any]
               ) -> tuple[str, list[int]]:
    """The template's whole rendering of a turn making `call`, and the ids it writes."""
    tok, template, _ = setup(spec, fmt)
    prompt = render_chat(template, USER, tools, tokenizer=tok)
    whole = render_chat(template, [*USER, answer([call])], tools, False, tokenizer=tok)
    return whole, assistant_ids(tok, prompt, whole, default_eos_ids(tok))


@pytest.mark.parametrize(("spec", "fmt"), CASES)
def test_a_tool_without_arguments_is_filled_through_its_closing_markup(spec: str, fmt: str) -> None:
    ping = [TOOLS[5]]
    tok, template, _ = setup(spec, fmt)
    ct = compiled(spec, fmt, ping, "required")
    prompt = render_chat(template, USER, ping, tokenizer=tok)
    prompt_ids = tok.encode(prompt, add_special_tokens=False)
    proposal = FillSession(ct.plan, prompt_ids, strict_context=ct.new_context()).start()
    whole, truth = first_turn(spec, fmt, ping, ("ping", {}))
    if fmt in OPEN_START:
        assert proposal is None or list(proposal.ids) == truth[: len(proposal.ids)]
        return
    assert proposal is not None
    # What the model would write, up to the end of the arguments (where the last id may
    # merge with what follows: mistral's "}" with "]" or ", ") or to a per-call id.
    assert list(proposal.ids) == truth[: len(proposal.ids)]
    lay = get_format(fmt).locate(whole, turn_start(prompt, whole), "ping", {})
    assert lay is not None
    cut = min([lay.close - 1, *(s for s, _ in lay.varying if s >= lay.name[0])])
    if fmt not in IDS:
        assert whole[lay.name[0] : cut] in decode(spec, proposal.ids)


def test_gemma4_on_its_own_vocabulary_asserts_the_opening_quotes() -> None:
    """Gemma 4's vocabulary has ``<|"|>`` as an added token, which merges with nothing:
    there a key's row runs on through a string's opening quote."""
    spec = str(need_models() / "ggml-vocab-gemma-4.gguf")
    ct = compiled(spec, "gemma4", TOOLS, "auto")
    result = replay(spec, "gemma4", ct, TOOLS, [answer([c]) for c in CALLS])
    assert result.mismatches == 0, result.examples
    quote = tokenizer(spec).convert_tokens_to_ids('<|"|>')
    keys = [r for r in ct.plan.rows if r.kind == "key"]
    assert any(r.emit[-1] == quote for r in keys)
    assert result.injected > result.tokens // 4


@pytest.mark.parametrize("spec", SPECS)
def test_a_name_that_is_a_prefix_of_another_waits_until_it_is_unique(spec: str) -> None:
    both = TOOLS[:2]
    ct = compiled(spec, "hermes", both)
    for call in CALLS[:4]:
        result = replay(spec, "hermes", ct, both, [answer([call])])
        assert result.mismatches == 0, (call, result.examples)
        assert result.by_kind["name"] > 0
    # No name row fires on "get_weather" alone: both names go on from there.
    for row in ct.plan.rows:
        if row.kind == "name":
            assert not decode(spec, row.trigger).endswith('"get_weather')


def push_all(session: FillSession, ids: list[int]) -> list[Any]:
    """Push ids as sampled, declining every proposal; return the proposals in order."""
    out = []
    for tok in ids:
        proposal = session.push(tok)
        if proposal is not None:
            session.commit(proposal, 0)
        out.append(proposal)
    return out


def test_key_rows_fire_only_for_unused_keys() -> None:
    sides = [tool("tri", {"side1": INT, "side2": INT, "side3": INT}, ["side1", "side2", "side3"])]
    ct = compiled("default", "hermes", sides)
    tok = tokenizer("default")
    turn = '<tool_call>\n{"name": "tri", "arguments": {"side1": 1, "side2": 2, "side3": 3}}'
    ids = tok.encode(turn, add_special_tokens=False)
    session = FillSession(ct.plan, [0], strict_context=ct.new_context())
    proposals = push_all(session, ids)
    pieces = [tok.decode(ids[: i + 1]) for i in range(len(ids))]
    after = {pieces[i]: (p and tok.decode(list(p.ids))) for i, p in enumerate(proposals)}
    assert after['<tool_call>\n{"name": "tri", "arguments": {"side'] is None  # three keys left
    assert after['<tool_call>\n{"name": "tri", "arguments": {"side1": 1, "side'] is None
    assert (
        after['<tool_call>\n{"name": "tri", "arguments": {"side1": 1, "side2": 2,'] == ' "side3":'
    )
    result = replay(
        "default", "hermes", ct, sides, [answer([("tri", {"side3": 3, "side1": 1, "side2": 2})])]
    )
    assert result.mismatches == 0 and result.by_kind["key"] > 0


def test_the_context_tracks_calls_strings_and_keys() -> None:
    ct = compiled("default", "hermes", TOOLS)
    tok = tokenizer("default")
    context = ct.new_context()
    context.observe(
        tok.encode(
            '<tool_call>\n{"name": "get_weather", "arguments": {"city": "}}',
            add_special_tokens=False,
        )
    )
    state = context.state
    assert state.tool == "get_weather" and state.used == ("city",)
    assert state.where[3] is True  # inside a string
    closes = [r for r in ct.plan.rows if r.kind == "close"]
    assert closes and not any(context.allows(r) for r in closes)


@pytest.mark.parametrize(("spec", "fmt"), CASES)
def test_forced_choices_fire_before_the_first_sample(spec: str, fmt: str) -> None:
    tok, template, _ = setup(spec, fmt)
    prompt_ids = tok.encode(
        render_chat(template, USER, TOOLS, tokenizer=tok), add_special_tokens=False
    )
    auto = compiled(spec, fmt, TOOLS, "auto")
    assert FillSession(auto.plan, prompt_ids, strict_context=auto.new_context()).start() is None
    named = compiled(spec, fmt, TOOLS, {"type": "function", "function": {"name": "météo_du_jour"}})
    session = FillSession(named.plan, prompt_ids, strict_context=named.new_context())
    proposal = session.start()
    if fmt not in OPEN_START:
        _, truth = first_turn(spec, fmt, TOOLS, CALLS[6])
        assert proposal is not None and list(proposal.ids) == truth[: len(proposal.ids)]
        assert fmt in IDS or "météo_du_jour" in decode(spec, proposal.ids)
    required = compiled(spec, fmt, TOOLS, "required")
    auto_result = replay(spec, fmt, auto, TOOLS, [answer([c]) for c in CALLS[:4]])
    forced_result = replay(spec, fmt, required, TOOLS, [answer([c]) for c in CALLS[:4]])
    assert forced_result.mismatches == 0
    assert forced_result.injected > auto_result.injected


def test_tool_choice_none_compiles_no_rows_and_bad_choices_are_named() -> None:
    ct = compiled("default", "hermes", TOOLS, "none")
    assert ct.plan.rows == () and ct.plan.eos
    with pytest.raises(ValueError, match="not among the tools"):
        compiled("default", "hermes", TOOLS, {"type": "function", "function": {"name": "nope"}})
    with pytest.raises(ValueError, match="expected 'auto', 'none', 'required'"):
        compiled("default", "hermes", TOOLS, "always")


@pytest.mark.parametrize(("spec", "fmt"), CASES)
def test_delimiters_end_string_values_and_eos_is_never_injected(spec: str, fmt: str) -> None:
    ct = compiled(spec, fmt, TOOLS)
    assert ct.plan.delimiters
    if get_format(fmt).arguments == "json":
        assert all('"' in decode(spec, [d]) for d in ct.plan.delimiters)
    eos = set(ct.plan.eos)
    assert eos and not any(eos & set(r.emit) for r in ct.plan.rows)
    assert all(len(r.emit) >= 2 for r in ct.plan.rows)


@pytest.mark.parametrize("spec", SPECS)
def test_a_hundred_tools(spec: str) -> None:
    tools = [
        tool(
            f"{['get', 'set', 'list'][i % 3]}_item_{i}",
            {"id": INT, "note": STR, f"opt_{i}": {"type": "boolean"}},
            ["id"],
        )
        for i in range(100)
    ]
    ct = compiled(spec, "hermes", tools)
    calls = [
        (f"{['get', 'set', 'list'][i % 3]}_item_{i}", {"id": i, "note": "x" * (i % 4)})
        for i in range(0, 100, 9)
    ]
    result = replay(spec, "hermes", ct, tools, [answer([c]) for c in calls])
    assert result.mismatches == 0, result.examples
    assert result.by_kind["name"] > 0


def test_a_fast_tokenizer_is_required() -> None:
    class Slow:
        chat_template = None

    with pytest.raises(ValueError, match="fast tokenizer"):
        compile_tools(Slow(), setup("default", "hermes")[1], TOOLS)


@pytest.mark.parametrize("spec", SPECS)
def test_xml_markup_between_and_after_parameters_is_filled(spec: str) -> None:
    ct = compiled(spec, "qwen_xml", TOOLS)
    tok = tokenizer(spec)
    text = (
        "<tool_call>\n<function=get_weather_forecast>\n<parameter=city>\nOslo\n</parameter>\n"
        "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>"
    )
    ids = tok.encode(text, add_special_tokens=False)
    session = FillSession(ct.plan, [0], strict_context=ct.new_context())
    proposals = push_all(session, ids)
    said = [tok.decode(list(p.ids)) for p in proposals if p is not None]
    # After "<": the one key left, whole, but the newline before its value (a value
    # that starts with a space or a newline merges with it: "\n ").
    assert "parameter=days>" in said
    # Every key written: the call closes (Gemma merges its last ">" with what follows).
    assert any(s.startswith("parameter>\n</function>\n</tool_call") for s in said)
    # An optional key left out: after "</" the function can only close.
    partial = tok.encode(
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n</function>",
        add_special_tokens=False,
    )
    session = FillSession(ct.plan, [0], strict_context=ct.new_context())
    said = [tok.decode(list(p.ids)) for p in push_all(session, partial) if p is not None]
    assert any(s.startswith("function>") for s in said)
