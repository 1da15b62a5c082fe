"""A format cut out of a template's rendering, for templates no module describes."""

from __future__ import annotations

from typing import Any

from ffwd.templates.formats.base import ToolFormat


def derive(template: str, tokenizer: Any = None) -> ToolFormat | None:
    return None
