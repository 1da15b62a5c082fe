"""Argument objects in a syntax other than JSON, as Lark rules from a JSON Schema.

Two templates' syntaxes (`Syntax`): Gemma 4's (`GEMMA`, `ffwd.templates.formats.gemma4`:
bare keys sorted as Jinja's ``dictsort`` sorts them, strings between ``<|"|>`` quotes
with nothing escaped, null as nothing, ``{k:v,...}``) and Python's literals
(`PYTHON`: what a template prints for a list or a dict, ``{'k': [1, True, None]}``,
keys in schema order).

``object_rule(syntax, prefix, schema, markup) -> (expression, rules)`` writes an
object; ``value_rule`` any value of a schema. Listed properties come in their
order, the required ones always, the others where the model writes them; an enum
or const is one of its values as rendered; a schema without a type (or with
``anyOf``) takes any value. Gemma's strings keep their length bounds; a Python
string's are not counted (its escapes make the count inexact).

>>> expr, rules = object_rule(GEMMA, "c0", {"properties": {"b": {"type": "integer"},
...     "a": {"type": "boolean"}}, "required": ["b"]}, Markup({}))
>>> expr, rules[-1]
('"{" c0_o "}"', 'c0_o: c0_0 "," c0_1 | c0_1')
>>> expr, rules = object_rule(PYTHON, "c0", {"properties": {"a": {"type": "boolean"}}},
...     Markup({}))
>>> expr, rules
('"{" c0_o? "}"', ['c0_0: "\\'a\\': " ("True" | "False")', 'c0_o: c0_0'])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ffwd.grammar.lark import Markup, json_rule, literal
from ffwd.templates.formats.gemma4 import QUOTE

NUMBER = r"/-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/"
PY_STRING = r"""/'([^'\\\n]|\\.)*'|"([^"\\\n]|\\.)*"/"""


@dataclass(frozen=True)
class Syntax:
    prefix: str  # of the generic rules (any value)
    key: Callable[[str], str]  # a member's key, through its separator
    sep: str  # between members and items
    words: tuple[str, str, str]  # true, false, null
    sort: Callable[[list[str]], list[str]]  # the members' order
    rendered: Callable[[Any], str]  # a value (an enum's) as the template writes it
    string: Callable[[Markup, list[str], Mapping[str, Any]], str]
    any_key: str  # the key of a free-form map's member, through its separator


