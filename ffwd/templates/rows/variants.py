"""The argument values the sentinel renderings draw on, and the argument sets per tool.

`variants(parameters)` lists the argument objects one tool is rendered with
(every key meets every sentinel slot, every key comes first once, the
required keys alone); `rounds(tools)` deals them into rounds, so that
neighbouring turns differ; `PROBE_VALUES` are the one-key calls whose values
end in every common way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SLOTS = 2  # sentinel values per type; every key meets each of them
ENUM_MAX = 8  # enums up to this size are rendered value by value

# Two sentinel values per JSON type whose first characters both merge with what
# precedes a value (the opening quote, the space), in different ways: where the
# renderings part, any value could.
SENTINELS: dict[str, tuple[Any, ...]] = {
    "string": ("", "-1"),
    "integer": (7, -3),
    "number": (1.5, -2),
    "boolean": (True, False),
    "array": ([], ["-1"]),
    "object": ({}, {"Vx": 1}),
    "null": (None, None),
}
MIXED = ("", -3)
PROBE_KEY = "k"
PROBE_VALUES: tuple[Any, ...] = (
    "Vx", "-1", "", 7, -3, 1.5, True, False, None, [], ["Vx"], [7], {}, {"Vx": 1},
)


def sentinel(schema: Mapping[str, Any], slot: int) -> Any:
    """The sentinel value for a property schema in rendering slot `slot`: an
    enum's own values (`variants` renders the rest of a short enum), else the
    type's sentinels.

    >>> sentinel({"type": "integer"}, 1), sentinel({"enum": ["c", "f", "k"]}, 1)
    (-3, 'f')
    """
    enum = _enum(schema)
    if enum:
        return enum[slot % len(enum)]
    kind = schema.get("type")
    values = SENTINELS.get(kind, MIXED) if isinstance(kind, str) else MIXED
    return values[slot % SLOTS]


def _enum(schema: Mapping[str, Any]) -> list[Any]:
    """The enum values, when there are few enough to render them all."""
    enum = schema.get("enum")
    return enum if isinstance(enum, list) and 0 < len(enum) <= ENUM_MAX else []


def variants(parameters: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Argument objects to render one tool with: every key meets every
    sentinel slot (and every value of a short enum), every key comes first
    once (a lone key where the rotations run out), and the required keys alone
    (``{}`` when none is).

    >>> variants({"properties": {"a": {"type": "integer"}, "b": {}, "c": {}}, "required": ["a"]})
    [{'a': 7, 'b': -3, 'c': ''}, {'b': '', 'c': -3, 'a': -3}, {'c': ''}, {'a': 7}]
    >>> variants({"properties": {"u": {"enum": ["c", "f", "k"]}}})
    [{'u': 'c'}, {'u': 'f'}, {'u': 'k'}, {}]
    """
    props = list((parameters.get("properties") or {}).items())
    if not props:
        return [{}]
    n = len(props)
    out = [
        {
            props[i][0]: sentinel(props[i][1], (r + i) % SLOTS)
            for i in [(r + j) % n for j in range(n)]
        }
        for r in range(SLOTS)
    ]
    out += [{key: sentinel(schema, 0)} for key, schema in props[SLOTS:]]
    out += [{key: value} for key, schema in props for value in _enum(schema)[SLOTS:]]
    # The required keys alone (``{}`` when none is): a template that sorts the keys
    # (Gemma 4's) otherwise always writes the same optional key first.
    required = set(parameters.get("required") or ())
    if len(required & {k for k, _ in props}) < n:
        out.append({key: sentinel(schema, 0) for key, schema in props if key in required})
    return out


def rounds(
    tools: Sequence[Mapping[str, Any]],
) -> list[list[tuple[Mapping[str, Any], dict[str, Any]]]]:
    """Round r holds every tool's r-th variant, so neighbouring turns differ."""
    per_tool = [(t, variants(t["function"]["parameters"])) for t in tools]
    depth = max(len(v) for _, v in per_tool)
    return [[(t, v[r]) for t, v in per_tool if r < len(v)] for r in range(depth)]
