"""Chat templates shipped for models whose own template has no tools.

``builtin_template(name) -> str`` reads ``<name>.jinja`` from this folder.
"""

from __future__ import annotations

from importlib import resources


def builtin_template(name: str) -> str:
    """The text of ``ffwd/templates/builtin/<name>.jinja``."""
    path = resources.files(__name__).joinpath(f"{name}.jinja")
    if not path.is_file():
        raise ValueError(f"no builtin template {name!r}")
    return path.read_text(encoding="utf-8")
