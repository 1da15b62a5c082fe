"""The real chat templates and vocabularies llama.cpp vendors, read from the
llama-cpp-python sdist that `make install` downloads
(``~/.cache/ffwd/llama/sdist/llama-cpp-python-<version>/src/vendor/llama.cpp/models``,
or under ``FFWD_CACHE_DIR``). Tests that need them skip, saying so, where it is absent.

`templates()` maps each template's file stem to its text; `tool_templates()` those that
read ``tools``; `recognized()` what `recognize` makes of each; `template_for(fmt)` a
template that writes `fmt` (its builtin, else the first in the collection);
`vocab(name)` a real vocabulary (``ggml-vocab-NAME.gguf``) as a tokenizer, loaded once.
"""

from __future__ import annotations

from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from ffwd.templates.choose import handles_tools
from ffwd.templates.formats import FORMATS, Recognized, get_format, recognize
from tools.llama_build import sdist_dir


def models_dir() -> Path | None:
    spec = f"llama-cpp-python=={metadata.version('llama-cpp-python')}"
    path = sdist_dir(spec) / "src" / "vendor" / "llama.cpp" / "models"
    return path if (path / "templates").is_dir() else None


def need_models() -> Path:
    path = models_dir()
    if path is None:
        pytest.skip("llama.cpp's template collection is absent (the llama-cpp-python sdist "
                    "that `make install` downloads into ~/.cache/ffwd/llama/sdist)")
    return path


@cache
def templates() -> dict[str, str]:
    path = models_dir()
    if path is None:
        return {}
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(path.glob("templates/*.jinja"))}


def tool_templates() -> dict[str, str]:
    """The templates that read ``tools`` or write tool calls (DeepSeek V3.1 does not read
    them: the server describes them in the system message)."""
    return {k: v for k, v in templates().items() if handles_tools(v) or "tool_calls" in v}


class Specials:
    """What a tokenizer gives every template: its BOS and EOS texts."""

    bos_token = "<s>"
    eos_token = "</s>"


@cache
def recognized() -> dict[str, Recognized]:
    return {k: recognize(v, Specials()) for k, v in tool_templates().items()}


def written_formats() -> list[str]:
    """The formats some template writes: a builtin's, or one in the collection."""
    seen = {f.format.name for f in recognized().values() if f.format is not None}
    return [f for f in FORMATS if get_format(f).builtin is not None or f in seen]


def template_for(fmt: str) -> str:
    """A template that writes `fmt`: its builtin, else the collection's first."""
    builtin = get_format(fmt).builtin
    if builtin is not None:
        return get_format(fmt).builtin_template
    need_models()
    for name, found in recognized().items():
        if found.format is not None and found.format.name == fmt:
            return tool_templates()[name]
    raise AssertionError(f"no template in the collection writes {fmt}")


@cache
def vocab(name: str) -> Any:
    from ffwd.models import load_tokenizer

    path = need_models() / f"ggml-vocab-{name}.gguf"
    return load_tokenizer(str(path))
