"""JSONL proposal trace: one record per proposal, next to what the model said.

`actual[j]` is the model's own choice at span position j (j=0: after the
sampled id; j>0: after proposed[j-1]), for the positions that were forwarded.
For assert spans this readback exists only for the trace; the served path
never needs it. `decision` says what the span policy did with a verify
proposal (``declined`` ones forward nothing, so their `actual` is empty).

The decode loop holds a `TraceWriter` or None; with tracing off it builds no
record at all, so the cost when off is one `is None` test per proposal.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO


@dataclass(slots=True)
class TraceRecord:
    origin: str
    policy: str
    generated: int  # ids generated before this proposal
    proposed: list[int]
    actual: list[int]
    accepted: int
    proposed_text: str | None = None
    actual_text: str | None = None
    # What the span policy decided: assert | combined | probe | declined | unsupported,
    # how many ids it forwarded, and the expected ids and ms it weighed: `expected_ms` is
    # the price of the plan's forwards (the sampled id and `chosen` ids together, at the
    # cache's depth, on the measured cost surface times its running level), `plain_ms`
    # a plain one-id step's on the same scale (declining wins unless ids per ms beat it).
    decision: str = "assert"
    run: int = 0  # a copy's evidence: ids before the span that match the copied passage
    chosen: int = 0
    expected_ids: float | None = None
    expected_ms: float | None = None
    plain_ms: float | None = None
    ts: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="milliseconds"))

    @property
    def proposed_len(self) -> int:
        return len(self.proposed)

    @property
    def first_mismatch(self) -> int:
        """Index of the first position where the model disagreed, or -1."""
        return first_mismatch(self.proposed, self.actual)

    def to_json(self) -> str:
        d = asdict(self)
        d["proposed_len"] = self.proposed_len
        d["first_mismatch"] = self.first_mismatch
        order = (
            "ts", "origin", "policy", "decision", "generated", "run", "proposed_len", "chosen",
            "accepted", "first_mismatch", "expected_ids", "expected_ms", "plain_ms", "proposed",
            "actual", "proposed_text", "actual_text",
        )
        return json.dumps({k: d[k] for k in order}, ensure_ascii=False)


def first_mismatch(proposed: Sequence[int], actual: Sequence[int]) -> int:
    """First index where the two runs differ (a missing position differs), or -1.

    >>> first_mismatch([1, 2, 3], [1, 2, 4])
    2
    >>> first_mismatch([1, 2], [1, 2])
    -1
    """
    for i, p in enumerate(proposed):
        if i >= len(actual) or actual[i] != p:
            return i
    return -1


class TraceWriter:
    """Append-only, line-buffered JSONL writer, safe to share between threads."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh: IO[str] | None = self.path.open("a", encoding="utf-8", buffering=1)
        self._lock = threading.Lock()

    def write(self, record: TraceRecord) -> None:
        line = record.to_json() + "\n"
        with self._lock:
            if self._fh is None:
                raise ValueError(f"trace {self.path} is closed")
            self._fh.write(line)

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_trace(path: str | Path) -> list[dict[str, object]]:
    """All records of a trace file, in order."""
    with Path(path).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]
