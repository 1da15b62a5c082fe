"""A format cut out of a template's rendering, for templates no module describes.

`derive(template, tokenizer=None)` renders the probe turns (two calls, and one)
and, where each call is written as its name followed by its arguments as one JSON
object, takes the text around them as the markers of a `Named` spec (`cut`):
what comes before the first name is the section's opening and the call's, what
comes between a name and its arguments the name's closing, what comes between
two calls one call's closing and the next one's opening, and what follows the
last call (less the turn's own end) the call's closing and the section's. The
derived format is kept only where its parser reads the probe calls back out of
every rendering. Arguments written as key/value markup are not derived.

>>> spec = cut('<c>{"n": "f", "a": {"x": 1}}</c>\\n<c>{"n": "g", "a": {"y": 2}}</c>', [
...     ("f", {"x": 1}), ("g", {"y": 2})], "")
>>> spec.call_open, spec.name_close, spec.call_close
('<c>{"n": "', '", "a": ', '}</c>')
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from itertools import pairwise
from typing import Any

from ffwd.fill.prefix import common_prefix
from ffwd.templates.formats.base import ToolFormat
from ffwd.templates.formats.jsoncall import JsonFraming
from ffwd.templates.formats.jsonformat import json_format
from ffwd.templates.formats.named_layout import named_format
from ffwd.templates.formats.named_spec import Named
from ffwd.templates.formats.probe import PROBE_CALLS, USER, probe_turn, reads
from ffwd.templates.render import render_chat

Calls = Sequence[tuple[str, Mapping[str, Any]]]
PLAIN = "Sunny."  # an answer without calls: what follows it is the turn's end
DECODER = json.JSONDecoder()
MODELS = "read off the chat template"


def derive(template: str, tokenizer: Any = None) -> ToolFormat | None:
    """The format `template`'s probe renderings show (see the module docstring)."""
    turns: list[tuple[str, Calls]] = []
    calls: Calls
    for calls in (PROBE_CALLS, PROBE_CALLS[:1]):
        try:
            turns.append((probe_turn(template, calls, tokenizer), calls))
        except ValueError:
            continue
    if not turns:
        return None
    end = _turn_end(template, tokenizer)
    # The turns that write each call's name once (a template may drop all calls but one).
    turns = [(t, c) for t, c in turns if all(t.count(name) == 1 for name, _ in c)]
    if not turns:
        return None
    text, calls = turns[0]
    parallel = len(calls) > 1
    framing, spec = cut_json(text, calls, end), cut(text, calls, end)
    candidates = [json_format("derived", framing, parallel=parallel, models=MODELS)
                  if framing else None,
                  named_format("derived", spec, MODELS, parallel=parallel) if spec else None]
    for fmt in candidates:
        if fmt is not None and all(reads(fmt, t, c) for t, c in turns):
            return fmt
    return None


def cut_json(text: str, calls: Calls, end: str) -> JsonFraming | None:
    """The framing around `calls` written as JSON objects that hold the name and the
    arguments (``{"name": ..., "arguments": {...}}``), or None.

    >>> cut_json(' functools[{"name": "f", "arguments": {}}, {"name": "g", "arguments": {}}]',
    ...          [("f", {}), ("g", {})], "")
    JsonFraming(open='functools', close='', list_open='[', list_close=']', separator=',', \
end='', name_keys=('name',), args_keys=('arguments',))
    """
    objects = [_call_object(text, name, args) for name, args in calls]
    if any(o is None for o in objects):
        return None
    spans = [o[0] for o in objects if o is not None]
    keys = {o[1] for o in objects if o is not None}
    gaps = {text[a[1] : b[0]] for a, b in pairwise(spans)}
    after = text[spans[-1][1]:]
    after = after[: len(after) - len(end)] if end and after.endswith(end) else after
    pre = text[: spans[0][0]].strip()
    if len(keys) != 1 or len(gaps) > 1 or not pre:
        return None
    (name_key, args_key), gap = keys.pop(), gaps.pop() if gaps else ""
    named = JsonFraming("", name_keys=(name_key,), args_keys=(args_key,))
    if pre.endswith("[") and after.lstrip().startswith("]"):
        return replace(named, open=pre[:-1].strip(), list_open="[", list_close="]",
                       separator=gap.strip(), end=after.lstrip()[1:].strip())
    # Each object behind its own marker: between two, one's closing and the next's marker.
    close = gap[: common_prefix(gap, after)]
    if gap and gap[len(close):].strip() != pre:
        return None
    return replace(named, open=pre, close=close.strip(), end=after[len(close):].strip())


def _call_object(text: str, name: str, args: Mapping[str, Any]
                 ) -> tuple[tuple[int, int], tuple[str, str]] | None:
    """The span of the JSON object holding the call of `name` and its keys for the name
    and the arguments."""
    at = text.find(json.dumps(name))
    brace = text.rfind("{", 0, at) if at >= 0 else -1
    if brace < 0:
        return None
    try:
        value, stop = DECODER.raw_decode(text, brace)
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict):
        return None
    name_keys = [k for k, v in value.items() if v == name]
    args_keys = [k for k, v in value.items() if v == dict(args) or v == json.dumps(dict(args))]
    if len(name_keys) != 1 or len(args_keys) != 1:
        return None
    return (brace, stop), (name_keys[0], args_keys[0])


def cut(text: str, calls: Calls, end: str) -> Named | None:
    """The markers around `calls` in `text` (one call or several; `end`: the turn's
    own end, left out), or None where the calls are not names followed by JSON."""
    spans = _spans(text, calls)
    if spans is None:
        return None
    mids = {text[n1:a0] for (_, n1), (a0, _) in spans}
    if len(mids) != 1:
        return None
    (n0, _), _ = spans[0]
    after = text[spans[-1][1][1]:]
    after = after[: len(after) - len(end)] if end and after.endswith(end) else after
    pre = text[:n0].lstrip()
    if len(spans) == 1:
        call_open, call_close, section_open, section_close = pre, after.rstrip(), "", ""
    else:
        between = text[spans[0][1][1] : spans[1][0][0]]
        call_close = between[: common_prefix(between, after)]
        call_open = between[len(call_close):].lstrip()
        if not call_open or not pre.endswith(call_open):
            return None
        section_open = pre[: len(pre) - len(call_open)]
        section_close = after[len(call_close):].strip()
    if not call_open.strip():
        return None
    return Named(call_open, mids.pop(), call_close.rstrip(), section_open, section_close)


def _spans(text: str, calls: Calls) -> list[tuple[tuple[int, int], tuple[int, int]]] | None:
    """Each call's name span and arguments span, in order."""
    out, at = [], 0
    for name, args in calls:
        n0 = text.find(name, at)
        brace = text.find("{", n0 + len(name)) if n0 >= 0 else -1
        if brace < 0:
            return None
        try:
            value, a1 = DECODER.raw_decode(text, brace)
        except json.JSONDecodeError:
            return None
        if value != dict(args):
            return None
        out.append(((n0, n0 + len(name)), (brace, a1)))
        at = a1
    return out


def _turn_end(template: str, tokenizer: Any) -> str:
    """What the template writes after an assistant's text ("" where unknown)."""
    answer = {"role": "assistant", "content": PLAIN}
    try:
        text = render_chat(template, [USER, answer], None, False, tokenizer)
    except ValueError:
        return ""
    at = text.rfind(PLAIN)
    return text[at + len(PLAIN):] if at >= 0 else ""
