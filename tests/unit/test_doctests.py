"""Every docstring example in the package and in tools/ runs, so the examples stay true."""

from __future__ import annotations

import doctest
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Optional dependencies and the extra that installs each: a module that needs one
# is skipped, with that reason, where it is missing.
OPTIONAL = {"ray": "ffwd[ray]", "hypothesis": "ffwd[dev]", "jsonschema": "ffwd[dev]"}
EXAMPLE = re.compile(r"^\s*>>> ", re.MULTILINE)


def modules_with_examples() -> list[str]:
    names = []
    for path in sorted([*(ROOT / "ffwd").rglob("*.py"), *(ROOT / "tools").rglob("*.py")]):
        if EXAMPLE.search(path.read_text(encoding="utf-8")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_the_examples_are_found() -> None:
    names = modules_with_examples()
    assert "ffwd.fill.spans" in names and "ffwd.templates.rows" in names


@pytest.mark.parametrize("name", modules_with_examples())
def test_docstring_examples_pass(name: str) -> None:
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as e:
        extra = OPTIONAL.get((e.name or "").partition(".")[0])
        if extra is None:
            raise
        pytest.skip(f"{name} needs {e.name}, which {extra} installs")
    tests = doctest.DocTestFinder().find(module)
    assert sum(len(t.examples) for t in tests), f"{name}: its '>>>' lines are not doctests"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    report: list[str] = []
    for test in tests:
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
