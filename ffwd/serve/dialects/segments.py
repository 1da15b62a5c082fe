"""A reply's deltas as the ordered runs that the Responses and Messages APIs send.

Both APIs cut a reply into a list of parts (Responses: output items; Messages:
content blocks): a run of reasoning, a run of text, or one tool call.
`Segmenter` turns the generation's deltas (`ReasoningDelta`, `ContentDelta`,
`ToolCallDelta`) into those runs, in the order they came (reasoning usually
first; a run of reasoning after text is a run of its own), and
tells its caller, step by step, when a run opens, grows and closes, so a
dialect writes its stream events from the steps and its whole body from the
finished runs. Both come from the same steps, so a streamed reply and a whole
one are the same.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

from ffwd.templates.formats.base import ContentDelta, Delta, ReasoningDelta

StepKind = Literal["open", "delta", "close"]
SegmentKind = Literal["reasoning", "text", "call"]


@dataclass(eq=False)
class Segment:
    """One run: `text` is the reasoning or the content, or the call's JSON arguments so
    far."""

    kind: SegmentKind
    position: int  # its place among the reply's runs
    index: int = -1  # the call's index in the generation (calls only)
    name: str = ""
    text: str = ""
    cut: bool = False  # the generation ended inside it (max_tokens)

    def arguments(self) -> dict[str, Any]:
        """The call's arguments as an object ({} while they are not valid JSON)."""
        try:
            value = json.loads(self.text or "{}")
        except json.JSONDecodeError:
            return {}
        return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class Step:
    kind: StepKind
    segment: Segment
    text: str = ""  # what a delta step added


class Segmenter:
    """The runs of one reply (see the module docstring)."""

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self.current: Segment | None = None

    def feed(self, deltas: Iterable[Delta]) -> Iterator[Step]:
        for d in deltas:
            if isinstance(d, ContentDelta | ReasoningDelta):
                if not d.text:
                    continue
                kind: SegmentKind = "text" if isinstance(d, ContentDelta) else "reasoning"
                if self.current is None or self.current.kind != kind:
                    yield from self._open(Segment(kind, len(self.segments)))
                piece = d.text
            else:
                cur = self.current
                if cur is None or cur.kind != "call" or cur.index != d.index:
                    yield from self._open(
                        Segment("call", len(self.segments), d.index, d.name or ""))
                piece = d.arguments
            if piece:
                assert self.current is not None
                self.current.text += piece
                yield Step("delta", self.current, piece)

    def joined(self, kind: Literal["reasoning", "text"]) -> str:
        """The text of every run of `kind`, in order (the reply's reasoning or content)."""
        return "".join(s.text for s in self.segments if s.kind == kind)

    def close(self, cut: bool = False) -> Iterator[Step]:
        """Close the open run; `cut`: the generation ended inside it."""
        if self.current is not None:
            self.current.cut = cut
            yield Step("close", self.current)
            self.current = None

    def _open(self, seg: Segment) -> Iterator[Step]:
        yield from self.close()
        self.segments.append(seg)
        self.current = seg
        yield Step("open", seg)
