"""The text layer of one generation: ids to text, stop strings, tool calls, the reply.

`OutputText.feed(event)` takes each `TokenEvent` from the decode loop and
returns it with its text filled in: the id's own text and bytes, the output
text it released, and that text parsed into reasoning, content and tool-call
deltas by the request's one parser (`ToolCalls`; behind a
`ffwd.templates.reasoning.parser.ReasoningParser` where the template reasons,
`Thinking`). It also decides the text-level stops:
a stop string (the text ends before it), the calls a request may make
(`ToolCalls.max_calls`: one for ``parallel_tool_calls: false`` or a named
tool choice), and a call that repeats an earlier one (dropped,
`ffwd.templates.formats.repeats`). The reply is the join of the deltas it
sent, so a streamed reply and a whole one are the same by construction.

The same parser gates the request's template rows: `OutputText` is the fill
session's `StrictFillContext`, and a row fires only where the parser stands
where the row's rendering had it (`allows`). The decode loop yields each id
before it pushes it to the session, so the parser has read an id by the time
the session asks about what follows it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ffwd.engine.events import PromptRead, TokenEvent, TokenOrigin
from ffwd.fill import FillRow
from ffwd.templates.formats import ToolFormat
from ffwd.templates.formats.base import (
    ContentDelta,
    Delta,
    ParseState,
    ReasoningDelta,
    Rule,
    ToolCall,
    ToolParser,
)
from ffwd.templates.formats.repeats import RepeatFilter
from ffwd.templates.reasoning import ReasoningMarkup
from ffwd.templates.reasoning.parser import ReasoningParser
from ffwd.templates.text import Detokenizer, token_text


class StopMatcher:
    """Finds stop strings in streamed text, holding back what could start one."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self._pending = ""

    @property
    def holding(self) -> bool:
        return bool(self._pending)

    def feed(self, delta: str) -> tuple[str, str | None]:
        """Text safe to release, and the stop string that matched (the text ends before it)."""
        if not self.stops:
            return delta, None
        buf = self._pending + delta
        hits = [(i, s) for s in self.stops if (i := buf.find(s)) >= 0]
        if hits:
            self._pending = ""
            at, stop = min(hits)
            return buf[:at], stop
        keep = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(buf)), keep, -1):
                if buf.endswith(s[:k]):
                    keep = k
                    break
        self._pending = buf[len(buf) - keep :]
        return buf[: len(buf) - keep], None

    def flush(self) -> str:
        out, self._pending = self._pending, ""
        return out


@dataclass(frozen=True)
class ToolCalls:
    """How a generation's tool calls are read: `format`'s parser over the `tools` shown,
    the `rules` that gate the plan's template rows on that parser, and at most
    `max_calls` complete calls (None: any number)."""

    format: ToolFormat
    tools: Sequence[Mapping[str, Any]] = ()
    rules: Mapping[FillRow, Sequence[Rule]] = field(default_factory=dict)
    max_calls: int | None = None


@dataclass(frozen=True)
class Thinking:
    """How a generation's reasoning is read: the template's `markup`, and whether the
    prompt `opened` the block (the reply starts as reasoning)."""

    markup: ReasoningMarkup
    opened: bool = False


