"""A request's grammar as Lark text: tool calls, structured content, or both.

``tool_grammar(skeleton, tools, choice, parallel, markup, content=None)``
    ``required`` or a named function: the whole turn is calls, from the first
    token (only the named function when named; one call when not
    `parallel`). ``auto``: a *lazy* grammar: free text (or `content`) until
    the format's opening marker, then the calls as above.
``content_grammar(content)``
    Just the content rule (``response_format`` without tools).
``response_format_rule(response_format) -> str | None``
    ``{"type": "json_object"}`` and ``{"type": "json_schema", "json_schema":
    {"schema": ..., "strict": ...}}`` as a ``%json`` rule; ``text``: None. A
    ``json_schema`` without ``schema`` (optional in OpenAI's API) is any JSON
    object, as ``json_object`` is.

Arguments: JSON formats embed each tool's parameters schema (``%json``, in
schema order: llguidance fixes properties to the order the schema lists
them). XML (qwen_xml) writes each parameter as the template does, value by
value: enums and consts as rendered, numbers, arrays and objects as JSON,
booleans as ``True``/``False``, anything else as raw text up to
``\\n</parameter>``. Tool arguments are closed: an object schema that lists
``properties`` and does not say ``additionalProperties`` admits only those
(``true`` or a schema re-opens it; ``"strict": true`` closes every object); an
object inside the arguments that lists none is a free-form map, and a tool
that takes no parameters takes ``{}``.
``response_format`` (and so ``text.format`` and ``output_config``) follows the
same rule: an object that lists ``properties`` without saying
``additionalProperties`` gets no other keys (as llama.cpp's converter does: a
small model otherwise adds keys of its own and rambles until ``max_tokens``);
``strict`` closes every object.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ffwd.grammar.lark import Markup, json_rule, literal, regex_class_char, strict_schema
from ffwd.grammar.skeleton import Skeleton
from ffwd.templates.formats.qwen_xml import PARAMETER, PARAMETER_END

FREE = "FREE: /(?s:.*)/"
XML_TEXT = r"xml_text[lazy]: /(?s:.*)\n<\/parameter>/"
RESPONSE_TYPES = ("text", "json_object", "json_schema")


def tool_grammar(
    skeleton: Skeleton,
    tools: Sequence[Mapping[str, Any]],
    choice: str,
    parallel: bool,
    markup: Markup,
    marker: str,
    content: str | None = None,
) -> str:
    """Lark text for calls of `tools` under `choice` (``auto``, ``required`` or a
    tool's name); `content` is the rule body for a reply that is not a call
    (None: free text); `marker` is the format's opening marker."""
    called = [t for t in tools if choice in ("auto", "required") or t["function"]["name"] == choice]
    lines, needs_text = _calls(skeleton, called, markup)
    more = f" ({markup.rule(skeleton.between)} call)*" if parallel and skeleton.between else ""
    end = f" {markup.rule(skeleton.end)}" if skeleton.end else ""
    if needs_text:
        lines.append(XML_TEXT)
    if choice != "auto":
        return "\n".join([f"start: {markup.rule(skeleton.lead)} call{more}{end}", *lines])
    body = f"call{more}{end}"
    return "\n".join([*_lazy(skeleton.lead, marker, body, markup, content), *lines])


def content_grammar(content: str) -> str:
    return f"start: content\ncontent: {content}"


def _lazy(lead: str, marker: str, body: str, markup: Markup, content: str | None) -> list[str]:
    """``start``: `content` (free text by default), or, once the marker is
    written, the calls (`body`)."""
    reply = "content" if content is not None else "FREE"
    lines = [FREE] if content is None else [f"content: {content}"]
    at = lead.find(marker) if marker else -1
    if at < 0:
        # No marker (llama3_json: a call is the whole message): a reply that
        # does not start like a call is free text.
        first = lead.lstrip()[:1]
        if content is None and first:
            reply = "TEXT"
            lines = [rf"TEXT: /(?s:\s*([^{regex_class_char(first)}\s].*)?)/"]
        return [f"start: {reply} | {markup.rule(lead)} {body}", *lines]
    rest = markup.rule(lead[at + len(marker) :])
    special = markup.special(marker)
    if content is not None:
        head = f"{markup.rule(lead[:at])} {markup.rule(marker)}".strip()
        return [f"start: {reply} | {head} {rest} {body}", *lines]
    if special is not None:  # a special token never appears in free text
        return [f"start: FREE | FREE <[{special}]> {rest} {body}", *lines]
    return [
        f"start: FREE | opening {rest} {body}",
        f"opening[lazy]: FREE {literal(marker)}",
        *lines,
    ]


def _calls(
    skeleton: Skeleton, tools: Sequence[Mapping[str, Any]], markup: Markup
) -> tuple[list[str], bool]:
    """``call`` and one rule per tool; whether the XML text rule is needed."""
    names, lines, needs_text = [], [], False
    for i, tool in enumerate(tools):
        fn = tool["function"]
        # Closed arguments: an object that lists `properties` and does not say
        # `additionalProperties` takes only those (as llama.cpp's server grammars do);
        # saying it re-opens it, and an object that lists none is a free-form map.
        # `"strict": true` closes every object (OpenAI's strict mode).
        params = strict_schema(fn.get("parameters") or {"type": "object", "properties": {}},
                               listed_only=fn.get("strict") is not True)
        if not params.get("properties") and "additionalProperties" not in params:
            params = {**params, "additionalProperties": False}  # no parameters: takes {}
        if skeleton.json_args:
            name = json.dumps(fn["name"], ensure_ascii=False)[1:-1]
            args = json_rule(params)
        else:
            name = fn["name"]
            args, rules, text = _xml_parameters(f"c{i}", params)
            lines += rules
            needs_text |= text
        parts = [literal(name), markup.rule(skeleton.mid), args, markup.rule(skeleton.tail)]
        lines.append(f"c{i}: " + " ".join(p for p in parts if p))
        names.append(f"c{i}")
    return [f"call: {' | '.join(names)}", *lines], needs_text


def _xml_parameters(prefix: str, params: Mapping[str, Any]) -> tuple[str, list[str], bool]:
    """The parameters of one XML call, in schema order (optional ones may be left
    out), then, unless the schema forbids them, any others (as llguidance orders
    JSON properties): the sequence, its rules, and whether a raw-text value occurs."""
    required = set(params.get("required") or ())
    props = params.get("properties") or {}
    seq, rules, text = [], [], False
    for j, (key, schema) in enumerate(props.items()):
        value, raw, lexemes = _xml_value(schema if isinstance(schema, Mapping) else {})
        text |= raw
        rules += [r for r in lexemes if r not in rules]
        rule = f"{prefix}_{j}"
        rules.append(f"{rule}: {literal(PARAMETER + key + '>' + chr(10))} {value}")
        seq.append(rule if key in required else f"{rule}?")
    extra = params.get("additionalProperties", True)
    if extra is not False:
        value, raw, lexemes = _xml_value(extra if isinstance(extra, Mapping) else {})
        text |= raw
        rules += [r for r in lexemes if r not in rules]
        listed = "|".join(re.escape(k) for k in props)
        key = r"/[^<>\n]+/" + (f" & ~/({listed})/" if listed else "")
        rules += [
            f"{prefix}_extra: {literal(PARAMETER)} {prefix.upper()}_KEY {literal('>' + chr(10))} "
            f"{value}",
            f"{prefix.upper()}_KEY: {key}",
        ]
        seq.append(f"{prefix}_extra*")
    return " ".join(seq), rules, text


def _xml_value(schema: Mapping[str, Any]) -> tuple[str, bool, list[str]]:
    """A value as the qwen_xml template writes it, with its closing tag; whether
    it is raw text (the lazy `xml_text` rule); the terminals it needs. A string's
    length bounds hold (its pattern and format are not enforced in XML)."""
    close = literal("\n" + PARAMETER_END + "\n")
    choices = schema.get("enum") if isinstance(schema.get("enum"), list) else None
    if "const" in schema:
        choices = [schema["const"]]
    if choices:
        return "(" + " | ".join(literal(_rendered(v)) for v in choices) + f") {close}", False, []
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if isinstance(kind, str) else []
    if kinds == ["string"] and ("minLength" in schema or "maxLength" in schema):
        low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
        bounds = f"{low},{'' if high is None else int(high)}"
        name = f"xml_str_{bounds.replace(',', '_')}"
        lexeme = rf"{name}[lazy]: /(?s:.{{{bounds}}})\n<\/parameter>/"
        return f"{name} {literal(chr(10))}", False, [lexeme]
    if not kinds or "string" in kinds or any(k in schema for k in ("anyOf", "oneOf", "allOf")):
        return f"xml_text {literal(chr(10))}", True, []
    alternatives = []
    for k in kinds:
        if k == "boolean":
            alternatives.append('"True" | "False"')
        elif k == "null":
            alternatives.append('"None"')
        else:
            alternatives.append(json_rule({**schema, "type": k}))
    return "(" + " | ".join(alternatives) + f") {close}", False, []


def _rendered(value: Any) -> str:
    """A value as the template's ``value`` macro writes it (JSON for containers)."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def response_format_rule(response_format: object) -> str | None:
    """The content rule for an OpenAI ``response_format`` (None for ``text``).

    >>> response_format_rule({"type": "text"}) is None
    True
    >>> response_format_rule({"type": "json_schema", "json_schema": {"name": "any"}}) == (
    ...     response_format_rule({"type": "json_object"}))
    True
    """
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, Mapping) else None
    if kind not in RESPONSE_TYPES:
        raise ValueError(
            f"response_format type {kind!r}: expected one of {', '.join(RESPONSE_TYPES)}"
        )
    assert isinstance(response_format, Mapping)
    if kind == "text":
        return None
    if kind == "json_object":
        return json_rule({"type": "object"})
    spec = response_format.get("json_schema")
    schema = spec.get("schema") if isinstance(spec, Mapping) else None
    if not isinstance(spec, Mapping) or not isinstance(schema, Mapping | None):
        raise ValueError(
            'response_format json_schema: expected {"json_schema": {"name": ..., '
            '"schema": {...}, "strict": ...}} with a JSON Schema object as "schema"'
        )
    if schema is None:  # a named format without a schema (OpenAI's is optional): any object
        return json_rule({"type": "object"})
    # Closed as tool arguments are: what a client means by listing the properties.
    strict = spec.get("strict") is True
    return json_rule(strict_schema(schema, listed_only=not strict))
