"""Where the parts of a rendered JSON tool call sit (for the strict-row compiler).

`locate_json_call` finds the marker, the name, every argument's key and
value, the comma that commits to each further argument, a string value's
closing quote and the brace that closes the arguments.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ffwd.templates.formats.base import ArgLayout, CallLayout

_DECODER = json.JSONDecoder()


_MEMBER = re.compile(r'":\s*"([^"]*)"')


def locate_json_call(
    text: str, start: int, name: str, args: Mapping[str, Any], marker: str
) -> CallLayout | None:
    """Find the parts of the rendered call of `name` that begins at or after `start`.

    >>> t = '<tool_call>\\n{"name": "f", "arguments": {"a": "x"}}\\n</tool_call>'
    >>> lay = locate_json_call(t, 0, "f", {"a": "x"}, "<tool_call>")
    >>> t[slice(*lay.name)], t[slice(*lay.args[0].key_span)], t[lay.close]
    ('f', 'a', '}')
    """
    if marker:
        ms = text.find(marker, start)
        if ms < 0:
            return None
        opened = (ms, ms + len(marker))
        obj = text.find("{", opened[1])
    else:
        obj = text.find("{", start)
        opened = (obj, obj + 1)
    qname = json.dumps(name, ensure_ascii=False)
    ns = text.find(qname, obj)
    a0 = text.find("{", ns + len(qname))
    if obj < 0 or ns < 0 or a0 < 0:
        return None
    found = json_arguments(text, a0, args)
    if found is None:
        return None
    layouts, a1 = found
    # A string member before the name or after the arguments is the call's own
    # (Command-R's "tool_call_id", Mistral Nemo's "id").
    try:
        _, end = _DECODER.raw_decode(text, obj)
    except json.JSONDecodeError:
        end = a1
    ids = tuple(m.span(1) for m in (*_MEMBER.finditer(text, obj, ns),
                                    *_MEMBER.finditer(text, a1, end)))
    return CallLayout(opened, (ns + 1, ns + len(qname) - 1), layouts, a1 - 1, varying=ids)


def json_arguments(
    text: str, a0: int, args: Mapping[str, Any]
) -> tuple[tuple[ArgLayout, ...], int] | None:
    """The layout of the arguments object that starts at `a0`, and where it ends."""
    try:
        _, a1 = _DECODER.raw_decode(text, a0)
    except json.JSONDecodeError:
        return None
    layouts: list[ArgLayout] = []
    cursor = a0 + 1
    for key in args:
        qkey = json.dumps(key, ensure_ascii=False)
        ks = text.find(qkey, cursor, a1)
        colon = text.find(":", ks + len(qkey), a1)
        if ks < 0 or colon < 0:
            return None
        vs = colon + 1
        while text[vs].isspace():
            vs += 1
        _, ve = _DECODER.raw_decode(text, vs)
        lead = text.rfind(",", cursor, ks) if layouts else -1
        delimiter = ve - 1 if text[vs] == '"' else None
        layouts.append(ArgLayout(key, (ks + 1, ks + len(qkey) - 1), (vs, ve), lead, delimiter))
        cursor = ve
    return tuple(layouts), a1
