"""Structured output as clients mean it: a response format's object that lists its
`properties` and says nothing of `additionalProperties` gets no other keys (as tool
arguments do). Generated schemas, the real tokenizer, and the grammar's own mask:
whatever the mask lets a sampler write is valid and adds no key."""

from __future__ import annotations

import json
import random
from functools import cache
from typing import Any

import jsonschema
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ffwd.grammar import GrammarConstraint, RequestGrammars
from ffwd.templates.choose import resolve_template
from ffwd.templates.rows import default_eos_ids
from tests.unit._tokenizers import tokenizer

STEPS = 400  # a walk through a closed schema of these sizes ends well before
KEYS = st.from_regex(r"[a-z]{1,8}", fullmatch=True)
LEAVES = st.one_of(
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.integers(-99, 0).map(lambda lo: {"type": "integer", "minimum": lo, "maximum": lo + 99}),
    st.integers(0, 6).map(lambda n: {"type": "string", "maxLength": n}),
    st.lists(st.from_regex(r"[a-z ]{1,6}", fullmatch=True), min_size=1, max_size=3,
             unique=True).map(lambda vs: {"enum": vs}),
)


def _object(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """An object that lists 1-3 properties (some required) and omits additionalProperties."""
    props = st.dictionaries(KEYS, children, min_size=1, max_size=3)
    return props.flatmap(lambda p: st.lists(st.sampled_from(sorted(p)), unique=True).map(
        lambda req: {"type": "object", "properties": p, "required": req}))


VALUES = st.recursive(LEAVES, lambda kids: st.one_of(
    _object(kids), kids.map(lambda s: {"type": "array", "items": s, "maxItems": 2})),
    max_leaves=6)
SCHEMAS = _object(VALUES)


@cache
def grammars() -> RequestGrammars:
    tok = tokenizer("default")
    resolved = resolve_template(tok, "hermes")
    template, name = resolved.template, resolved.format_name
    return RequestGrammars(tok, template, name, len(tok), default_eos_ids(tok))


def constraint(schema: dict[str, Any], strict: bool | None = None) -> GrammarConstraint:
    spec: dict[str, Any] = {"name": "out", "schema": schema}
    spec |= {"strict": strict} if strict is not None else {}
    made = grammars().for_request([], "none", response_format={"type": "json_schema",
                                                                "json_schema": spec})
    assert made is not None
    return made


def walk(c: GrammarConstraint, rng: random.Random) -> list[int]:
    """Ids a sampler may write under the mask, each drawn uniformly from what it allows,
    until it draws the end of the turn (at most `STEPS` ids, the end not included)."""
    zeros = torch.zeros(len(tokenizer("default")))
    ids: list[int] = []
    while len(ids) < STEPS:
        allowed = torch.isfinite(c.mask(zeros, ids)).nonzero().flatten().tolist()
        ids.append(rng.choice(allowed))
        if ids[-1] in grammars().eos_ids:
            c.sync(ids)
            return ids[:-1]
    return ids


def extra_keys(value: Any, schema: dict[str, Any]) -> list[str]:
    """Keys of `value`, at any depth, that its schema does not list."""
    if isinstance(value, dict):
        props = schema.get("properties", {})
        return [k for k in value if k not in props] + [
            e for k, v in value.items() if k in props for e in extra_keys(v, props[k])]
    if isinstance(value, list):
        return [e for v in value for e in extra_keys(v, schema.get("items", {}))]
    return []


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(schema=SCHEMAS, seed=st.integers(0, 2**32 - 1))
def test_what_the_mask_allows_adds_no_keys(schema: dict[str, Any], seed: int) -> None:
    c = constraint(schema)
    ids = walk(c, random.Random(seed))
    assert c.done, f"no end after {STEPS} ids: {tokenizer('default').decode(ids)!r}"
    value = json.loads(tokenizer("default").decode(ids))
    jsonschema.validate(value, schema)
    assert extra_keys(value, schema) == []
    # The same object with one key more is refused where that key begins.
    text = json.dumps({"unlisted": 1, **value}, ensure_ascii=False, separators=(", ", ": "))
    more = list(tokenizer("default").encode(text, add_special_tokens=False))
    assert constraint(schema).admit(more) < len(more)


def test_saying_additional_properties_opens_the_object_again() -> None:
    def admits(schema: dict[str, Any], text: str, strict: bool | None = None) -> bool:
        ids = list(tokenizer("default").encode(text, add_special_tokens=False))
        return constraint(schema, strict).admit(ids) == len(ids)

    listed = {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert admits(listed, '{"n": 3}') and not admits(listed, '{"n": 3, "m": 4}')
    assert admits({**listed, "additionalProperties": True}, '{"n": 3, "m": 4}')
    assert admits({**listed, "additionalProperties": {"type": "integer"}}, '{"n": 3, "m": 4}')
    # Listing no properties: a free-form map, unless strict closes every object.
    free = {"type": "object", "properties": {"tally": {"type": "object"}}}
    assert admits(free, '{"tally": {"Ada": 3}}')
    assert not admits(free, '{"tally": {"Ada": 3}}', strict=True)
    # An object made of allOf parts takes the keys of every part (closing a part would
    # refuse the others' keys, and so every object).
    parts = {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}},
                       {"type": "object", "properties": {"b": {"type": "integer"}}}]}
    assert admits(parts, '{"a": 1, "b": 2}')
