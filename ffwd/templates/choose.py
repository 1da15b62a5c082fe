"""Which chat template a model is served with, and which tool-call format it writes.

``resolve_template(tokenizer, fmt=None, override=None) -> Resolved``
    The template: `override` (``--chat-template FILE``), else the model's own
    (its ``tool_use`` variant when it has one). Its format is recognised from
    its own rendering (`ffwd.templates.formats.recognize`). A model whose
    template neither reads ``tools`` nor writes calls gets the builtin template
    of `fmt` (hermes by default; Gemma's turn markup where the vocabulary has it). `fmt` names the
    format to use: a template that writes another gets that format's builtin.
    A template whose calls no format reads serves plain chat: `format` is
    None and `note` says why.
``encode_prompt(tokenizer, prompt, raw=False, fmt=None) -> list[int]``
    One user turn as the server renders it (``ffwd generate``), or raw text.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ffwd.templates.builtin import builtin_template
from ffwd.templates.formats import FORMATS, ToolFormat, get_format, recognize
from ffwd.templates.render import encode_chat, handles_tools

DEFAULT_FORMAT = "hermes"


@dataclass(frozen=True)
class Resolved:
    """The template a model is served with, its format (None: plain chat), and what
    was decided and why (said at start-up and by ``ffwd info``)."""

    template: str
    format: ToolFormat | None
    note: str = ""

    @property
    def format_name(self) -> str | None:
        return self.format.name if self.format is not None else None


def model_template(tokenizer: Any) -> str | None:
    """The tokenizer's own chat template (its ``tool_use`` variant when named)."""
    tpl = getattr(tokenizer, "chat_template", None)
    if isinstance(tpl, Mapping):
        tpl = tpl.get("tool_use") or tpl.get("default")
    return tpl if isinstance(tpl, str) and tpl.strip() else None


def resolve_template(
    tokenizer: Any, fmt: str | None = None, override: str | None = None
) -> Resolved:
    """The template and format for this tokenizer (see the module docstring)."""
    if fmt is not None:
        get_format(fmt)  # a ValueError naming the formats
    own = override if override is not None else model_template(tokenizer)
    found = recognize(own, tokenizer) if own is not None else None
    if own is not None and found is not None and (handles_tools(own) or found.format):
        if found.format is not None and fmt in (None, found.format.name):
            return Resolved(own, found.format, f"tool calls: {found.format.name} ({found.how} "
                                               "from the chat template)")
        if found.format is None and fmt is None:
            return Resolved(own, None, f"tool calls are off: {found.how}; name a format with "
                                       f"--tool-format ({', '.join(FORMATS)})")
    if override is not None and fmt is None:
        return Resolved(override, None, "tool calls are off: the chat template reads no tools")
    name = fmt or DEFAULT_FORMAT
    chosen = get_format(name)
    if chosen.builtin is None:
        raise ValueError(f"no builtin template writes the {name} format and the model's "
                         f"does not: pass a chat template that writes it (--chat-template)")
    if name == "hermes" and _single_token(tokenizer, "<start_of_turn>"):
        return Resolved(builtin_template("gemma"), chosen, "tool calls: hermes (builtin template, "
                                                           "Gemma turns)")
    return Resolved(chosen.builtin_template, chosen, f"tool calls: {name} (builtin template)")


def encode_prompt(
    tokenizer: Any, prompt: str, raw: bool = False, fmt: str | None = None,
    override: str | None = None,
) -> list[int]:
    """One prompt as ids: `prompt` as a user turn rendered exactly as the server renders
    it (the template `resolve_template` picks for `fmt` and `override`), or, when `raw`,
    as it is."""
    if raw:
        return [int(i) for i in tokenizer.encode(prompt, add_special_tokens=False)]
    template = resolve_template(tokenizer, fmt, override).template
    return encode_chat(tokenizer, template, [{"role": "user", "content": prompt}])


def _single_token(tokenizer: Any, text: str) -> bool:
    try:
        return len(tokenizer.encode(text, add_special_tokens=False)) == 1
    except (AttributeError, TypeError):
        return False
