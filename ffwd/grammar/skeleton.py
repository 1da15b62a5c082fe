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

Markup that differs from call to call (Mistral's call ids, Kimi's indexes: the
layout's `varying` spans) is `VARYING` in the skeleton's strings, and `slot` the
pattern its renderings fit. A template that writes a call without arguments
apart from the first argument's markup (DSML V4's blank line) gives `empty`; one
that closes the calls otherwise after several (DeepSeek R1's) gives `more_end`.

The turn's end (an EOS or turn-end token) is not part of the skeleton: once
the grammar is complete, ending the turn is the model's choice among the EOS
ids the mask allows.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from ffwd.fill.prefix import common_prefix
from ffwd.grammar.lark import VARYING
from ffwd.templates.formats import ToolFormat
from ffwd.templates.formats.base import CallLayout
from ffwd.templates.formats.markers import SLOT_TEXT
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
    containers: str = "json"  # how arrays and objects are written: "json" or "python"


@dataclass(frozen=True, slots=True)
class Skeleton:
    lead: str  # from the start of the turn to the first name
    mid: str  # from a name to its arguments (JSON: the object; pairs: the first pair)
    tail: str  # from the end of the arguments to the end of the call
    between: str | None  # from the end of one call to the next name; None: one call a turn
    end: str  # after the last call, before the end of the turn
    pairs: Pairs | None = None  # None: the arguments are one object
    arguments: str = "json"  # how that object is written (`ToolFormat.arguments`)
    slot: str = ""  # a regex for the text at `VARYING`
    empty: str | None = None  # from a name to the tail when a call has no arguments
    more_end: str | None = None  # `end` after several calls, where it differs


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
    raw = turn(1)
    a0 = turn_start(prompt, raw)
    lay = fmt.locate(raw, a0, SENTINEL, {})
    if lay is None:
        raise ValueError(f"the chat template's tool call does not look like the {fmt.name} format")
    single, varied = _blank(raw, lay.varying), [raw[s:e] for s, e in lay.varying]
    args_end = lay.args_end
    args_start = lay.close - 1 if fmt.arguments != "pairs" else args_end
    lead, mid = single[a0 : lay.name[0]], single[lay.name[1] : args_start]
    after = _cut_at_turn_end(single[args_end:], eos_texts)
    tail, end, between, more_end = after, "", None, None
    several = _several(fmt, _try(turn, 2) if fmt.parallel else None, a0, single[:args_end])
    if several is not None:
        double, second, texts = several
        other = double[args_end : second.name[0]]
        n = _boundary(after, common_prefix(after, other))
        tail, end, between = after[:n], after[n:], other[n:]
        last = _cut_at_turn_end(double[second.args_end:], eos_texts)
        if last.startswith(tail) and last[len(tail):] != end:
            more_end = last[len(tail):]
        varied += texts
    pairs, empty = None, None
    if fmt.arguments == "pairs":
        pairs, typed_mid = _pairs(fmt, turn, start)
        mid, empty = typed_mid, (mid if mid != typed_mid else None)
    lead, mid, tail, end = (_squeeze(t) for t in (lead, mid, tail, end))
    between, empty, more_end = (t if t is None else _squeeze(t) for t in (between, empty, more_end))
    return Skeleton(lead, mid, tail, between, end, pairs, fmt.arguments, _slot(varied),
                    empty, more_end)


def _several(fmt: ToolFormat, raw: str | None, a0: int, first: str
             ) -> tuple[str, CallLayout, list[str]] | None:
    """A turn of two calls (`raw`, that starts as one call's turn does up to its
    arguments' end, `first`) with its varying markup blanked, the second call's layout,
    and the text of the markup blanked."""
    lay = fmt.locate(raw, a0, SENTINEL, {}) if raw else None
    second = fmt.locate(raw, lay.args_end, SENTINEL, {}) if raw and lay else None
    if raw is None or lay is None or second is None:
        return None
    spans = lay.varying + second.varying
    double = _blank(raw, spans)
    if not double.startswith(first):
        return None
    return double, second, [raw[s:e] for s, e in spans]


def _blank(text: str, spans: Iterable[tuple[int, int]]) -> str:
    """`text` with each span's characters `VARYING` (one per character: offsets hold;
    `_squeeze` makes each run one)."""
    chars = list(text)
    for s, e in spans:
        chars[s:e] = VARYING * (e - s)
    return "".join(chars)


def _squeeze(text: str) -> str:
    return re.sub(VARYING + "+", VARYING, text)


def _slot(texts: list[str]) -> str:
    """A regex the varying markup fits: digits (an index), letters and digits of one
    length (Mistral's ids), or a slot's text.

    >>> _slot(["0", "12"]), _slot(["e8dc057d3", "4491f8b5e"])
    ('[0-9]+', '[A-Za-z0-9]{9}')
    """
    if not texts:
        return ""
    if all(t.isdigit() for t in texts):
        return "[0-9]+"
    if all(t.isascii() and t.isalnum() for t in texts) and len({len(t) for t in texts}) == 1:
        return f"[A-Za-z0-9]{{{len(texts[0])}}}"
    return SLOT_TEXT.replace("]*", "]+")


def _boundary(text: str, n: int) -> int:
    """`n`, or the start of the bracketed token (``<|tool_call_end|>``) it falls in.

    >>> _boundary("<|end|><|calls_end|>", 11)
    7
    """
    for open_, close in (("<", ">"), ("[", "]")):
        i = text.rfind(open_, 0, n)
        if i >= 0 and close not in text[i:n]:
            n = i
    return n


def _tool(args: Mapping[str, Any] | None) -> dict[str, Any]:
    props = {k: {"type": TYPED[k][0]} for k in args or {}}
    params = {"type": "object", "properties": props}
    return {"type": "function", "function": {"name": SENTINEL, "parameters": params}}


def _pairs(fmt: ToolFormat, turn: Any, start: Any) -> tuple[Pairs, str]:
    """The markup of one pair, from a rendering of every type's sentinel value (and
    one of ``False``), and the markup from the name to the first pair."""
    args = {k: v for k, (_, v) in TYPED.items()}
    raw = turn(1, args)
    lay = fmt.locate(raw, start(args), SENTINEL, args)
    falsy = turn(1, {"d_b": False})
    lay_f = fmt.locate(falsy, start({"d_b": False}), SENTINEL, {"d_b": False})
    if lay is None or lay_f is None:
        raise ValueError(f"the chat template's arguments do not look like the {fmt.name} format")
    text, spans = _blank(raw, lay.varying), lay.args
    gaps = {text[a.value_span[1] : b.key_span[0]] for a, b in pairwise(spans)}
    closing = text[spans[-1].value_span[1] : lay.args_end]
    gap = gaps.pop()
    if gaps or not gap.startswith(closing):
        raise ValueError("the chat template writes the markup between arguments apart")
    opening = gap[len(closing):]
    first = text[lay.name[1] : spans[0].key_span[0]]
    if not first.endswith(opening):
        raise ValueError("the chat template writes the first argument's markup apart")
    between = {TYPED[a.key][0]: text[a.key_span[1] : a.value_span[0]] for a in spans}
    value = {a.key: text[slice(*a.value_span)] for a in spans}
    obj = TYPED["g_o"][1]
    containers = {json.dumps(obj): "json", repr(obj): "python"}.get(value["g_o"])
    if containers is None:
        raise ValueError("the chat template writes objects as neither JSON nor Python literals")
    false = falsy[slice(*lay_f.args[0].value_span)]
    words = {"true": value["d_b"], "false": false, "null": value["e_z"]}
    pairs = Pairs(opening, between, closing, words, containers)
    return pairs, first[: len(first) - len(opening)]


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
