"""Compile a request's strict rows from whole template renderings.

Public API
----------
``compile_tools(tokenizer, template, tools, tool_choice="auto", eos_ids=(),
fmt=None, echo=None) -> CompiledTools``
    ``.plan`` is the request's `FillPlan`, ``.format`` its `ToolFormat`, and
    ``.new_context()`` returns a fresh `StrictFillContext` for one request
    (pass it to `FillSession(strict_context=...)`).
``default_eos_ids(tokenizer) -> tuple[int, ...]``
    The tokenizer's EOS id plus the single-token turn ends it knows.

How rows are found
------------------
`sentinels` renders every called tool as assistant turns with sentinel
values, tokenized whole. A row is a run of ids that every rendering of the
same position shares (`align.common`): a token that merges with a name or a
value differs between renderings and so never enters a row. A run stops
exactly where renderings part ways, which is where the next token stops being
determined, so a row carries everything its trigger determines. (The last
token of a turn that another turn follows may merge with that turn; there
only turns that really end a rendering count.)

The rows by kind: `openings` (forced opening, scaffold, name), `keys`,
`closes` (value ends, close, turn-end, delimiters). ``tool_choice="none"``
compiles no tool rows; a named function compiles only its own rows (plus the
forced scaffold, which then includes its name). Each row (but the forced
scaffold) is gated by the format's parser state (`ffwd.templates.formats.base`
rules), so a row fires only at the position its rendering had.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ffwd.fill import EchoConfig, FillPlan, FillRow
from ffwd.templates.formats import ToolFormat, as_format, recognize
from ffwd.templates.formats.base import Rule, ToolCallContext
from ffwd.templates.rows.align import common, lcp
from ffwd.templates.rows.closes import close_rows, delimiters, value_end_rows
from ffwd.templates.rows.keys import key_rows
from ffwd.templates.rows.openings import forced_rows, name_rows, scaffold_rows
from ffwd.templates.rows.sentinels import Call, Renderer
from ffwd.templates.rows.table import RowTable
from ffwd.templates.tools import normalize_tools

TURN_END_TOKENS = ("<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>")


@dataclass(frozen=True)
class CompiledTools:
    """A request's plan plus what it takes to gate its rows."""

    plan: FillPlan
    format: ToolFormat
    tokenizer: Any
    rules: Mapping[FillRow, tuple[Rule, ...]] = field(default_factory=dict)

    def new_context(self) -> ToolCallContext:
        """A fresh per-request `StrictFillContext` for this plan's rows."""
        return self.format.new_context(self.tokenizer, self.rules)


def compile_tools(
    tokenizer: Any,
    template: str,
    tools: Sequence[Mapping[str, Any]] | None,
    tool_choice: object = "auto",
    eos_ids: Iterable[int] = (),
    fmt: ToolFormat | str | None = None,
    echo: EchoConfig | None = None,
) -> CompiledTools:
    """Rows for `tools` under `tool_choice` (``auto``, ``none``, ``required``,
    or ``{"type": "function", "function": {"name": ...}}``) in format `fmt` (the
    template's own when None)."""
    normalized = normalize_tools(tools)
    fmt_obj = as_format(fmt) if fmt is not None else _recognized(template, tokenizer)
    eos = tuple(int(i) for i in eos_ids)
    choice = tool_choice_name(tool_choice, normalized)
    if choice == "none" or not normalized:
        return CompiledTools(FillPlan(echo=echo, eos=eos), fmt_obj, tokenizer)
    called = (
        normalized
        if choice in ("auto", "required")
        else [t for t in normalized if t["function"]["name"] == choice]
    )
    table = RowTable(fmt_obj, frozenset(eos))
    _build(table, Renderer(tokenizer, template, fmt_obj), called, forced=choice != "auto")
    plan = FillPlan(tuple(table.rules), echo, frozenset(table.delimiters), eos)
    return CompiledTools(plan, fmt_obj, tokenizer, {r: tuple(v) for r, v in table.rules.items()})


def _build(
    table: RowTable, renderer: Renderer, tools: Sequence[Mapping[str, Any]], forced: bool
) -> None:
    """Render the tools with sentinels, then slice each kind of row out."""
    found = renderer.renderings(tools)
    calls = found.calls
    by_tool: dict[str, list[Call]] = {}
    for c in calls:
        by_tool.setdefault(c.tool, []).append(c)
    runs = {
        name: common((c.run(c.r.tok(c.lay.name[0])) for c in cs), table.eos)
        for name, cs in by_tool.items()
    }
    shared = lcp(runs.values())  # what every tool's name run starts with
    if forced:
        forced_rows(table, calls, shared, found.prompt_tail, renderer.encode)
    scaffold_rows(table, [calls[0], *found.extras], shared)
    name_rows(table, calls[0], runs, by_tool, len(shared))
    for cs in by_tool.values():
        key_rows(table, cs, renderer.encode)
    value_end_rows(table, calls, renderer.encode)
    close_rows(table, [*calls, *found.probes, *found.trailed])
    delimiters(table, [*calls, *found.probes])


def _recognized(template: str, tokenizer: Any) -> ToolFormat:
    found = recognize(template, tokenizer)
    if found.format is None:
        raise ValueError(f"no tool-call format: {found.how}")
    return found.format


def default_eos_ids(tokenizer: Any) -> tuple[int, ...]:
    """The EOS id and the single-token turn ends the tokenizer has."""
    out: list[int] = []
    if isinstance(getattr(tokenizer, "eos_token_id", None), int):
        out.append(tokenizer.eos_token_id)
    unk = getattr(tokenizer, "unk_token_id", None)
    for text in TURN_END_TOKENS:
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) == 1 and ids[0] != unk and ids[0] not in out:
            out.append(ids[0])
    return tuple(out)


def tool_choice_name(tool_choice: object, tools: Sequence[Mapping[str, Any]]) -> str:
    """``auto``, ``none``, ``required`` or the named function's name (checked).

    >>> tool_choice_name({"type": "function", "function": {"name": "f"}}, [
    ...     {"function": {"name": "f"}}])
    'f'
    """
    names = [t["function"]["name"] for t in tools]
    if tool_choice in ("auto", "none", "required"):
        return str(tool_choice)
    fn = tool_choice.get("function") if isinstance(tool_choice, Mapping) else None
    name = fn.get("name") if isinstance(fn, Mapping) else None
    if not isinstance(name, str):
        raise ValueError(
            f"tool_choice {tool_choice!r}: expected 'auto', 'none', 'required' or "
            '{"type": "function", "function": {"name": ...}}'
        )
    if name not in names:
        raise ValueError(f"tool_choice names {name!r}, which is not among the tools {names}")
    return name


__all__ = ["CompiledTools", "compile_tools", "default_eos_ids", "tool_choice_name"]
