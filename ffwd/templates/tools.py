"""Tools as chat templates read them.

``normalize_tools(tools) -> list[dict]``
    OpenAI tools (``{"type": "function", "function": {...}}``) or bare
    function objects in, OpenAI tools out (fresh copies). JSON Schema
    ``"dict"`` becomes ``"object"``; a missing parameter ``type`` or
    ``properties`` is filled in. Anything else that is not a usable schema is
    a ``ValueError`` naming the tool and the problem.
``described(tools) -> list[dict]``
    The same tools with what some templates take for granted: a
    ``description`` on every tool (``""`` where the client gave none), and
    Cohere's ``parameter_definitions`` (Command-R's templates read parameters
    in that shape).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

JSON_TYPES = ("string", "number", "integer", "boolean", "array", "object", "null")
# Cohere's templates name parameter types as Python does.
PYTHON_TYPES = {"string": "str", "integer": "int", "number": "float", "boolean": "bool",
                "array": "list", "object": "dict", "null": "None"}


def normalize_tools(tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """Tools in OpenAI form with a clean ``parameters`` object schema; a null
    ``description`` is none (templates concatenate it as text).

    >>> normalize_tools([{"name": "f", "description": None, "parameters": {"type": "dict"}}]
    ...                 )[0]["function"]
    {'name': 'f', 'parameters': {'type': 'object', 'properties': {}}}
    """
    if tools is None:
        return []
    if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Sequence):
        raise ValueError(f"tools: expected a list of tool objects, got {type(tools).__name__}")
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        fn = _function_of(tool, i)
        name = fn["name"]
        if name in seen:
            raise ValueError(f"tool {name!r}: the name is used by more than one tool")
        seen.add(name)
        fn["parameters"] = _object_schema(fn.get("parameters"), f"tool {name!r}: parameters")
        if fn.get("description", "") is None:
            del fn["description"]
        out.append({"type": "function", "function": fn})
    return out


def described(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`tools` (normalized) with descriptions and Cohere's parameter definitions.

    >>> t = described(normalize_tools([{"name": "f", "parameters": {"properties": {
    ...     "a": {"type": "integer"}}, "required": ["a"]}}]))[0]
    >>> t["function"]["description"], t["function"]["parameter_definitions"]
    ('', {'a': {'description': '', 'type': 'int', 'required': True}})
    """
    out = []
    for tool in tools:
        fn = dict(tool["function"])
        fn.setdefault("description", "")
        params = fn.get("parameters") or {}
        required = set(params.get("required") or ())
        fn["parameter_definitions"] = {
            key: {"description": str(schema.get("description", "")),
                  "type": PYTHON_TYPES.get(str(schema.get("type")), "str"),
                  "required": key in required}
            for key, schema in (params.get("properties") or {}).items()
        }
        out.append({**tool, "function": fn, **fn})
    return out


def _function_of(tool: object, i: int) -> dict[str, Any]:
    if not isinstance(tool, Mapping):
        raise ValueError(f"tools[{i}]: expected an object, got {type(tool).__name__}")
    if "function" in tool:
        if tool.get("type", "function") != "function":
            raise ValueError(
                f"tools[{i}]: type {tool.get('type')!r} is not supported (expected 'function')"
            )
        fn = tool["function"]
        if not isinstance(fn, Mapping):
            raise ValueError(f"tools[{i}]: 'function' must be an object")
    else:
        fn = tool
    name = fn.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"tools[{i}]: 'name' must be a non-empty string, got {name!r}")
    return dict(fn)  # parameters are rebuilt by _object_schema


def _object_schema(schema: object, where: str) -> dict[str, Any]:
    if schema is None:
        return {"type": "object", "properties": {}}
    if not isinstance(schema, Mapping):
        raise ValueError(f"{where}: expected a JSON Schema object, got {type(schema).__name__}")
    out = _schema(schema, where)
    if out.get("type") != "object":
        raise ValueError(f"{where}: type {out.get('type')!r}, expected 'object'")
    props = out.setdefault("properties", {})
    required = out.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        raise ValueError(f"{where}: 'required' must be a list of property names")
    missing = [r for r in required if r not in props]
    if missing:
        raise ValueError(f"{where}: required {missing} not among the properties {list(props)}")
    return out


def _schema(schema: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Copy of a JSON Schema with ``dict`` read as ``object``, checked recursively."""
    out = {k: list(v) if isinstance(v, list) else v for k, v in schema.items()}
    kind = out.get("type")
    if kind is None and "properties" in out:
        kind = out["type"] = "object"
    kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
    kinds = ["object" if k == "dict" else k for k in kinds]
    for k in kinds:
        if k not in JSON_TYPES:
            raise ValueError(
                f"{where}: type {k!r} is not a JSON Schema type (expected one of {JSON_TYPES})"
            )
    if kinds:
        out["type"] = kinds if isinstance(kind, list) else kinds[0]
    if "object" in kinds or "properties" in out:
        props = out.get("properties", {})
        if not isinstance(props, Mapping):
            raise ValueError(f"{where}: 'properties' must be an object")
        fixed = {}
        for key, sub in props.items():
            if not isinstance(sub, Mapping):
                raise ValueError(f"{where}.{key}: expected a JSON Schema object")
            fixed[key] = _schema(sub, f"{where}.{key}")
        out["properties"] = fixed
    items = out.get("items")
    if isinstance(items, Mapping):
        out["items"] = _schema(items, f"{where}[]")
    return out
