"""What every tool-call format shares: calls, deltas, parse state, layouts,
and the `StrictFillContext` built on a parser.

A format module supplies an incremental parser (``feed(text) -> deltas``,
``finish() -> deltas``, ``calls``, ``held_back``, ``state``; most build on
`ffwd.templates.formats.marker.MarkerParser`) and a
``locate`` function that finds the parts of one rendered call (marker, name,
argument keys and values, the character that commits to closing the call) so
that `ffwd.templates.rows` can slice rows out of whole renderings.

Deltas: `ContentDelta(text)` for text outside calls (including markup that
did not parse), `ReasoningDelta(text)` for the model's reasoning (written by
`ffwd.templates.reasoning`'s parser in front of the format's),
`ToolCallDelta(index, name, arguments)`, where the first
delta of call `index` carries its name and later ones carry fragments of its
JSON arguments. Concatenating the fragments gives ``calls[index].arguments``.
A call that turns out malformed after its first delta is not added to
``calls``; its raw text comes back as a `ContentDelta`. Whitespace between or
after calls counts as markup. ``held_back`` is the trailing text a streaming
server should not send yet: it may be the start of a call's marker.

The context (`ToolCallContext`) lets a row fire only when one of its rules
holds for the parser's `ParseState`; the parser is the one that reads the
reply (shared with the text layer), or its own for model-free replay.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ffwd.fill import FillRow
from ffwd.templates.builtin import builtin_template
from ffwd.templates.text import Detokenizer


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A finished call: the function name and its arguments as JSON text."""

    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ContentDelta:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """Text of the model's reasoning (`ffwd.templates.reasoning`): never content."""

    text: str


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    index: int
    name: str | None = None
    arguments: str = ""


Delta = ContentDelta | ReasoningDelta | ToolCallDelta


@dataclass(frozen=True, slots=True)
class ParseState:
    """Where a parser stands, as far as template rows care.

    `where` is the structural position (parser specific, compared exactly);
    `tool` the name of the call being parsed once complete; `name` the name
    text written so far (only while the name is being written or right after
    it); `key` the argument key being written (until its value starts);
    `used` the argument keys of this call written before `key`.
    """

    where: tuple[object, ...]
    tool: str | None = None
    name: str | None = None
    key: str | None = None
    used: tuple[str, ...] = ()


class ToolParser(Protocol):
    @property
    def calls(self) -> list[ToolCall]: ...

    @property
    def failures(self) -> int:
        """Markup that did not parse so far (its text came back as content)."""
        ...

    def feed(self, text: str) -> list[Delta]: ...

    def finish(self, cut: bool = False) -> list[Delta]:
        """Deltas at the end; `cut` drops an unfinished call (see `MarkerParser.finish`)."""
        ...

    @property
    def held_back(self) -> str:
        """Trailing text not yet returned because it may start a marker."""
        ...

    @property
    def state(self) -> ParseState: ...


# --- layouts ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArgLayout:
    """One rendered argument: character spans of its key and value.

    `lead` is the character that commits to *another* argument following the
    previous one (JSON: the comma; -1 for the first argument). `delimiter` is
    the character whose token ends the value (JSON strings: the closing
    quote), `end` the character that commits to the value being over (XML:
    the slash of ``</parameter>``); None where the format has none.
    """

    key: str
    key_span: tuple[int, int]
    value_span: tuple[int, int]
    lead: int = -1
    delimiter: int | None = None
    end: int | None = None


@dataclass(frozen=True, slots=True)
class CallLayout:
    """One rendered call: the opening marker, the name, the arguments,
    `close`, the character that commits to the arguments being complete, and
    `after`, where the arguments' text ends (JSON: after the closing brace;
    pairs: where the call's closing markup starts), and `varying`, the spans
    of its markup that differ from call to call (Kimi's call index, Mistral's
    call id): no row reaches into them."""

    open: tuple[int, int]
    name: tuple[int, int]
    args: tuple[ArgLayout, ...]
    close: int
    after: int = -1
    varying: tuple[tuple[int, int], ...] = ()

    @property
    def args_end(self) -> int:
        return self.after if self.after >= 0 else self.close + 1


Locate = Callable[[str, int, str, Mapping[str, Any]], "CallLayout | None"]


