"""The markup around tool calls, read off the chat template's own renderings.

A call is written as ``lead NAME mid ARGUMENTS tail``, several calls in one
turn as ``lead call₁ between call₂ ... end``. Rather than hard-coding each
format's whitespace, the skeleton is cut out of two renderings of a sentinel
call with no arguments (one call; two calls in a turn where the format
allows it), the same renderings strict rows are sliced from, so the grammar
and the rows agree on every byte of markup:

    hermes   lead '<tool_call>\\n{"name": "'  mid '", "arguments": '
             tail '}\\n</tool_call>'  between '\\n<tool_call>\\n{"name": "'  end ''
    mistral  lead '[TOOL_CALLS][{"name": "'  tail '}'  between ', {"name": "'  end ']'

Where the arguments are key/value markup (``arguments == "pairs"``), `Pairs`
is cut out of a rendering of one argument of every JSON type: the markup
before a key, between a key and its value (by type: DSML writes whether a
value is a string), after a value, and how the template writes ``True``,
``False`` and ``None``.

The turn's end (an EOS or turn-end token) is not part of the skeleton: once
the grammar is complete, ending the turn is the model's choice among the EOS
ids the mask allows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from ffwd.fill.prefix import common_prefix
from ffwd.templates.formats import ToolFormat
from ffwd.templates.render import render_chat
from ffwd.templates.turns import turn_start

SENTINEL = "ffwd_sentinel_tool"
USER = {"role": "user", "content": "Hi"}
# One argument of every JSON type, in the order of their names (a template may sort them).
TYPED: dict[str, tuple[str, Any]] = {
    "a_s": ("string", "Vx"), "b_i": ("integer", 7), "c_n": ("number", 1.5),
    "d_b": ("boolean", True), "e_z": ("null", None), "f_a": ("array", [7]),
    "g_o": ("object", {"k": 7}),
}


@dataclass(frozen=True, slots=True)
class Pairs:
    open: str  # before a key
    between: Mapping[str, str]  # from a key to its value, by the value's JSON type
    close: str  # after a value
    words: Mapping[str, str]  # how "true", "false" and "null" are written


@dataclass(frozen=True, slots=True)
class Skeleton:
    lead: str  # from the start of the turn to the first name
    mid: str  # from a name to its arguments (JSON: the object; pairs: the first pair)
    tail: str  # from the end of the arguments to the end of the call
    between: str | None  # from the end of one call to the next name; None: one call a turn
    end: str  # after the last call, before the end of the turn
    pairs: Pairs | None = None  # None: the arguments are one object
    arguments: str = "json"  # how that object is written (`ToolFormat.arguments`)


def derive(
    template: str, fmt: ToolFormat, eos_texts: Iterable[str], tokenizer: Any = None
) -> Skeleton:
    """Cut the skeleton out of renderings of a sentinel call (see the module docstring)."""
    eos_texts = list(eos_texts)

    def turn(calls: int, args: Mapping[str, Any] | None = None) -> str:
        call = {"type": "function", "function": {"name": SENTINEL, "arguments": args or {}}}
        answer = {"role": "assistant", "content": None, "tool_calls": [call] * calls}
        return render_chat(template, [USER, answer], [_tool(args)], False, tokenizer=tokenizer)

    def start(args: Mapping[str, Any]) -> int:
        """Where the turn starts (the tool's schema, in the prompt, sets it)."""
        prompt = render_chat(template, [USER], [_tool(args)], tokenizer=tokenizer)
        return turn_start(prompt, turn(1, args))

    prompt = render_chat(template, [USER], [_tool(None)], tokenizer=tokenizer)
    single = turn(1)
    a0 = turn_start(prompt, single)
    lay = fmt.locate(single, a0, SENTINEL, {})
    if lay is None:
        raise ValueError(f"the chat template's tool call does not look like the {fmt.name} format")
    args_end = lay.args_end
    args_start = lay.close - 1 if fmt.arguments != "pairs" else args_end
    lead, mid = single[a0 : lay.name[0]], single[lay.name[1] : args_start]
    after = _cut_at_turn_end(single[args_end:], eos_texts)
    between = None
    double = _try(turn, 2) if fmt.parallel else None
    second = fmt.locate(double, args_end, SENTINEL, {}) if double else None
    if double is not None and second is not None and double.startswith(single[:args_end]):
        other = double[args_end : second.name[0]]
        n = common_prefix(after, other)
        tail, end, between = after[:n], after[n:], other[n:]
    else:
        tail, end = after, ""
    pairs = _pairs(fmt, turn, start, mid) if fmt.arguments == "pairs" else None
    return Skeleton(lead, mid, tail, between, end, pairs, fmt.arguments)


def _tool(args: Mapping[str, Any] | None) -> dict[str, Any]:
    props = {k: {"type": TYPED[k][0]} for k in args or {}}
    params = {"type": "object", "properties": props}
    return {"type": "function", "function": {"name": SENTINEL, "parameters": params}}


def _pairs(fmt: ToolFormat, turn: Any, start: Any, mid: str) -> Pairs:
    """The markup of one pair, from a rendering of every type's sentinel value (and
    one of ``False``)."""
    args = {k: v for k, (_, v) in TYPED.items()}
    text = turn(1, args)
    lay = fmt.locate(text, start(args), SENTINEL, args)
    falsy = turn(1, {"d_b": False})
    lay_f = fmt.locate(falsy, start({"d_b": False}), SENTINEL, {"d_b": False})
    if lay is None or lay_f is None:
        raise ValueError(f"the chat template's arguments do not look like the {fmt.name} format")
    spans = lay.args
    first = text[lay.name[1] : spans[0].key_span[0]]
    if not first.startswith(mid):
        raise ValueError("the chat template writes the first argument's markup apart")
    opening = first[len(mid):]
    gaps = [text[a.value_span[1] : b.key_span[0]] for a, b in pairwise(spans)]
    closing = text[spans[-1].value_span[1] : lay.args_end]
    if any(g != closing + opening for g in gaps):
        raise ValueError("the chat template writes the markup between arguments apart")
    between = {TYPED[a.key][0]: text[a.key_span[1] : a.value_span[0]] for a in spans}
    value = {a.key: text[slice(*a.value_span)] for a in spans}
    false = falsy[slice(*lay_f.args[0].value_span)]
    return Pairs(opening, between, closing,
                 {"true": value["d_b"], "false": false, "null": value["e_z"]})


def _try(turn: Any, calls: int) -> str | None:
    try:
        return str(turn(calls))
    except ValueError:  # the template refuses several calls in one turn
        return None


def _cut_at_turn_end(text: str, eos_texts: Iterable[str]) -> str:
    """`text` up to the first EOS or turn-end token's text."""
    cut = len(text)
    for eos in eos_texts:
        i = text.find(eos) if eos else -1
        if 0 <= i < cut:
            cut = i
    return text[:cut]
