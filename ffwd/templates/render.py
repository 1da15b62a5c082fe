"""Render Hugging Face chat templates as llama.cpp's and transformers' renderers do.

``render_chat(template, messages, tools=None, add_generation_prompt=True,
tokenizer=None, **extra) -> str``
    Jinja with the variables templates expect (``messages``, ``tools``,
    ``add_generation_prompt``, ``bos_token``, ``eos_token`` and the other
    special tokens, ``raise_exception``, ``strftime_now``, a ``tojson`` that
    writes JSON as transformers does), in a sandbox that lets templates use
    the list and dict methods they call (Kimi's ``list.append``). ``None``
    prints as nothing, as in llama.cpp. Messages go through
    `ffwd.templates.messages`; a template that fails on what clients send
    gets the allowances it needs (null content as ``""``, Mistral's call ids,
    described tools), the first that renders, remembered per template. A
    template that still raises gives a ``ValueError`` with its first error.
    `extra` are further variables (``chat_template_kwargs``). A template that
    never reads ``tools`` gets them described in the system message.
``encode_chat(tokenizer, template, messages, tools=None, **extra) -> list[int]``
    The prompt ids: `render_chat` with the generation prompt, tokenized as a
    whole without added special tokens (the template writes its own).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import SandboxedEnvironment

from ffwd.templates.messages import LADDER, Allowances, template_messages
from ffwd.templates.tools import described, normalize_tools

SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token")
# The variables the renderer sets itself: a request's chat_template_kwargs may not.
RESERVED = frozenset({*SPECIAL_TOKENS, "messages", "tools", "add_generation_prompt",
                      "raise_exception", "strftime_now"})
_TOOLS_VAR = re.compile(r"\btools\b")
# For a template that writes calls but never reads `tools` (DeepSeek V3.1): the tools
# go to the model in a system message, as llama.cpp's server does for such templates.
TOOLS_NOTE = "You can call the following tools. Each is a JSON Schema:\n"
_RUNG: dict[int, int] = {}  # hash of a template -> the allowances it needed last


class _Generation(Extension):
    """``{% generation %}...{% endgeneration %}`` renders its body unchanged."""

    tags = {"generation"}  # noqa: RUF012 (the type is declared by jinja2.ext.Extension)

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return str(caller())


class _Sandbox(SandboxedEnvironment):
    """Jinja's sandbox, where ``+`` joins text with null or undefined as with empty text,
    as llama.cpp's renderer does (gpt-oss writes a parameter's ``default`` so, and
    clients send ``"default": null``)."""

    intercepted_binops = frozenset({"+"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "+" and (isinstance(left, str) or isinstance(right, str)):
            nothing = (type(None), jinja2.Undefined)
            if isinstance(left, nothing) or isinstance(right, nothing):
                return ("" if isinstance(left, nothing) else left) + (
                    "" if isinstance(right, nothing) else right)
        return super().call_binop(context, operator, left, right)


def _raise(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _plain(x: Any) -> Any:
    """What JSON cannot write as it is: iterables (``map``'s) as lists, undefined as null."""
    if isinstance(x, jinja2.Undefined):
        return None
    if isinstance(x, Iterable) and not isinstance(x, str | bytes | Mapping):
        return list(x)
    raise TypeError(f"Object of type {type(x).__name__} is not JSON serializable")


def _tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Jinja's own tojson escapes HTML characters; transformers' does not.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys, default=_plain)


@lru_cache(maxsize=64)
def _compile(template: str) -> jinja2.Template:
    env = _Sandbox(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols", _Generation],
        finalize=lambda x: "" if x is None else x,
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        return env.from_string(template)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(
            f"chat template does not compile: {exc.message} (line {exc.lineno})"
        ) from exc


def render_chat(
    template: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    tokenizer: Any = None,
    **extra: Any,
) -> str:
    """The prompt text for `messages` (see the module docstring)."""
    compiled = _compile(template)
    normalized = normalize_tools(tools) if tools else None
    if normalized and not handles_tools(template):
        messages = with_tools_note(messages, normalized)
    key = hash(template)
    start = _RUNG.get(key, 0)
    first: ValueError | None = None
    for rung in range(start, len(LADDER)):
        try:
            text = _render(compiled, messages, normalized, add_generation_prompt, tokenizer,
                           LADDER[rung], extra)
        except ValueError as exc:
            first = first or exc
            continue
        if rung != start:
            _RUNG[key] = rung
        return text
    assert first is not None
    raise first


def _render(
    compiled: jinja2.Template,
    messages: Sequence[Mapping[str, Any]],
    tools: list[dict[str, Any]] | None,
    add_generation_prompt: bool,
    tokenizer: Any,
    allow: Allowances,
    extra: Mapping[str, Any],
) -> str:
    variables: dict[str, Any] = {}
    for attr in SPECIAL_TOKENS:
        value = getattr(tokenizer, attr, None)
        variables[attr] = value if isinstance(value, str) else ""
    variables.update(
        messages=template_messages(messages, allow),
        tools=described(tools) if tools and allow.described else tools,
        add_generation_prompt=add_generation_prompt,
    )
    variables.update(extra)
    try:
        return compiled.render(**variables)
    except jinja2.TemplateError as exc:
        raise ValueError(f"chat template raised: {exc.message or exc}") from exc
    except (TypeError, KeyError, AttributeError, IndexError, ValueError) as exc:
        raise ValueError(f"chat template failed on these messages: {exc!r}") from exc


def handles_tools(template: str) -> bool:
    """Whether a template reads the ``tools`` variable at all."""
    return bool(_TOOLS_VAR.search(template))


def with_tools_note(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
                    ) -> list[dict[str, Any]]:
    """`messages` with the tools described in the system message (the first, made if none)."""
    note = TOOLS_NOTE + "\n".join(json.dumps(t["function"], ensure_ascii=False) for t in tools)
    out = [dict(m) for m in messages]
    if out and out[0].get("role") == "system" and isinstance(out[0].get("content"), str):
        out[0]["content"] = out[0]["content"] + "\n\n" + note
    else:
        out.insert(0, {"role": "system", "content": note})
    return out


def encode_chat(
    tokenizer: Any,
    template: str,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    **extra: Any,
) -> list[int]:
    """The prompt ids for `messages` (see the module docstring)."""
    text = render_chat(template, messages, tools, True, tokenizer, **extra)
    return [int(i) for i in tokenizer.encode(text, add_special_tokens=False)]
