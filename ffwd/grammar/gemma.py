"""Gemma 4's arguments object as Lark rules, from a tool's parameters schema.

``gemma_arguments(prefix, params, markup) -> (expression, rules)`` writes the
object as Gemma 4's template does (`ffwd.templates.formats.gemma4`): bare keys
sorted, strings between ``<|"|>`` quotes (any text up to the closing quote),
numbers, ``true``/``false``, null as nothing, nested ``{k:v}`` and ``[a,b]``.
Listed properties come in sorted order, the required ones always, the others
where the model writes them; an enum or const is one of its values as
rendered; a schema without a type (or with ``anyOf``) takes any value.

>>> expr, rules = gemma_arguments("c0", {"properties": {"b": {"type": "integer"},
...     "a": {"type": "boolean"}}, "required": ["b"]}, Markup({}))
>>> expr, rules[-1]
('"{" c0_o "}"', 'c0_o: c0_0 "," c0_1 | c0_1')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ffwd.grammar.lark import Markup, json_rule, literal
from ffwd.templates.formats.gemma4 import QUOTE

NUMBER = r"/-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/"


def gemma_arguments(prefix: str, params: Mapping[str, Any], markup: Markup
                    ) -> tuple[str, list[str]]:
    """The arguments object of one tool (see the module docstring)."""
    rules: list[str] = []
    return _object(prefix, params, markup, rules), rules


def _value(name: str, schema: Mapping[str, Any], markup: Markup, rules: list[str]) -> str:
    """One value of `schema` ("" where it can only be null: Gemma writes nothing)."""
    choices = schema.get("enum") if isinstance(schema.get("enum"), list) else None
    if "const" in schema:
        choices = [schema["const"]]
    if choices:
        written = [markup.rule(rendered(v)) for v in choices]
        alternatives = " | ".join(w for w in written if w)
        return f"({alternatives})" + ("?" if "" in written else "") if alternatives else ""
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if isinstance(kind, str) else []
    if not kinds or any(k in schema for k in ("anyOf", "oneOf", "allOf")):
        return _any(markup, rules) + "?"
    out = []
    for k in kinds:
        if k == "string":
            out.append(_string(markup, rules, schema))
        elif k in ("integer", "number"):  # written as JSON writes them, bounds and all
            out.append(json_rule({**schema, "type": k}))
        elif k == "boolean":
            out.append('"true" | "false"')
        elif k == "array":
            items = schema.get("items")
            item = _value(f"{name}i", items if isinstance(items, Mapping) else {}, markup, rules)
            rules.append(f'{name}a: "[" ({item} ("," {item})*)? "]"' if item else f'{name}a: "[]"')
            out.append(f"{name}a")
        elif k == "object":
            out.append(_object(name, schema, markup, rules))
    if not out:
        return "" if "null" in kinds else _any(markup, rules) + "?"
    return f"({' | '.join(out)})" + ("?" if "null" in kinds else "")


def _object(name: str, schema: Mapping[str, Any], markup: Markup, rules: list[str]) -> str:
    """``{`` the listed members, sorted, comma-separated ``}``; a free-form map where
    none are listed."""
    props = schema.get("properties")
    if not isinstance(props, Mapping) or not props:
        if schema.get("additionalProperties") is False:
            return '"{}"'
        _any(markup, rules)
        return "g_object"
    required = set(schema.get("required") or ())
    keys = sorted(props, key=str.lower)  # as Jinja's dictsort orders them
    members = []
    for j, key in enumerate(keys):
        sub = props[key] if isinstance(props[key], Mapping) else {}
        value = _value(f"{name}_{j}", sub, markup, rules)
        rules.append(f"{name}_{j}: {literal(key + ':')} {value}".rstrip())
        members.append(f"{name}_{j}")
    steps = [f'"," {m}' if k in required else f'("," {m})?'
             for k, m in zip(keys, members, strict=True)]
    # The first member written: any whose predecessors are all optional.
    firsts = []
    for j, key in enumerate(keys):
        firsts.append(" ".join([members[j], *steps[j + 1:]]))
        if key in required:
            break
    body = " | ".join(firsts)
    optional = not required & set(keys)
    rules.append(f"{name}_o: {body}")
    return f'"{{" {name}_o{"?" if optional else ""} "}}"'


def _string(markup: Markup, rules: list[str], schema: Mapping[str, Any] | None = None) -> str:
    """Text between quotes, up to the first closing quote (its length bounds hold)."""
    schema = schema or {}
    low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
    bounded = low > 0 or high is not None
    reach = "{" + f"{low},{'' if high is None else int(high)}" + "}" if bounded else "*"
    name = "g_text" + (f"_{low}_{'' if high is None else int(high)}" if bounded else "")
    quote = markup.rule(QUOTE)
    if markup.special(QUOTE) is not None:  # a special token never appears in text
        rule, body = f"{name}: /(?s:.{reach})/", f"{quote} {name} {quote}"
    else:
        rule, body = f'{name}[lazy]: /(?s:.{reach})<\\|"\\|>/', f"{quote} {name}"
    if rule not in rules:
        rules.append(rule)
    return body


def _any(markup: Markup, rules: list[str]) -> str:
    """Any value (the generic rules, added once)."""
    if not any(r.startswith("g_value:") for r in rules):
        string = _string(markup, rules)
        rules += [
            f'g_value: {string} | g_object | g_array | {NUMBER} | "true" | "false"',
            'g_object: "{" (g_member ("," g_member)*)? "}"',
            r"g_member: /[^:{}\[\],<]+/ " + '":" g_value?',
            'g_array: "[" (g_value ("," g_value)*)? "]"',
        ]
    return "g_value"


def rendered(value: Any) -> str:
    """A value as Gemma 4's template writes it.

    >>> rendered({"b": [1, None], "a": "x"}), rendered(True)
    ('{a:<|"|>x<|"|>,b:[1,]}', 'true')
    """
    if isinstance(value, str):
        return QUOTE + value + QUOTE
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, Mapping):
        keys = sorted(value, key=str.lower)
        return "{" + ",".join(f"{k}:{rendered(value[k])}" for k in keys) + "}"
    if isinstance(value, list):
        return "[" + ",".join(rendered(v) for v in value) + "]"
    return str(value)