def _gemma_rendered(value: Any) -> str:
    """A value as Gemma 4's template writes it.

    >>> _gemma_rendered({"b": [1, None], "a": "x"}), _gemma_rendered(True)
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
        return "{" + ",".join(f"{k}:{_gemma_rendered(value[k])}" for k in keys) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_gemma_rendered(v) for v in value) + "]"
    return str(value)


def _gemma_string(markup: Markup, rules: list[str], schema: Mapping[str, Any]) -> str:
    """Text between quotes, up to the first closing quote (its length bounds hold)."""
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


def _python_string(markup: Markup, rules: list[str], schema: Mapping[str, Any]) -> str:
    if f"P_STRING: {PY_STRING}" not in rules:
        rules.append(f"P_STRING: {PY_STRING}")
    return "P_STRING"


GEMMA = Syntax("g", lambda k: k + ":", ",", ("true", "false", ""),
               lambda keys: sorted(keys, key=str.lower), _gemma_rendered, _gemma_string,
               r'/[^:{}\[\],<]+/ ":"')
PYTHON = Syntax("p", lambda k: repr(k) + ": ", ", ", ("True", "False", "None"), list, repr,
                _python_string, 'P_STRING ": "')


def object_rule(syntax: Syntax, prefix: str, params: Mapping[str, Any], markup: Markup
                ) -> tuple[str, list[str]]:
    """An arguments object (see the module docstring): its expression and rules."""
    rules: list[str] = []
    return _object(syntax, prefix, params, markup, rules), rules


def value_rule(syntax: Syntax, prefix: str, schema: Mapping[str, Any], markup: Markup
               ) -> tuple[str, list[str]]:
    """One value of `schema` ("" where it can only be written as nothing)."""
    rules: list[str] = []
    return _value(syntax, prefix, schema, markup, rules), rules


def _value(syn: Syntax, name: str, schema: Mapping[str, Any], markup: Markup,
           rules: list[str]) -> str:
    choices = schema.get("enum") if isinstance(schema.get("enum"), list) else None
    if "const" in schema:
        choices = [schema["const"]]
    if choices:
        written = [markup.rule(syn.rendered(v)) for v in choices]
        alternatives = " | ".join(w for w in written if w)
        return f"({alternatives})" + ("?" if "" in written else "") if alternatives else ""
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if isinstance(kind, str) else []
    if not kinds or any(k in schema for k in ("anyOf", "oneOf", "allOf")):
        return _maybe(_any(syn, markup, rules), syn.words[2])
    out = []
    for k in kinds:
        if k == "string":
            out.append(syn.string(markup, rules, schema))
        elif k in ("integer", "number"):  # written as JSON writes them, bounds and all
            out.append(json_rule({**schema, "type": k}))
        elif k == "boolean":
            out.append(f"{literal(syn.words[0])} | {literal(syn.words[1])}")
        elif k == "array":
            items = schema.get("items")
            item = _value(syn, f"{name}i", items if isinstance(items, Mapping) else {},
                          markup, rules)
            sep = literal(syn.sep)
            rules.append(f'{name}a: "[" ({item} ({sep} {item})*)? "]"' if item
                         else f'{name}a: "[]"')
            out.append(f"{name}a")
        elif k == "object":
            out.append(_object(syn, name, schema, markup, rules))
        elif k == "null" and syn.words[2]:
            out.append(literal(syn.words[2]))
    if not out:
        return "" if "null" in kinds else _maybe(_any(syn, markup, rules), syn.words[2])
    alternatives = f"({' | '.join(out)})"
    return alternatives + ("?" if "null" in kinds and not syn.words[2] else "")


def _maybe(expr: str, null: str) -> str:
    """`expr`, or null where null is written as nothing."""
    return expr if null else expr + "?"


def _object(syn: Syntax, name: str, schema: Mapping[str, Any], markup: Markup,
            rules: list[str]) -> str:
    """``{`` the listed members, in order, separated ``}``; a free-form map where none
    are listed."""
    props = schema.get("properties")
    if not isinstance(props, Mapping) or not props:
        if schema.get("additionalProperties") is False:
            return '"{}"'
        _any(syn, markup, rules)
        return f"{syn.prefix}_object"
    required = set(schema.get("required") or ())
    keys = syn.sort(list(props))
    members = []
    for j, key in enumerate(keys):
        sub = props[key] if isinstance(props[key], Mapping) else {}
        value = _value(syn, f"{name}_{j}", sub, markup, rules)
        rules.append(f"{name}_{j}: {literal(syn.key(key))} {value}".rstrip())
        members.append(f"{name}_{j}")
    sep = literal(syn.sep)
    steps = [f"{sep} {m}" if k in required else f"({sep} {m})?"
             for k, m in zip(keys, members, strict=True)]
    # The first member written: any whose predecessors are all optional.
    firsts = []
    for j, key in enumerate(keys):
        firsts.append(" ".join([members[j], *steps[j + 1:]]))
        if key in required:
            break
    optional = not required & set(keys)
    rules.append(f"{name}_o: {' | '.join(firsts)}")
    return f'"{{" {name}_o{"?" if optional else ""} "}}"'


def _any(syn: Syntax, markup: Markup, rules: list[str]) -> str:
    """Any value (the generic rules, added once)."""
    p = syn.prefix
    if not any(r.startswith(f"{p}_value:") for r in rules):
        string = syn.string(markup, rules, {})
        true, false, null = (literal(w) for w in syn.words)
        sep = literal(syn.sep)
        words = " | ".join(w for w in (true, false, null) if w != '""')
        value = f"{p}_value" + ("" if syn.words[2] else "?")
        rules += [
            f"{p}_value: {string} | {p}_object | {p}_array | {NUMBER} | {words}",
            f'{p}_object: "{{" ({p}_member ({sep} {p}_member)*)? "}}"',
            f"{p}_member: {syn.any_key} {value}",
            f'{p}_array: "[" ({value} ({sep} {value})*)? "]"',
        ]
    return f"{p}_value"
