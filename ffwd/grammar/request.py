"""Per-model grammar state and the per-request entry point.

``RequestGrammars(tokenizer, template, fmt, vocab_size, eos_ids)`` is built
once per loaded model (llguidance's tokenizer view costs ~0.3 s); its
``for_request(tools, tool_choice, parallel=True, response_format=None)``
returns a fresh `GrammarConstraint` for one request, or None when nothing is
to be constrained (no tools called and no JSON response format). Compiled
grammars are cached per (tools, choice, parallel, response_format): agents
resend the same tools every turn.

Tool calls go unconstrained (``tools_unconstrained`` says why, and requests with
tools get no grammar) for a format in `UNCHECKED`, whose call grammar does not yet
accept every call its templates write (tests/unit/test_grammar.py finds them), and
where the call's markup cannot be cut from the template's renderings.

A request part the grammar cannot be built from raises `GrammarError`, whose
`param` is ``tools`` or ``response_format``: a bad ``response_format`` shape,
or a schema llguidance rejects, in one sentence that names its tool (or
``response_format``) and what is wrong; the grammar text goes to the debug log.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ffwd.grammar.build import (
    content_grammar,
    reasoning_free,
    response_format_rule,
    tool_grammar,
    with_reasoning,
)
from ffwd.grammar.lark import Markup
from ffwd.grammar.matcher import (
    Grammar,
    GrammarConstraint,
    GrammarError,
    compile_grammar,
    grammar_tokenizer,
    special_tokens,
)
from ffwd.grammar.skeleton import Skeleton, derive
from ffwd.templates.formats import ToolFormat, as_format
from ffwd.templates.rows import tool_choice_name
from ffwd.templates.tools import normalize_tools

CACHE_ENTRIES = 64
Reasoning = tuple[str, str, bool]  # a template's reasoning start, end; the prompt opened it
UNCHECKED = frozenset({"minimax_m3"})


class RequestGrammars:
    """Builds, validates and caches the grammars of one model's requests."""

    def __init__(
        self, tokenizer: Any, template: str, fmt: ToolFormat | str | None, vocab_size: int,
        eos_ids: Iterable[int],
    ) -> None:
        self.tokenizer = tokenizer
        self.template = template
        self.format = as_format(fmt) if fmt is not None else None  # None: no tool calls
        self.eos_ids = tuple(sorted({int(i) for i in eos_ids}))
        self.lltok = grammar_tokenizer(tokenizer, vocab_size, self.eos_ids)
        self.markup = Markup(special_tokens(tokenizer, self.lltok))
        self._skeleton: Skeleton | None = None
        self._cache: OrderedDict[str, Grammar] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def tools_unconstrained(self) -> str | None:
        """Why tool calls get no grammar with this format, or None."""
        if self.format is None:
            return None
        if self.format.name in UNCHECKED:
            return f"the {self.format.name} call grammar is not yet checked against its templates"
        try:
            _ = self.skeleton
        except ValueError as exc:
            return f"the call markup cannot be cut from the chat template ({exc})"
        return None

    @property
    def skeleton(self) -> Skeleton:
        if self.format is None:
            raise GrammarError("this model takes no tool calls", "tools")
        if self._skeleton is None:
            eos_texts = [self.tokenizer.decode([i]) for i in self.eos_ids]
            self._skeleton = derive(self.template, self.format, eos_texts, self.tokenizer)
        return self._skeleton

    def for_request(
        self,
        tools: Sequence[Mapping[str, Any]] | None,
        tool_choice: object = "auto",
        *,
        parallel: bool = True,
        response_format: object = None,
        reasoning: Reasoning | None = None,
    ) -> GrammarConstraint | None:
        """The request's constraint (see the module docstring), or None."""
        grammar = self.grammar(tools, tool_choice, parallel, response_format, reasoning)
        return grammar.new_constraint() if grammar is not None else None

    def grammar(
        self,
        tools: Sequence[Mapping[str, Any]] | None,
        tool_choice: object,
        parallel: bool,
        response_format: object,
        reasoning: Reasoning | None = None,
    ) -> Grammar | None:
        """The compiled grammar for these request fields, cached; None: nothing to constrain.
        `reasoning` (the template's start and end markup, and whether the prompt opened
        the block) lets the model reason before the constrained reply."""
        try:
            content = response_format_rule(response_format)
        except ValueError as exc:
            raise GrammarError(str(exc), "response_format") from None
        normalized = normalize_tools(tools) if tools else []
        choice = tool_choice_name(tool_choice, normalized) if normalized else "none"
        if choice == "none" and content is None:
            return None
        if choice != "none" and self.tools_unconstrained is not None:
            return None
        key = json.dumps([normalized, choice, parallel, response_format, reasoning],
                         sort_keys=True)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
        grammar = self._compile(normalized, choice, parallel, content, reasoning)
        with self._lock:
            self._cache[key] = grammar
            while len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return grammar

    def _lark(self, tools: Sequence[Mapping[str, Any]], choice: str, parallel: bool,
              content: str | None, reasoning: Reasoning | None = None) -> str:
        if choice == "none":
            assert content is not None
            lark = content_grammar(content)
        else:
            skeleton = self.skeleton  # a GrammarError where the model takes no tool calls
            assert self.format is not None
            if reasoning is not None:
                skeleton = replace(skeleton, lead=reasoning_free(skeleton.lead, reasoning[1]))
            lark = tool_grammar(skeleton, tools, choice, parallel, self.markup,
                                self.format.open_marker, content)
        if reasoning is None:
            return lark
        return with_reasoning(lark, self.markup, *reasoning)

    def _compile(self, tools: Sequence[Mapping[str, Any]], choice: str, parallel: bool,
                 content: str | None, reasoning: Reasoning | None = None) -> Grammar:
        """Compile; on failure, find the part to blame (a tool, or response_format)."""
        try:
            lark = self._lark(tools, choice, parallel, content, reasoning)
            return compile_grammar(lark, self.lltok, "tools: these tools' call grammar")
        except GrammarError as whole:
            if content is not None:
                compile_grammar(content_grammar(content), self.lltok,
                                "response_format: its JSON schema", "response_format")
            for tool in tools:
                name = tool["function"]["name"]
                compile_grammar(
                    self._lark([tool], "required", parallel, None), self.lltok,
                    f"tool {name!r}: its parameters schema", "tools",
                )
            raise whole
