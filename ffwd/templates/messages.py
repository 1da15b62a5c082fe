"""Messages as chat templates read them, and the allowances some templates need.

`template_messages(messages, allow)` turns API messages into what a template
receives: ``content`` a string, None, or a list of text parts joined into a
string; assistant ``tool_calls`` in both shapes templates read
(``call.function.name`` and ``call.name``), their ``arguments`` an
`Arguments` mapping whatever the client sent (a JSON string or an object); an
assistant turn's earlier reasoning, ``reasoning_content`` (what llama.cpp's
server and vLLM take), also as ``reasoning`` and ``thinking``, the names other
templates read it by (Solar, gpt-oss).

Templates written for one renderer break on what another sends. llama.cpp
and transformers smooth those over; so does `Allowances`, which
`ffwd.templates.render.render_chat` turns on one at a time, only for a
template that failed without it:

* ``text``: ``content: null`` (what OpenAI clients send on a tool-call turn)
  as ``""``, for templates that test ``'x' in message.content``;
* ``ids``: call ids as the 9 alphanumeric characters Mistral's templates
  insist on (each id mapped the same way wherever it occurs, so a tool
  result still names its call; calls without one get one from their place);
* ``described``: tools with a description and Cohere's parameter shape
  (`ffwd.templates.tools.described`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ID_SHAPE = re.compile(r"[A-Za-z0-9]{9}")
REASONING_ALIASES = ("reasoning", "thinking")


class Arguments(dict[str, Any]):
    """A call's arguments: a mapping (``items()``, ``tojson``), which reads as its
    JSON text where a template writes it or joins it to a string (Functionary
    writes ``'>>>' + name + '\\n' + arguments``).

    >>> a = Arguments({"city": "Paris"})
    >>> str(a), "args: " + a
    ('{"city": "Paris"}', 'args: {"city": "Paris"}')
    """

    def __str__(self) -> str:
        return json.dumps(self, ensure_ascii=False)

    def __add__(self, other: object) -> str:
        if isinstance(other, str):
            return str(self) + other
        return NotImplemented

    def __radd__(self, other: object) -> str:
        if isinstance(other, str):
            return other + str(self)
        return NotImplemented


@dataclass(frozen=True, slots=True)
class Allowances:
    text: bool = False  # content None -> ""
    ids: bool = False  # call ids as 9 alphanumeric characters
    described: bool = False  # tools with descriptions and Cohere's parameter definitions


# Tried in this order, each adding to the last, for a template that fails without them.
LADDER = (Allowances(), Allowances(text=True), Allowances(text=True, ids=True),
          Allowances(text=True, ids=True, described=True))


def template_messages(
    messages: Sequence[Mapping[str, Any]], allow: Allowances = Allowances()
) -> list[dict[str, Any]]:
    """`messages` as the template reads them (see the module docstring)."""
    out = [_message(m, i, allow) for i, m in enumerate(messages)]
    if allow.ids:
        for i, m in enumerate(out):
            if m.get("tool_call_id") is not None:
                m["tool_call_id"] = nine(str(m["tool_call_id"]))
            for j, call in enumerate(m.get("tool_calls") or ()):
                call["id"] = nine(str(call.get("id") or f"{i}.{j}"))
    return out


def nine(call_id: str) -> str:
    """`call_id` as 9 alphanumeric characters: itself if it is, else a digest.

    >>> nine("abcDEF123"), nine("call_1") == nine("call_1"), len(nine("call_1"))
    ('abcDEF123', True, 9)
    """
    if ID_SHAPE.fullmatch(call_id):
        return call_id
    return hashlib.sha1(call_id.encode()).hexdigest()[:9]


def _message(message: Mapping[str, Any], i: int, allow: Allowances) -> dict[str, Any]:
    if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
        raise ValueError(f"messages[{i}]: expected an object with a string 'role'")
    out = dict(message)
    content = out.get("content")
    if isinstance(content, list):
        out["content"] = "".join(_text_part(part, i) for part in content)
    elif content is None:
        out["content"] = "" if allow.text else None
    elif not isinstance(content, str):
        raise ValueError(f"messages[{i}].content: expected a string or a list of text parts")
    if out.get("tool_calls"):
        out["tool_calls"] = [_tool_call(c, i, j) for j, c in enumerate(out["tool_calls"])]
    thought = out.get("reasoning_content")
    if isinstance(thought, str) and thought:
        for alias in REASONING_ALIASES:  # the names other templates read it by
            out.setdefault(alias, thought)
    return out


def _text_part(part: object, i: int) -> str:
    if (
        isinstance(part, Mapping)
        and part.get("type") in ("text", "input_text", "output_text")
        and isinstance(part.get("text"), str)
    ):
        return str(part["text"])
    kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
    raise ValueError(f"messages[{i}].content: part of type {kind!r} is not supported (only 'text')")


def _tool_call(call: object, i: int, j: int) -> dict[str, Any]:
    where = f"messages[{i}].tool_calls[{j}]"
    if not isinstance(call, Mapping):
        raise ValueError(f"{where}: expected an object")
    fn = call.get("function", call)
    if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str):
        raise ValueError(f"{where}: expected {{'function': {{'name': ..., 'arguments': ...}}}}")
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}.arguments: not valid JSON ({exc.msg})") from exc
    if not isinstance(args, Mapping):
        raise ValueError(f"{where}.arguments: expected a JSON object")
    function = {**fn, "arguments": Arguments(args)}
    return {**call, "type": "function", "function": function, **function}
