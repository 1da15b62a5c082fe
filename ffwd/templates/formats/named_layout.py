"""Where the parts of a rendered `Named` call sit, and a `Named` spec as a `ToolFormat`.

`locate_named(spec, text, start, name, args)` finds the opening markup (the
section's and the call's, up to the name), the name, every argument's key and
value, and the characters that commit: to another argument (`lead`: where
the next key's markup parts from the call's closing markup), to a value
being over (`end`: the second character of its closing marker, which a value
rarely holds; its last, where the marker repeats the key), and to the arguments
being complete (`close`).

>>> from ffwd.templates.formats.named_spec import Kv, Named
>>> spec = Named("<tool_call>", "\\n", "</tool_call>", kv=Kv("<k>", "</k><v>", "</v>"))
>>> t = "<tool_call>f\\n<k>a</k><v>x</v></tool_call>"
>>> lay = locate_named(spec, t, 0, "f", {"a": "x"})
>>> t[slice(*lay.name)], t[slice(*lay.args[0].value_span)], t[lay.close - 1 : lay.close + 1]
('f', 'x', '</')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ffwd.fill.prefix import common_prefix
from ffwd.templates.formats.base import ArgLayout, CallLayout, ToolFormat
from ffwd.templates.formats.jsonlayout import json_arguments
from ffwd.templates.formats.markers import KEY, find, first_word, groups, match, parts, text
from ffwd.templates.formats.named import NamedParser
from ffwd.templates.formats.named_spec import Kv, Named


def locate_named(
    spec: Named, text_: str, start: int, name: str, args: Mapping[str, Any]
) -> CallLayout | None:
    """The layout of the call of `name` that begins at or after `start`."""
    call = find(text_, spec.call_open, start)
    if call is None:
        return None
    opener = first_word(spec.call_open) if spec.section_open else spec.open_marker
    opened = call.start(), call.start() + len(opener)
    if spec.section_open:
        section = find(text_, spec.section_open, start)
        if section is not None and section.end() <= call.start() and not (
                text_[section.end():call.start()].strip()):
            opened = section.start(), section.start() + len(spec.open_marker)
    ns, ne = call.end(), call.end() + len(name)
    if text_[ns:ne] != name:
        return None
    after = match(text_, spec.name_close, ne)
    if after is None:
        return None
    if spec.kv is None:
        a0 = after.end()
        while a0 < len(text_) and text_[a0].isspace():
            a0 += 1
        found = (spec.dialect.layout if spec.dialect else json_arguments)(text_, a0, args)
        if found is None:
            return None
        layouts, a1 = found
        return CallLayout(opened, (ns, ne), layouts, a1 - 1,
                          varying=groups(call) + groups(after))
    pairs = _pairs(spec, spec.kv, text_, after.end(), args)
    if pairs is None:
        return None
    layouts_kv, close, end = pairs
    return CallLayout(opened, (ns, ne), layouts_kv, close, end,
                      groups(call) + groups(after))


def _pairs(spec: Named, kv: Kv, text_: str, cursor: int, args: Mapping[str, Any]
           ) -> tuple[tuple[ArgLayout, ...], int, int] | None:
    """Each pair's layout, the character that commits to the arguments' end, and where
    the call's closing markup starts."""
    close_word = first_word(text(spec.call_close))
    shared = common_prefix(text(kv.key_open).strip(), close_word)
    out: list[ArgLayout] = []
    for key, value in args.items():
        opened = match(text_, kv.key_open, cursor)
        if opened is None or not text_.startswith(key, opened.end()):
            if value is None:  # a template may leave null arguments out (MiniMax M3)
                continue
            return None
        ks, ke = opened.end(), opened.end() + len(key)
        closed = match(text_, kv.key_close, ke)
        if closed is None:
            return None
        end_text = text(kv.value_close, key).strip()
        pe = text_.find(end_text, closed.end())
        if pe < 0:
            return None
        vs, ve = _value_span(text_, closed.end(), pe, kv)
        bare = opened.start() + len(opened.group()) - len(opened.group().lstrip())
        lead = bare + shared if out else -1
        # A closing marker that repeats the key (MiniMax M3) is not over before its end.
        end = pe + len(end_text) - 1 if KEY in parts(kv.value_close) else pe + 1
        out.append(ArgLayout(key, (ks, ke), (vs, ve), lead, pe, end))
        cursor = pe + len(end_text)
    q = text_.find(close_word, cursor) if close_word else -1
    if q < 0 or text_[cursor:q].strip():
        return None
    return tuple(out), q + shared, q


def _value_span(text_: str, vs: int, pe: int, kv: Kv) -> tuple[int, int]:
    """The value between its markers, without the newline each may put around it."""
    before, after = text(kv.key_close), text(kv.value_close)
    lead = before[len(before.rstrip()):]
    trail = after[: len(after) - len(after.lstrip())]
    if lead and text_.startswith(lead, vs) and vs + len(lead) <= pe:
        vs += len(lead)
    if trail and text_[vs:pe].endswith(trail):
        pe -= len(trail)
    return vs, pe


def named_format(name: str, spec: Named, models: str = "", *, parallel: bool = True,
                 builtin: str | None = None) -> ToolFormat:
    """The `ToolFormat` of a `Named` spec: its parser, its layout, its arguments."""

    def parser(tools: Sequence[Mapping[str, Any]] | None = None) -> NamedParser:
        return NamedParser(spec, tools)

    def locate(text_: str, start: int, fn: str, args: Mapping[str, Any]) -> CallLayout | None:
        return locate_named(spec, text_, start, fn, args)

    return ToolFormat(name, spec.open_marker, parser, locate,
                      arguments="pairs" if spec.kv else spec.dialect.name if spec.dialect
                      else "json", parallel=parallel,
                      builtin=builtin, models=models)