class OutputText:
    """One generation's output as text, deltas and the joined reply, and the context
    that gates its template rows (module docstring)."""

    def __init__(
        self, tokenizer: Any, stop: Sequence[str] = (), calls: ToolCalls | None = None,
        thinking: Thinking | None = None,
    ) -> None:
        inner = calls.format.new_parser(calls.tools) if calls is not None else None
        self.reasoning = (ReasoningParser(thinking.markup, inner, thinking.opened)
                          if thinking is not None else None)
        self.parser: ToolParser | None = inner if self.reasoning is None else self.reasoning
        self.reasoning_tokens = 0  # ids that wrote reasoning (its markup included)
        self.rules = calls.rules if calls is not None else {}
        self.max_calls = calls.max_calls if calls is not None else None
        self.stop_sequence: str | None = None  # the stop string that ended the text
        self.failed = False  # the last feed or finish met markup that did not parse
        self.ids: list[int] = []  # every id fed, in order
        self.origins: list[TokenOrigin] = []
        self.repeats = RepeatFilter()
        self._tokens = token_text(tokenizer)
        self._detok = Detokenizer(tokenizer, self._tokens)
        self._stops = StopMatcher(stop)
        self._text: list[str] = []
        self._content: list[str] = []
        self._reasoning: list[str] = []
        self._calls: dict[int, list[str]] = {}  # index -> [name, argument fragments...]
        self._state: ParseState | None = None  # the parser's, read once per step

    @property
    def ready(self) -> bool:
        """Whether the parser has read every id emitted so far (nothing held back)."""
        thinking = self.reasoning is not None and self.reasoning.holding
        return not (self._detok.pending or self._stops.holding or thinking)

    @property
    def text(self) -> str:
        return "".join(self._text)

    @property
    def content(self) -> str:
        return "".join(self._content)

    @property
    def reasoning_text(self) -> str:
        return "".join(self._reasoning)

    @property
    def calls(self) -> list[ToolCall]:
        """The calls the deltas named, arguments as sent (a cut call's are partial)."""
        return [ToolCall(parts[0], "".join(parts[1:])) for _, parts in sorted(self._calls.items())]

    @property
    def complete_calls(self) -> int:
        """Calls whose markup is complete (a cut call is not)."""
        return len(self.parser.calls) if self.parser is not None else 0

    @property
    def calls_done(self) -> bool:
        """No more calls may follow: the request's are all made (``parallel_tool_calls:
        false``: one), or the last repeated an earlier one."""
        made = self.max_calls is not None and self.complete_calls >= self.max_calls
        return made or self.repeats.repeated

    def feed(self, event: TokenEvent, prompt: PromptRead | None = None) -> TokenEvent:
        """`event`, its token text, released text and deltas filled in (and `prompt`, on
        the first)."""
        self.failed = False
        self.ids.append(event.id)
        self.origins.append(event.origin)
        event.token, event.raw = self._tokens(event.id)
        if event.top:
            event.top = tuple(replace(a, token=t, raw=r) for a in event.top
                              for t, r in (self._tokens(a.id),))
        thinking = self.reasoning is not None and self.reasoning.thinking
        released, self.stop_sequence = self._stops.feed(self._detok.feed([event.id]))
        event.text, event.deltas, event.prompt = released, self._read(released), prompt
        if thinking or (self.reasoning is not None and self.reasoning.thinking):
            self.reasoning_tokens += 1
        return event

    def finish(self, cut: bool) -> tuple[str, tuple[Delta, ...]]:
        """The text held back until the end of the output, and its deltas. `cut`: the
        output stopped before the model ended it (max_tokens, a stop string, the client),
        so an unfinished call is left as its deltas sent it, not returned as content."""
        self.failed = False
        tail = ""
        if self.stop_sequence is None:
            tail, self.stop_sequence = self._stops.feed(self._detok.flush())
            if self.stop_sequence is None:
                tail += self._stops.flush()
        deltas = self._read(tail)
        if self.parser is not None:
            deltas += self._parse(lambda parser: parser.finish(cut))
            deltas += self._join(self.repeats.release())  # a cut call, as it was written
        return tail, deltas

    # --- the StrictFillContext of the request's template rows ------------------
    def observe(self, ids: Sequence[int]) -> None:
        """Nothing to do: the parser has read these ids through `feed` already."""

    def allows(self, row: FillRow) -> bool:
        """Whether `row` may fire now: one of its rules holds for the parser's state, and
        the parser has read every id emitted so far (nothing held back)."""
        rules = self.rules.get(row, ())
        if not rules or self.parser is None or not self.ready:
            return False
        if self._state is None:
            self._state = self.parser.state
        return any(rule.holds(self._state) for rule in rules)

    def _read(self, text: str) -> tuple[Delta, ...]:
        if not text:
            return ()
        self._text.append(text)
        if self.parser is None:
            return self._join([ContentDelta(text)])
        return self._parse(lambda parser: parser.feed(text))

    def _parse(self, step: Callable[[ToolParser], list[Delta]]) -> tuple[Delta, ...]:
        """The deltas of one parser `step`, without repeated calls; a parse failure noted."""
        assert self.parser is not None
        calls, failures = len(self.parser.calls), self.parser.failures
        deltas = self.repeats.feed(step(self.parser), len(self.parser.calls) - calls)
        self.failed |= self.parser.failures > failures
        self._state = None
        return self._join(deltas)

    def _join(self, deltas: Sequence[Delta]) -> tuple[Delta, ...]:
        for d in deltas:
            if isinstance(d, ContentDelta):
                self._content.append(d.text)
            elif isinstance(d, ReasoningDelta):
                self._reasoning.append(d.text)
            elif d.index not in self._calls:
                self._calls[d.index] = [d.name or "", d.arguments]
            else:
                self._calls[d.index].append(d.arguments)
        return tuple(d for d in deltas if not isinstance(d, ContentDelta | ReasoningDelta)
                     or d.text)
