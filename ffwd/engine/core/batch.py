"""What one step forwards: every running sequence's ids in one forward (``--parallel N``).

A sequence asks for its next forward with a `Forward`: the ids to append at
the end of its cache, whether every row's logits are read (a verify span) or
the last row's only (a decode step, an assert span), and whether it is a
prompt, which may be cut into chunks over several steps. `plan_step` decides
what of each goes in the next step; the step is a list of `Part`s, one per
sequence, sorted by sequence (how llama.cpp forms micro-batches: the same
number of ids from each of a run of consecutive sequences), and the context
runs it as one forward (`ffwd.engine.backend.Context.decode`).

What goes in a step (`plan_step`):

1. every whole forward (a decode step, a span), oldest first, while the step
   holds at most `limit` ids (the oldest always goes);
2. prompt chunks in arrival order, at most `budget` ids in all while any
   sequence decodes in the step, so a long prompt does not freeze the other
   streams (up to `limit` when no one does).

`BatchStats` counts the forwards by how many sequences each carried.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Forward:
    """What a sequence asks of the next step: `ids` appended at the end of its cache,
    the logits of every row (`rows`) or of the last only; a `prompt` may be forwarded in
    chunks over several steps, and only its last row comes back."""

    ids: list[int]
    rows: bool = False
    prompt: bool = False


@dataclass(frozen=True, slots=True)
class Part:
    """One sequence's ids in a step, and whether every row's logits are read (else the
    last row's only)."""

    seq: int
    ids: list[int]
    all_rows: bool


@dataclass(frozen=True, slots=True)
class Want:
    """A waiting forward as `plan_step` sees it: ids left to forward, and whether they may
    be cut into chunks over several steps (a prompt)."""

    n: int
    split: bool


def plan_step(wants: Sequence[Want], limit: int, budget: int) -> list[int]:
    """The ids each forward in `wants` (oldest first) takes in the next step; 0: it waits.

    Whole forwards go whole while the step holds at most `limit` ids (the oldest always
    fits: no whole forward exceeds `limit`); prompt chunks share what is left, at most
    `budget` ids in all when the step decodes anything.

    >>> plan_step([Want(1, False), Want(300, True), Want(5, False)], 64, 16)
    [1, 16, 5]
    >>> plan_step([Want(300, True), Want(100, True)], 64, 16)
    [64, 0]
    >>> plan_step([Want(60, False), Want(10, False), Want(3, False)], 64, 16)
    [60, 0, 3]
    """
    counts = [0] * len(wants)
    used = 0
    for i, w in enumerate(wants):
        if not w.split and (used + w.n <= limit or used == 0):
            counts[i] = w.n
            used += w.n
    room = min(limit - used, budget if used else limit)
    for i, w in enumerate(wants):
        if w.split and room > 0:
            counts[i] = min(w.n, room)
            room -= counts[i]
    return counts


@dataclass(slots=True)
class BatchStats:
    """Forwards so far, and how many of them carried each number of sequences."""

    steps: int = 0
    by_size: dict[int, int] = field(default_factory=dict)

    def count(self, sequences: int) -> None:
        """One more forward, of `sequences` sequences."""
        self.steps += 1
        self.by_size[sequences] = self.by_size.get(sequences, 0) + 1

    def copy(self) -> BatchStats:
        return BatchStats(self.steps, dict(self.by_size))
