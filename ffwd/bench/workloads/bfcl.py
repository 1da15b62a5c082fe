"""BFCL entries and their ground-truth calls, read from the installed
``bfcl-eval`` wheel's data files (located with `importlib.util.find_spec`;
no BFCL module is imported).

Public API
----------
``load_entries(category, limit=None) -> list[BfclEntry]``
    Entries of a single-turn category (``simple_python``, ``multiple``,
    ``parallel``, ``live_simple``, ...; see `CATEGORIES`), each with the
    question's messages, its tools in OpenAI form, and its ground-truth
    calls: the first allowed value of every argument, where "" (BFCL's "may
    be left out") leaves an optional argument out and is skipped for a
    required one.
``BfclEntry.call``: the first ground-truth call.
"""

from __future__ import annotations

import ast
import importlib.util
import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

PACKAGE = "bfcl_eval"
CATEGORIES = (
    "simple_python",
    "simple_java",
    "simple_javascript",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
)


@dataclass(frozen=True, slots=True)
class BfclCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class BfclEntry:
    id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]  # OpenAI form: {"type": "function", "function": {...}}
    calls: list[BfclCall]

    @property
    def call(self) -> BfclCall:
        return self.calls[0]


def package_dir() -> Path:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "package 'bfcl_eval' is not installed: pip install --no-deps bfcl-eval (make install)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def data_dir() -> Path:
    return package_dir() / "data"


@lru_cache(maxsize=1)
def type_mapping() -> dict[str, str]:
    """BFCL's own type names -> JSON Schema types (``dict`` -> ``object``,
    ``float`` -> ``number``, Java/JS names ...), read without importing BFCL."""
    source = (package_dir() / "constants" / "type_mappings.py").read_text(encoding="utf-8")
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "GORILLA_TO_OPENAPI" for t in node.targets
        ):
            return dict(ast.literal_eval(node.value))
    raise ValueError("bfcl_eval/constants/type_mappings.py has no GORILLA_TO_OPENAPI table")


def load_entries(category: str, limit: int | None = None) -> list[BfclEntry]:
    """The first `limit` entries of a BFCL category (all when None)."""
    if category not in CATEGORIES:
        raise ValueError(f"BFCL category {category!r}: expected one of {', '.join(CATEGORIES)}")
    if limit is not None and limit < 1:
        raise ValueError(f"limit={limit}: expected a positive number of entries")
    questions = _read(data_dir() / f"BFCL_v4_{category}.json", limit)
    answers = {
        a["id"]: a for a in _read(data_dir() / "possible_answer" / f"BFCL_v4_{category}.json")
    }
    out = []
    for q in questions:
        tools = [to_openai_tool(f) for f in q["function"]]
        required = {
            t["function"]["name"]: set(t["function"]["parameters"].get("required", []))
            for t in tools
        }
        calls = [
            BfclCall(name, _first_values(args, required.get(name, set())))
            for answer in answers[q["id"]]["ground_truth"]
            for name, args in answer.items()
        ]
        out.append(BfclEntry(q["id"], list(q["question"][0]), tools, calls))
    return out


def _read(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    out = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                out.append(json.loads(line))
                if limit is not None and len(out) >= limit:
                    break
    return out


def to_openai_tool(function: Mapping[str, Any]) -> dict[str, Any]:
    """A BFCL function description as an OpenAI tool with JSON Schema types."""
    fn = dict(function)
    fn["parameters"] = _schema(fn.get("parameters") or {"type": "object", "properties": {}})
    return {"type": "function", "function": fn}


def _schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(schema)
    kind = out.get("type")
    if isinstance(kind, str):
        out["type"] = type_mapping().get(kind, "string")
    if isinstance(out.get("properties"), Mapping):
        out["properties"] = {k: _schema(v) for k, v in out["properties"].items()}
    if isinstance(out.get("items"), Mapping):
        out["items"] = _schema(out["items"])
    return out


def _first_values(args: Mapping[str, Any], required: set[str]) -> dict[str, Any]:
    """First allowed value of each argument. BFCL allows "" where an argument may
    be left out: an optional one is then left out, a required one (the schema
    insists) takes its first other value.

    >>> _first_values({"a": ["", 2], "b": ["", 0], "c": [{"d": ["x"]}]}, {"a"})
    {'a': 2, 'c': {'d': 'x'}}
    """
    out = {}
    for key, allowed in args.items():
        values = allowed if isinstance(allowed, list) else []
        if key in required:
            values = [v for v in values if v != ""] or values
        if not values or values[0] == "":
            continue
        out[key] = _first_value(values[0])
    return out


def _first_value(value: Any) -> Any:
    """A nested object's arguments hold lists of allowed values too, also inside lists.

    >>> _first_value([{"f": ["age"], "op": [">", ">="]}])
    [{'f': 'age', 'op': '>'}]
    """
    if isinstance(value, dict):
        return _first_values(value, set())
    if isinstance(value, list) and any(isinstance(v, dict) for v in value):
        return [_first_value(v) for v in value]
    return value