@dataclass(frozen=True)
class ToolFormat:
    """A tool-call format: its parser, its layout, how its arguments are written.

    `arguments` tells the grammar how one call's arguments are written: ``json``
    (one JSON object), ``pairs`` (key/value markup, values as text; the markup
    is cut from the template's renderings) or a format's own (``gemma``).
    `builtin` names a template shipped for models whose own has no tools;
    `models` says which model families write the format."""

    name: str
    open_marker: str  # what starts the calls; "" means: a call is the whole message
    parser: Callable[[Sequence[Mapping[str, Any]] | None], ToolParser]
    locate: Locate
    arguments: str = "json"
    parallel: bool = True  # can one assistant message carry several calls?
    builtin: str | None = None  # file name in templates/builtin/ (without .jinja)
    models: str = ""

    @property
    def builtin_template(self) -> str:
        if self.builtin is None:
            raise ValueError(f"no builtin template writes the {self.name} format")
        return builtin_template(self.builtin)

    def new_parser(self, tools: Sequence[Mapping[str, Any]] | None = None) -> ToolParser:
        """A fresh incremental parser (`tools` lets XML values get their JSON types)."""
        return self.parser(tools)

    def new_context(
        self, tokenizer: Any, rules: Mapping[FillRow, Sequence[Rule]] | None = None
    ) -> ToolCallContext:
        """A standalone `StrictFillContext`: it decodes the ids it observes itself."""
        return ToolCallContext(rules or {}, self.new_parser(), detokenizer=Detokenizer(tokenizer))


# --- rules: when may a row fire? ----------------------------------------------


class Rule(Protocol):
    def holds(self, state: ParseState) -> bool: ...


@dataclass(frozen=True, slots=True)
class AtPosition:
    """Template markup: the parser is exactly where the rendering had it."""

    where: tuple[object, ...]

    def holds(self, state: ParseState) -> bool:
        return state.where == self.where


@dataclass(frozen=True, slots=True)
class NameSoFar:
    """A name row: the function name written so far is exactly `text`."""

    text: str

    def holds(self, state: ParseState) -> bool:
        return state.name == self.text


@dataclass(frozen=True, slots=True)
class KeySoFar:
    """A key row: calling `tool`, writing key prefix `text` of unused `key`,
    and every other key with the same token prefix (`rivals`) is used."""

    tool: str
    key: str
    text: str
    rivals: frozenset[str] = frozenset()

    def holds(self, state: ParseState) -> bool:
        return (
            state.tool == self.tool
            and state.key == self.text
            and self.key not in state.used
            and self.rivals.issubset(state.used)
        )


@dataclass(frozen=True, slots=True)
class OnlyKeyLeft:
    """After a committing separator: `key` is the one key of `tool` not yet used."""

    where: tuple[object, ...]
    tool: str
    key: str
    others: frozenset[str]

    def holds(self, state: ParseState) -> bool:
        return (
            state.where == self.where
            and state.tool == self.tool
            and self.key not in state.used
            and self.others.issubset(state.used)
        )


@dataclass(frozen=True, slots=True)
class AllKeysUsed:
    """At `where` in a call of `tool` whose every key is written."""

    where: tuple[object, ...]
    tool: str
    keys: frozenset[str]

    def holds(self, state: ParseState) -> bool:
        if state.where != self.where or state.tool != self.tool:
            return False
        done = set(state.used)
        if state.key is not None:
            done.add(state.key)
        return self.keys.issubset(done)


# --- the gate of template rows ---------------------------------------------------


class ToolCallContext:
    """`StrictFillContext` for one request, standalone (`ToolFormat.new_context`:
    model-free replay, tests): it decodes every id it observes and feeds its own
    parser. A row fires only where one of its rules holds for the parser's state,
    and only once the parser has read every id observed (`ready`: no character
    held back by the detokenizer). In a generation the text layer plays this part
    with the parser that reads the reply (`ffwd.engine.sample.text.OutputText`).
    """

    def __init__(
        self,
        rules: Mapping[FillRow, Sequence[Rule]],
        parser: ToolParser,
        detokenizer: Detokenizer | None = None,
    ) -> None:
        self.parser = parser
        self._rules = rules
        self._detok = detokenizer
        self._state: ParseState | None = None

    def observe(self, ids: Sequence[int]) -> None:
        if self._detok is not None:
            text = self._detok.feed(ids)
            if text:
                self.parser.feed(text)
        self._state = None  # the parser has read more (here, or in the text layer)

    @property
    def ready(self) -> bool:
        return self._detok is None or not self._detok.pending

    @property
    def state(self) -> ParseState:
        if self._state is None:
            self._state = self.parser.state
        return self._state

    def allows(self, row: FillRow) -> bool:
        rules = self._rules.get(row, ())
        return bool(rules) and self.ready and any(rule.holds(self.state) for rule in rules)
