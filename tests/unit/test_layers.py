"""The shape of the package: imports point down the layers with no circles, and every
file and function stays small enough to read (400 and 60 lines)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "ffwd"
# Each part of the house and its floor: a module may import its own part or a lower floor.
FLOORS = {
    "fill": 0, "values": 1, "config": 2, "templates": 2, "engine": 3, "grammar": 3,
    "models": 4, "serve": 5, "deploy": 6, "bench": 6, "cli": 7,
}
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60


def modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The ffwd modules `name` imports, at any depth of its code (lazy imports included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([base] if base else [])])
            targets = [base, *(f"{base}.{a.name}" for a in node.names)]
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name and target.startswith("ffwd."):
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def part(module: str) -> str:
    return module.split(".")[1]


def test_every_part_has_a_floor() -> None:
    assert {part(m) for m in modules() if m != "ffwd"} <= set(FLOORS)


def test_imports_point_down_the_layers() -> None:
    upward = [f"{a} imports {b}" for a, targets in graph().items() if a != "ffwd"
              for b in sorted(targets)
              if part(a) != part(b) and FLOORS[part(b)] >= FLOORS[part(a)]]
    assert upward == []


def strongly_connected(g: dict[str, set[str]]) -> Iterator[list[str]]:
    """Tarjan's components of `g` (iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    for root in g:
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(g.get(nxt, ())))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                yield comp


def test_no_import_circles() -> None:
    # A package's __init__ re-exporting its modules is not a circle of its own.
    g = {a: {b for b in targets if not a.startswith(b + ".")} for a, targets in graph().items()}
    assert [sorted(c) for c in strongly_connected(g) if len(c) > 1] == []


def test_the_check_sees_a_circle() -> None:
    g = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert [sorted(c) for c in strongly_connected(g) if len(c) > 1] == [["a", "b", "c"]]


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_files_and_functions_stay_small(path: Path) -> None:
    text = path.read_text()
    assert text.count("\n") <= MAX_FILE_LINES
    long = [f"{n.name}: {n.end_lineno - n.lineno + 1} lines" for n in ast.walk(ast.parse(text))
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.end_lineno
            and n.end_lineno - n.lineno + 1 > MAX_FUNCTION_LINES]
    assert long == []
