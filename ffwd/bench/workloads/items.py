"""What `ffwd bench`'s workloads are made of: `Item` (one request and how to run
it) and functions' source taken from the Python standard library on this
machine (`functions`), which the echo and agent workloads quote and edit.
"""

from __future__ import annotations

import ast
import importlib.util
import textwrap
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Item:
    """One prompt of one workload row, with everything a system needs to run it."""

    workload: str  # the report row: tools/required, tools/auto, echo, prose, agent, prefill
    id: str
    messages: list[dict[str, Any]]
    max_tokens: int
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: str | dict[str, Any] | None = None  # a dict names the function to call
    single_call: bool = False  # stop once the output parses as a complete call
    kind: str = ""  # what the item exercises (echo: edit/requote; tools: category)
    # Continues the previous item's conversation: the system keeps what it cached for
    # that one (its prompt is this one's prefix) instead of starting cold.
    warm: bool = False

    @property
    def key(self) -> str:
        """Unique within a selection (a BFCL entry runs under both tool choices)."""
        return f"{self.workload} {self.id}"


@dataclass(frozen=True, slots=True)
class Function:
    module: str
    name: str
    source: str  # dedented
    node: ast.FunctionDef


def module_path(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
        raise FileNotFoundError(f"standard-library module {module!r} has no Python source here")
    return Path(spec.origin)


@cache
def functions(module: str, min_chars: int, max_chars: int) -> tuple[Function, ...]:
    """Top-level functions and class methods of `module` whose source length is in range."""
    text = module_path(module).read_text(encoding="utf-8")
    found: list[tuple[str, ast.FunctionDef]] = []
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef):
            found.append((node.name, node))
        elif isinstance(node, ast.ClassDef):
            found += [(f"{node.name}.{m.name}", m) for m in node.body
                      if isinstance(m, ast.FunctionDef)]
    out = []
    for name, node in found:
        src = ast.get_source_segment(text, node, padded=True)
        if src is None or not min_chars <= len(src) <= max_chars:
            continue
        src = textwrap.dedent(src)
        # Re-parse the dedented source so edits refer to what the model sees.
        tree = ast.parse(src).body[0]
        assert isinstance(tree, ast.FunctionDef)
        out.append(Function(module, name, src, tree))
    return tuple(out)
