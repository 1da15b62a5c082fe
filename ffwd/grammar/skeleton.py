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

The turn's end (an EOS or turn-end token) is not part of the skeleton: once
the grammar is complete, ending the turn is the model's choice among the EOS
ids the mask allows.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ffwd.fill.prefix import common_prefix
from ffwd.templates.formats import ToolFormat
from ffwd.templates.render import render_chat

SENTINEL = "ffwd_sentinel_tool"
USER = {"role": "user", "content": "Hi"}


@dataclass(frozen=True, slots=True)
class Skeleton:
    lead: str  # from the start of the turn to the first name
    mid: str  # from a name to its arguments (JSON: the object; XML: the parameters)
    tail: str  # from the end of the arguments to the end of the call
    between: str | None  # from the end of one call to the next name; None: one call a turn
    end: str  # after the last call, before the end of the turn
    json_args: bool  # arguments are one JSON object (else XML parameters)


def derive(
    template: str, fmt: ToolFormat, eos_texts: Iterable[str], tokenizer: Any = None
) -> Skeleton:
    """Cut the skeleton out of renderings of a sentinel call (see the module docstring)."""
    params = {"type": "object", "properties": {}}
    tool = {"type": "function", "function": {"name": SENTINEL, "parameters": params}}
    call = {"type": "function", "function": {"name": SENTINEL, "arguments": {}}}

    def turn(calls: int) -> str:
        answer = {"role": "assistant", "content": None, "tool_calls": [call] * calls}
        return render_chat(template, [USER, answer], [tool], False, tokenizer=tokenizer)

    prompt = render_chat(template, [USER], [tool], tokenizer=tokenizer)
    single = turn(1)
    if not single.startswith(prompt):
        raise ValueError(
            "the chat template renders the generation prompt differently from the start of "
            "an assistant turn"
        )
    a0 = len(prompt)
    lay = fmt.locate(single, a0, SENTINEL, {})
    if lay is None:
        raise ValueError(f"the chat template's tool call does not look like the {fmt.name} format")
    json_args = single[lay.close] == "}"
    # JSON: `close` is the "}" of the arguments object; XML: the "/" of "</function>".
    args_end = lay.close + 1 if json_args else lay.close - 1
    args_start = lay.close - 1 if json_args else args_end
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
    return Skeleton(lead, mid, tail, between, end, json_args)


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

