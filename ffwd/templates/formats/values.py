"""Argument values written as text (XML-like formats) read back as JSON values.

`convert_value(text, schema, is_string=None)` turns a parameter's raw text
into its JSON value, using the tool's schema when there is one (``"5"``
stays a string for a string property, becomes 5 for an integer one) or the
format's own word (DSML's ``string="true"``); without either, text that
parses as JSON is JSON, ``True``/``False``/``None`` (how Python-minded
templates write them) are booleans and null, and the rest is a string. An array
or object property written as a Python literal (``['a', True]``: a template that
prints the value) is read as one; a value wrapped whole in ``<![CDATA[...]]>``
(MiniCPM 5's strings with newlines) is its content.
`property_schemas(tools)` maps each tool's name to its property schemas.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping, Sequence
from typing import Any

CDATA = ("<![CDATA[", "]]>")
PYTHON_WORDS = {"true": True, "false": False, "none": None, "null": None}


def convert_value(text: str, schema: Mapping[str, Any] | None, is_string: bool | None = None
                  ) -> Any:
    """A parameter's raw text as a JSON value.

    >>> convert_value("5", {"type": "integer"}), convert_value("5", {"type": "string"})
    (5, '5')
    >>> convert_value("True", {"type": "boolean"}), convert_value("Paris", None)
    (True, 'Paris')
    >>> convert_value("7", None, is_string=True), convert_value("None", {"type": "null"})
    ('7', None)
    >>> convert_value("['a', True]", {"type": "array"}), convert_value("<![CDATA[a\\nb]]>", None)
    (['a', True], 'a\\nb')
    """
    if text.startswith(CDATA[0]) and text.endswith(CDATA[1]):
        text = text[len(CDATA[0]): len(text) - len(CDATA[1])]
    kind = schema.get("type") if schema else None
    if is_string or (is_string is None and kind == "string"):
        return text
    word = text.strip().lower()
    if (word in ("true", "false") and kind in ("boolean", None)) or (
            word in ("none", "null") and kind in ("null", None)):
        return PYTHON_WORDS[word]
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    if kind in ("array", "object"):
        try:
            return ast.literal_eval(text.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            pass
    return text


def property_schemas(
    tools: Sequence[Mapping[str, Any]] | None,
) -> dict[str, dict[str, Mapping[str, Any]]]:
    out: dict[str, dict[str, Mapping[str, Any]]] = {}
    for tool in tools or ():
        fn = tool.get("function", tool)
        props = (fn.get("parameters") or {}).get("properties") or {}
        out[str(fn.get("name"))] = dict(props)
    return out
