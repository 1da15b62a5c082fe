"""Strict rows: template and schema ids that follow a trigger, as an ``assert`` source.

`FillRow` (a trigger and the ids that follow it, sliced out of whole template
renderings by `ffwd.templates.rows`), the `StrictFillContext` that gates rows on
the tool-call parser's state, and `StrictRowSource`, which buckets rows by the
trigger's last id: the longest trigger wins, plan order breaks ties. Re-exported
by `ffwd.fill.session`, where `FillPlan` gathers a request's rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from ffwd.fill.proposal import Proposal, ProposalOrigin, TokenView

FillKind = Literal["scaffold", "name", "key", "close", "turn-end"]
FILL_KINDS: tuple[FillKind, ...] = ("scaffold", "name", "key", "close", "turn-end")


@dataclass(frozen=True, slots=True)
class FillRow:
    """When the history ends with `trigger`, the ids in `emit` follow.

    `emit` is sliced out of a whole template rendering, never encoded alone.
    A row with `requires_context` fires only when the format's
    `StrictFillContext` allows it (inside a call, outside a string, ...).
    """

    trigger: tuple[int, ...]
    emit: tuple[int, ...]
    kind: FillKind
    requires_context: bool = False

    def __post_init__(self) -> None:
        if self.kind not in FILL_KINDS:
            raise ValueError(f"fill row kind {self.kind!r}: expected one of {FILL_KINDS}")


class StrictFillContext(Protocol):
    """Parser state that decides whether a template row may fire now."""

    def observe(self, ids: Sequence[int]) -> None: ...

    def allows(self, row: FillRow) -> bool: ...


class StrictRowSource:
    """Template and schema rows as a proposal source; always ``assert``."""

    name = "strict"

    def __init__(
        self, rows: Iterable[FillRow], context: StrictFillContext | None = None
    ) -> None:
        self.context = context
        self._buckets: dict[int, list[FillRow]] = {}
        self._max_trigger = 1
        self._enabled = True
        for row in rows:
            if not row.trigger or not row.emit:
                continue
            self._max_trigger = max(self._max_trigger, len(row.trigger))
            self._buckets.setdefault(row.trigger[-1], []).append(row)
        # Longest trigger first; sort is stable, so plan order breaks ties.
        for bucket in self._buckets.values():
            bucket.sort(key=lambda r: -len(r.trigger))

    @property
    def window_needed(self) -> int:
        return self._max_trigger

    @property
    def enabled(self) -> bool:
        return self._enabled

    def disable(self) -> None:
        self._enabled = False

    def observe(self, ids: Sequence[int]) -> None:
        if self.context is not None:
            self.context.observe(ids)

    def propose(self, view: TokenView) -> Proposal | None:
        if not self._enabled:
            return None
        tail = view.tail(self._max_trigger)
        if not tail:
            return None
        bucket = self._buckets.get(tail[-1])
        if bucket is None:
            return None
        n = len(tail)
        for row in bucket:
            t = row.trigger
            if len(t) > n or tuple(tail[n - len(t) :]) != t:
                continue
            if row.requires_context and (self.context is None or not self.context.allows(row)):
                continue
            origin: ProposalOrigin = "schema" if row.kind in ("name", "key") else "template"
            return Proposal(row.emit, "assert", origin)
        return None


