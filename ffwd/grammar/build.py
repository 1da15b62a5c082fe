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
them); Gemma 4's object is `ffwd.grammar.objects`'. Key/value formats
(``pairs``: qwen_xml, GLM, DSML, MiniMax, ...) write each parameter with the
markup the template's renderings show (`ffwd.grammar.skeleton.Pairs`), value
by value: enums and consts as rendered, numbers as JSON, arrays and objects as
JSON or as Python literals (`ffwd.grammar.objects`), booleans and null as the
template writes them (``True`` or ``true``), anything else as raw text up to the
value's closing markup. Markup that varies by call (an id, an index) is the
model's to write, in the shape the template's renderings show. Tool arguments are closed:
an object schema that lists ``properties`` and does not say
``additionalProperties`` admits only those (``true`` or a schema re-opens it;
``"strict": true`` closes every object); an object inside the arguments that
lists none is a free-form map, and a tool that takes no parameters takes ``{}``.
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

from ffwd.grammar.lark import (
    Markup,
    json_rule,
    literal,
    regex_class_char,
    regex_text,
    strict_schema,
)
from ffwd.grammar.objects import GEMMA, PYTHON, object_rule, value_rule
from ffwd.grammar.skeleton import Pairs, Skeleton

FREE = "FREE: /(?s:.*)/"
EMPTY = '""'
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
    lines = _calls(skeleton, called, markup)
    if skeleton.slot:
        lines.append(f"VARYING: /{skeleton.slot}/")
    more = f" ({markup.rule(skeleton.between)} call)*" if parallel and skeleton.between else ""
    end = _end(skeleton, markup)
    if choice != "auto":
        return "\n".join([f"start: {markup.rule(skeleton.lead)} call{more}{end}", *lines])
    body = f"call{more}{end}"
    return "\n".join([*_lazy(skeleton.lead, marker, body, markup, content), *lines])


def _end(skeleton: Skeleton, markup: Markup) -> str:
    """After the last call: the skeleton's end, or what the template writes after
    several calls (either, however many were written)."""
    ends = {skeleton.end, skeleton.more_end or skeleton.end}
    written = [markup.rule(e) for e in sorted(ends) if e]
    if not written:
        return ""
    optional = "?" if "" in ends else ""
    return f" ({' | '.join(written)}){optional}" if len(ends) > 1 else f" {written[0]}"


def with_reasoning(lark: str, markup: Markup, start: str, end: str, opened: bool) -> str:
    """`lark` with the model's reasoning before its reply: the block the prompt `opened`,
    or one the model may open with `start`; any text up to `end`, then the reply."""
    lines = lark.split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("start:"))
    head = "thought" if opened else f"(GAP {markup.rule(start)} thought)?"
    lines[at:at + 1] = [f"start: {head} GAP answer", f"answer:{lines[at][len('start:'):]}",
                        f"thought[lazy]: THOUGHT {markup.rule(end)}",
                        "THOUGHT: /(?s:.*)/", r"GAP: /[ \t\r\n]*/"]
    return "\n".join(lines)


def reasoning_free(lead: str, end: str) -> str:
    """A call's lead without the reasoning block the template writes before it (an
    empty one: ``<think>\n\n</think>\n\n<tool_call>``): the reasoning is the model's;
    nor the whitespace it starts with (`with_reasoning`'s gap takes it)."""
    at = lead.find(end) if end else -1
    return (lead[at + len(end):] if at >= 0 else lead).lstrip()


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


def _calls(skeleton: Skeleton, tools: Sequence[Mapping[str, Any]], markup: Markup) -> list[str]:
    """``call`` and one rule per tool (and the rules their arguments need)."""
    names, lines = [], []
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
        name = fn["name"]
        rules: list[str] = []  # the rules the arguments need (none for %json)
        mid = markup.rule(skeleton.mid)
        if skeleton.arguments == "gemma":
            args, rules = object_rule(GEMMA, f"c{i}", params, markup)
        elif skeleton.pairs is None:
            name = json.dumps(fn["name"], ensure_ascii=False)[1:-1]
            args = json_rule(params)
        else:
            args, rules = _pair_parameters(f"c{i}", params, skeleton.pairs, markup)
            if skeleton.empty is not None and not params.get("required"):
                # A call without arguments, as the template writes it.
                mid, args = "", f"({mid} {args} | {markup.rule(skeleton.empty) or EMPTY})"
        lines += [r for r in rules if r not in lines]
        parts = [literal(name), mid, args, markup.rule(skeleton.tail)]
        lines.append(f"c{i}: " + " ".join(p for p in parts if p))
        names.append(f"c{i}")
    return [f"call: {' | '.join(names)}", *lines]


