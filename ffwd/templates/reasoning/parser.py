"""A reply's reasoning kept apart from its content and calls, as it streams.

`ReasoningParser(markup, inner, opened)` is a `ToolParser` in front of the
format's own (`inner`; None: a reply without tools, all content). A reply
that starts inside the block (`opened`: the generation prompt opened it) or
with `markup.start` is reasoning up to `markup.end`: its text comes back as
`ReasoningDelta`, its markup as nothing, whitespace around it dropped (the
templates strip it when they render reasoning back). What follows, less the
whitespace and the `resume` markup that open the answer, goes to `inner`. A
reply that starts otherwise goes to `inner` whole: reasoning is the reply's
first part or none. Text that may still be the start of a marker is held
back, as the formats' parsers hold theirs. Inside reasoning the parser's
state is `IN_REASONING`, where no template row has a rule, so rows never
fire there.

>>> from ffwd.templates.reasoning.markup import ReasoningMarkup
>>> p = ReasoningParser(ReasoningMarkup("<think>", "</think>"), None, opened=True)
>>> p.feed("\\nHm, 2+2.\\n</thi") + p.feed("nk>\\n\\nIt is 4.") + p.finish()
[ReasoningDelta(text='Hm, 2+2.'), ContentDelta(text='It is 4.')]
"""

from __future__ import annotations

from ffwd.templates.formats.base import (
    ContentDelta,
    Delta,
    ParseState,
    ReasoningDelta,
    ToolCall,
    ToolParser,
)
from ffwd.templates.formats.marker import held_suffix
from ffwd.templates.reasoning.markup import ReasoningMarkup

IN_REASONING = ParseState(where=("reasoning",))


class ReasoningParser:
    """Reasoning, then `inner`'s content and calls (module docstring)."""

    def __init__(self, markup: ReasoningMarkup, inner: ToolParser | None, opened: bool) -> None:
        self.markup = markup
        self.inner = inner
        self.phase = "reasoning" if opened else "start"  # start, reasoning, resume, answer
        self._held = ""  # text not yet read: it may start a marker
        self._said = False  # reasoning text given so far
        self._ws = ""  # whitespace inside reasoning, given once more text follows

    # --- the ToolParser protocol -----------------------------------------------
    @property
    def calls(self) -> list[ToolCall]:
        return self.inner.calls if self.inner is not None else []

    @property
    def failures(self) -> int:
        return self.inner.failures if self.inner is not None else 0

    @property
    def thinking(self) -> bool:
        """Whether the reply is inside its reasoning (its markup included)."""
        held = self._held.lstrip()
        return self.phase == "reasoning" or (
            self.phase == "start" and bool(held) and _could_be(held, self.markup.start))

    @property
    def holding(self) -> bool:
        """Whether text is held here, unread by `inner` (its state is not yet the reply's)."""
        return bool(self._held)

    @property
    def held_back(self) -> str:
        inner = self.inner.held_back if self.inner is not None else ""
        return self._held + inner

    @property
    def state(self) -> ParseState:
        if self.phase == "reasoning":
            return IN_REASONING
        return self.inner.state if self.inner is not None else ParseState(where=("text",))

    def feed(self, text: str) -> list[Delta]:
        out: list[Delta] = []
        rest: str | None = self._held + text
        self._held = ""
        while rest is not None:
            rest = self._step(rest, out)
        return out

    def finish(self, cut: bool = False) -> list[Delta]:
        out: list[Delta] = []
        held, self._held = self._held, ""
        if self.phase == "reasoning":  # held: a part of the end marker, text unless cut
            self._reason("" if cut else held.rstrip(), out)
        elif held and not (self.phase == "resume" and self.markup.resume.startswith(held)):
            self.phase = "answer"
            self._answer(held, out)
        if self.inner is not None:
            out += self.inner.finish(cut)
        return out

    # --- phases ---------------------------------------------------------------
    def _step(self, text: str, out: list[Delta]) -> str | None:
        """Read `text` in the current phase; what is left for the next one (None: all
        read or held)."""
        m = self.markup
        if self.phase == "answer":
            self._answer(text, out)
            return None
        if self.phase == "reasoning":
            return self._reasoning(text, out)
        lead = text.lstrip()
        if self.phase == "start":
            if lead.startswith(m.start):
                self.phase = "reasoning"
                return lead[len(m.start):]
            if _could_be(lead, m.start) or (m.resume and _could_be(lead, m.resume)):
                self._held = text
                return None
        if m.resume and lead.startswith(m.resume):
            self.phase = "answer"
            return lead[len(m.resume):]
        if self.phase == "resume" and (not lead or (m.resume and _could_be(lead, m.resume))):
            self._held = text
            return None
        rest = lead if self.phase == "resume" else text
        self.phase = "answer"
        return rest

    def _reasoning(self, text: str, out: list[Delta]) -> str | None:
        end = self.markup.end
        i = text.find(end)
        if i >= 0:
            self._reason(text[:i].rstrip(), out)
            self.phase = "resume"
            return text[i + len(end):]
        keep = held_suffix(text, end)
        body = text[: len(text) - keep]
        trimmed = body.rstrip()  # trailing whitespace waits: it may precede the end
        self._reason(trimmed, out)
        self._ws += body[len(trimmed):]
        self._held = text[len(body):]
        return None

    def _reason(self, text: str, out: list[Delta]) -> None:
        if not self._said:
            text, self._ws = text.lstrip(), ""
        if not text:
            return
        out.append(ReasoningDelta(self._ws + text))
        self._ws, self._said = "", True

    def _answer(self, text: str, out: list[Delta]) -> None:
        if self.inner is not None:
            out += self.inner.feed(text)
        elif text:
            out.append(ContentDelta(text))


def _could_be(text: str, marker: str) -> bool:
    """Whether `text` may still turn out to start with `marker` (it is a prefix of it)."""
    return len(text) < len(marker) and marker.startswith(text)
