"""Writing llguidance's Lark dialect: literals, markup with special tokens, JSON.

Pure text helpers, tested directly:

* `literal(text)` is a Lark string literal;
* `Markup(specials).rule(text)` writes template markup, turning the tokenizer's
  special tokens (``<tool_call>`` in Qwen's vocabulary) into token references
  ``<[id]>``: a special token never matches text, so a literal would make the
  model spell it out byte by byte;
* `json_rule(schema)` embeds a JSON Schema with the separators chat templates
  write (``", "`` and ``": "``, no other whitespace), so that every
  determined byte is forced;
* `strict_schema(schema)` closes every object (``additionalProperties:
  false`` where the schema does not say), as OpenAI's ``"strict": true`` asks.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

# Stands for markup that varies by call (a call id, an index) in the text `Markup.rule`
# writes: the terminal of that name, whose pattern the skeleton gives.
VARYING = "\x00"
JSON_OPTIONS = {"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": False}


def literal(text: str) -> str:
    """A Lark string literal for `text`.

    >>> print(literal('say "hi"\\n'))
    "say \\"hi\\"\\n"
    """
    return json.dumps(text, ensure_ascii=False)


def regex_class_char(c: str) -> str:
    """`c` escaped for a character class of a Lark regex.

    >>> regex_class_char("{"), regex_class_char("a")
    ('\\\\{', 'a')
    """
    return re.escape(c)


def regex_text(text: str) -> str:
    """`text` as a Lark regex that matches it literally.

    >>> print(regex_text("\\n</p>"))
    \\n<\\/p>
    """
    out = []
    for c in text:
        if c == "\n":
            out.append(r"\n")
        elif c == "\t":
            out.append(r"\t")
        elif c == "/":
            out.append(r"\/")
        else:
            out.append(re.escape(c))
    return "".join(out)


class Markup:
    """Template markup as a Lark sequence, special tokens as token references.

    >>> Markup({"<tc>": 7}).rule("<tc>\\n{")
    '<[7]> "\\\\n{"'
    >>> Markup({}).rule(""), Markup({}).rule("id=\\x00;")
    ('', '"id=" VARYING ";"')
    """

    def __init__(self, specials: Mapping[str, int]) -> None:
        self.specials = dict(specials)
        names = sorted(self.specials, key=len, reverse=True)
        self._split = re.compile("(" + "|".join(map(re.escape, names)) + ")") if names else None

    def rule(self, text: str) -> str:
        """`text` as a sequence of literals and ``<[id]>`` references ("" when empty)."""
        out = []
        for i, piece in enumerate(text.split(VARYING)):
            if i:
                out.append("VARYING")
            for part in self._split.split(piece) if self._split else [piece]:
                if part in self.specials:
                    out.append(f"<[{self.specials[part]}]>")
                elif part:
                    out.append(literal(part))
        return " ".join(out)

    def special(self, text: str) -> int | None:
        """The id of `text` when it is exactly one special token."""
        return self.specials.get(text)


def json_rule(schema: Mapping[str, Any]) -> str:
    """``%json {...}``: `schema` with the template's separators and no free whitespace.

    >>> json_rule({"type": "integer"})
    '%json {"type": "integer", "x-guidance": {"item_separator": ", ", "key_separator": ": ", \
"whitespace_flexible": false}}'
    """
    body = {k: v for k, v in schema.items() if k != "x-guidance"}
    body["x-guidance"] = JSON_OPTIONS
    return "%json " + json.dumps(body, ensure_ascii=False)


_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties")
_SUBSCHEMAS = ("items", "additionalProperties", "not", "if", "then", "else", "contains")


def strict_schema(schema: Any, listed_only: bool = False, part: bool = False) -> Any:
    """A copy of `schema` in which every object schema that does not say
    otherwise forbids properties it does not list (`listed_only`: only those that
    list some `properties`; ``{"type": "object"}`` stays a free-form map, and so
    does an object put together with ``allOf``: each `part` lists only some of its
    keys, so closing any one would refuse the others).

    >>> strict_schema({"type": "object", "properties": {"a": {"type": "object"}}})
    {'type': 'object', 'properties': {'a': {'type': 'object', 'additionalProperties': False}}, \
'additionalProperties': False}
    >>> strict_schema({"type": "object", "properties": {"a": {"type": "object"}}}, True)
    {'type': 'object', 'properties': {'a': {'type': 'object'}}, 'additionalProperties': False}
    """
    if not isinstance(schema, Mapping):
        return schema
    out: dict[str, Any] = dict(schema)
    for key in _SUBSCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [strict_schema(s, listed_only, listed_only and key == "allOf")
                        for s in out[key]]
    for key in _SUBSCHEMA_MAPS:
        if isinstance(out.get(key), Mapping):
            out[key] = {k: strict_schema(s, listed_only) for k, s in out[key].items()}
    for key in _SUBSCHEMAS:
        if isinstance(out.get(key), Mapping):
            out[key] = strict_schema(out[key], listed_only)
    if listed_only and (part or "allOf" in out):
        return out
    kind = out.get("type")
    is_object = kind == "object" or (isinstance(kind, list) and "object" in kind)
    lists = bool(out.get("properties")) or ("properties" in out and not listed_only)
    if (lists or (is_object and not listed_only)) and "additionalProperties" not in out:
        out["additionalProperties"] = False
    return out