def _pair_parameters(
    prefix: str, params: Mapping[str, Any], pairs: Pairs, markup: Markup
) -> tuple[str, list[str]]:
    """The parameters of one call as pairs, in schema order (optional ones may be left
    out), then, unless the schema forbids them, any others (as llguidance orders JSON
    properties): the sequence and its rules."""
    required = set(params.get("required") or ())
    props = params.get("properties") or {}
    seq, rules = [], []
    for j, (key, schema) in enumerate(props.items()):
        schema = schema if isinstance(schema, Mapping) else {}
        rule = f"{prefix}_{j}"
        value, lexemes = _pair_value(rule, schema, pairs, markup)
        rules += [r for r in lexemes if r not in rules]
        opening = markup.rule(pairs.open + key + pairs.between.get(_kind(schema), ""))
        rules.append(f"{rule}: {opening} {value}")
        seq.append(rule if key in required else f"{rule}?")
    extra = params.get("additionalProperties", True)
    if extra is not False:
        value, lexemes = _pair_value(f"{prefix}_x", extra if isinstance(extra, Mapping) else {},
                                     pairs, markup)
        rules += [r for r in lexemes if r not in rules]
        listed = "|".join(re.escape(k) for k in props)
        key = r"/[^<>\n\"]+/" + (f" & ~/({listed})/" if listed else "")
        between = markup.rule(pairs.between.get("string", ""))
        rules += [
            f"{prefix}_extra: {markup.rule(pairs.open)} {prefix.upper()}_KEY {between} {value}",
            f"{prefix.upper()}_KEY: {key}",
        ]
        seq.append(f"{prefix}_extra*")
    return " ".join(seq), rules


def _kind(schema: Mapping[str, Any]) -> str:
    """The JSON type whose markup a value of `schema` gets (a string's, when unsure)."""
    kind = schema.get("type")
    if isinstance(kind, str) and "enum" not in schema and "const" not in schema:
        return kind
    return "string"


def _pair_value(
    name: str, schema: Mapping[str, Any], pairs: Pairs, markup: Markup
) -> tuple[str, list[str]]:
    """A value as the template writes it, with its closing markup, and the terminals it
    needs. A string's length bounds hold (its pattern and format are not enforced)."""
    close = markup.rule(pairs.close)
    choices = schema.get("enum") if isinstance(schema.get("enum"), list) else None
    if "const" in schema:
        choices = [schema["const"]]
    if choices:
        written = " | ".join(literal(_rendered(v, pairs)) for v in choices)
        return f"({written}) {close}", []
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if isinstance(kind, str) else []
    if pairs.containers == "python" and kinds and set(kinds) <= {"array", "object"}:
        value, lexemes = value_rule(PYTHON, f"{name}v", schema, markup)
        return f"{value} {close}", lexemes
    if kinds == ["string"] and ("minLength" in schema or "maxLength" in schema):
        low, high = int(schema.get("minLength", 0)), schema.get("maxLength")
        return _text_value(pairs, markup, f"{low},{'' if high is None else int(high)}")
    if not kinds or "string" in kinds or any(k in schema for k in ("anyOf", "oneOf", "allOf")):
        return _text_value(pairs, markup, "")
    alternatives = []
    for k in kinds:
        if k in ("boolean", "null"):
            words = ("true", "false") if k == "boolean" else ("null",)
            alternatives += [literal(pairs.words[w]) for w in words]
        else:
            alternatives.append(json_rule({**schema, "type": k}))
    return "(" + " | ".join(alternatives) + f") {close}", []


def _text_value(pairs: Pairs, markup: Markup, bounds: str) -> tuple[str, list[str]]:
    """Raw text up to the value's closing markup (`bounds`: a length range, or "")."""
    head = pairs.close.rstrip()
    rest = pairs.close[len(head):]
    reach = "*" if not bounds else "{" + bounds + "}"
    name = "pair_text" + ("_" + bounds.replace(",", "_") if bounds else "")
    if not head or any(special in head for special in markup.specials):
        # Markup with special tokens cannot end a regex: text, then the tokens.
        return f"{name} {markup.rule(pairs.close)}", [f"{name}: /(?s:.{reach})/"]
    lexeme = f"{name}[lazy]: /(?s:.{reach}){regex_text(head)}/"
    return (f"{name} {markup.rule(rest)}" if rest else name), [lexeme]


def _rendered(value: Any, pairs: Pairs) -> str:
    """A value as the template writes it (JSON for containers)."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False) if pairs.containers == "json" else repr(value)
    if isinstance(value, bool) or value is None:
        return pairs.words[json.dumps(value)]
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
