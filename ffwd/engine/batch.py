"""Many sequences, one forward: the step builder behind ``--parallel N``.

Each running sequence calls `Batcher.submit(seq, ids, rows=..., split=...)` from
its own thread, where a lone backend would call its forward; the batcher puts
the ids of every sequence that is waiting into ONE forward (the `Decode`
callable: one ``llama_decode``) and hands each sequence its own rows. Nothing
else is shared: each sequence keeps its own sampler, grammar, fill session,
rewinds and cancellation, and rejected ids are cut from its cache alone.

When a step goes: as soon as every active sequence (one that has submitted
and not `leave`-d) waits, or `wait_s` after the later of the oldest
submission and the end of the last step, whichever comes first. A sequence
between two forwards (sampling, its grammar, its fill session) is waited for
briefly, a slow one not for long: a step that goes without it drops it from
the active ones until it submits again, so a sequence that stopped without
leaving costs one wait, not one per step. Counting from the last step's end
keeps sequences that just got their rows from being left behind, one step
each in turn. A lone sequence's forward goes at once.

Every step runs on the batcher's own thread (started at the first
submission). ggml's CPU backend runs a forward on an OpenMP team of the
calling thread, and each calling thread gets a team of its own: with two
teams on two cores libgomp throttles the spinning at every ggml barrier, and
a step took 29 ms instead of 10. One decoding thread keeps one team (and
torch, which loads the same runtime, samples on one thread beside it:
`ffwd.engine.llamacpp.torch_beside_llama`).
llama.cpp releases the GIL while it decodes, so the others sample meanwhile.

What goes in a step (`plan_step`):

1. every waiting whole request (a decode step, a span), oldest first, while the
   step holds at most `limit` ids;
2. prompt chunks (``split`` requests: a prefill, which reads only its last
   row) in arrival order, at most `budget` ids per step while any sequence is
   decoding (it has a forward waiting, or had one in either of the last two
   steps and has not left), so a long prompt does not freeze the other streams (up to `limit`
   when no one is);
3. sorted by sequence, which is how llama.cpp forms micro-batches (a run of
   consecutive sequences, the same number of ids from each).

`lock` is the context's lock: every other call on the context (a rewind, a
state copy) takes it too, so none runs while a forward does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

WAIT_S = 0.005  # how long a ready step waits for a sequence that is between forwards


@dataclass(frozen=True, slots=True)
class Part:
    """One sequence's ids in a step, and whether every row's logits are read (else the
    last row's only)."""

    seq: int
    ids: list[int]
    all_rows: bool


Decode = Callable[[list[Part]], list[np.ndarray]]  # one forward; each part's rows


@dataclass(frozen=True, slots=True)
class Want:
    """A waiting request as `plan_step` sees it: ids left to forward, and whether they may
    be cut into chunks over several steps (a prefill)."""

    n: int
    split: bool


def plan_step(wants: Sequence[Want], limit: int, budget: int, decoding: bool) -> list[int]:
    """The ids each request in `wants` (oldest first) forwards in the next step; 0: it waits.

    Whole requests go whole while the step holds at most `limit` ids (the oldest always
    fits: no request exceeds `limit`); prompt chunks share what is left, at most `budget`
    ids in all while a sequence is `decoding`.

    >>> plan_step([Want(1, False), Want(300, True), Want(5, False)], 64, 16, True)
    [1, 16, 5]
    >>> plan_step([Want(300, True), Want(100, True)], 64, 16, False)
    [64, 0]
    >>> plan_step([Want(60, False), Want(10, False), Want(3, False)], 64, 16, True)
    [60, 0, 3]
    """
    counts = [0] * len(wants)
    used = 0
    for i, w in enumerate(wants):
        if not w.split and (used + w.n <= limit or used == 0):
            counts[i] = w.n
            used += w.n
    room = min(limit - used, budget if decoding else limit)
    for i, w in enumerate(wants):
        if w.split and room > 0:
            counts[i] = min(w.n, room)
            room -= counts[i]
    return counts


@dataclass(eq=False, slots=True)
class _Request:
    seq: int
    ids: list[int]
    rows: bool
    split: bool
    arrived: float
    sent: int = 0  # ids forwarded so far
    steps: int = 0  # forwards it took part in
    shared: bool = False  # some of them carried other sequences
    out: np.ndarray | None = None
    error: BaseException | None = None
    done: bool = False
    finished: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True, slots=True)
class Submitted:
    """What one submission got: the rows of its last forward, how many forwards it took,
    and whether any of them carried other sequences."""

    rows: np.ndarray
    steps: int
    shared: bool


@dataclass(slots=True)
class BatchStats:
    """Forwards so far, and how many of them carried each number of sequences."""

    steps: int = 0
    by_size: dict[int, int] = field(default_factory=dict)

    def copy(self) -> BatchStats:
        return BatchStats(self.steps, dict(self.by_size))


class Batcher:
    """The steps of the sequences of one context (see the module docstring)."""

    def __init__(self, decode: Decode, *, limit: int, budget: int = 0,
                 wait_s: float = WAIT_S) -> None:
        if limit < 1:
            raise ValueError(f"limit={limit}: expected an integer >= 1")
        self.lock = threading.Lock()  # the context's: held by every call on it
        self.limit = limit
        self.budget = budget or limit
        self.wait_s = wait_s
        self._decode = decode
        self._cond = threading.Condition()
        self._pending: list[_Request] = []
        self._active: set[int] = set()
        self._last_end = 0.0
        self._decoded: list[set[int]] = [set(), set()]  # who decoded in the last two steps
        self._stats = BatchStats()
        self._thread: threading.Thread | None = None
        self._closed = False

    def close(self) -> None:
        """Stop the decoding thread (what is pending fails); the batcher takes no more."""
        with self._cond:
            self._closed = True
            for r in self._pending:
                r.error, r.done = RuntimeError("the model was closed"), True
                r.finished.set()
            self._pending = []
            self._cond.notify_all()

    # --- who runs ---------------------------------------------------------------
    def enter(self, seq: int) -> None:
        """`seq` is about to forward: steps wait for it from now on (a first submission
        enters by itself)."""
        with self._cond:
            self._active.add(seq)

    def leave(self, seq: int) -> None:
        """`seq` has no more forwards for now: the next steps do not wait for it."""
        with self._cond:
            self._active.discard(seq)
            for decoded in self._decoded:  # a run that ended decodes no more
                decoded.discard(seq)
            self._cond.notify_all()

    def others(self, seq: int) -> list[int]:
        """The active sequences besides `seq` (the next steps' likely batchmates)."""
        with self._cond:
            return sorted(self._active - {seq})

    @property
    def stats(self) -> BatchStats:
        with self._cond:
            return self._stats.copy()

    # --- forwards ---------------------------------------------------------------
    def submit(self, seq: int, ids: list[int], *, rows: bool, split: bool = False) -> Submitted:
        """Forward `ids` at the end of sequence `seq` with the steps of the others; the rows
        of every id (`rows`) or of the last only. A `split` request (a prefill) may be
        forwarded in chunks over several steps; only its last row comes back."""
        if not ids or (not split and len(ids) > self.limit):
            raise ValueError(f"a forward of {len(ids)} ids (at most {self.limit})")
        req = _Request(seq, list(ids), rows and not split, split, time.monotonic())
        with self._cond:
            if self._closed:
                raise RuntimeError("the model was closed")
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="ffwd-decode",
                                                daemon=True)
                self._thread.start()
            self._active.add(seq)
            self._pending.append(req)
            self._cond.notify_all()
        req.finished.wait()
        if req.error is not None:
            raise req.error
        assert req.out is not None
        return Submitted(req.out, req.steps, req.shared)

    def _run(self) -> None:
        """The decoding thread: each step as soon as it is ready (`_until_ready`)."""
        with self._cond:
            while not self._closed:
                wait = self._until_ready()
                if self._pending and wait <= 0:
                    self._step()
                else:
                    self._cond.wait(wait if self._pending else None)

    def _until_ready(self) -> float:
        """Seconds until the next step should go (<= 0: now). Under the condition's lock."""
        if not self._pending:
            return self.wait_s
        missing = self._active - {r.seq for r in self._pending}
        if not missing:
            return 0.0
        since = max(min(r.arrived for r in self._pending), self._last_end)
        return since + self.wait_s - time.monotonic()

    def _step(self) -> None:
        """Run one step (called under the condition's lock, released while decoding)."""
        pending = self._pending
        self._active &= {r.seq for r in pending}  # who did not come in time is not waited for
        prefilling = {r.seq for r in pending if r.split}
        decoding = any(not r.split for r in pending) or bool(
            (self._decoded[0] | self._decoded[1]) - prefilling)
        counts = plan_step([Want(len(r.ids) - r.sent, r.split) for r in pending],
                           self.limit, self.budget, decoding)
        chosen = sorted(((r, n) for r, n in zip(pending, counts, strict=True) if n),
                        key=lambda rn: rn[0].seq)
        parts = [Part(r.seq, r.ids[r.sent : r.sent + n], r.rows) for r, n in chosen]
        self._cond.release()
        outs: list[np.ndarray] = []
        error: BaseException | None = None
        try:
            with self.lock:
                outs = self._decode(parts)
        except BaseException as exc:  # each request of the step gets it
            error = exc
        finally:
            self._cond.acquire()
            self._last_end = time.monotonic()
        self._settle(chosen, outs, error)

    def _settle(self, chosen: list[tuple[_Request, int]], outs: list[np.ndarray],
                error: BaseException | None) -> None:
        """Hand each request of the step its rows (or the error); finished ones leave the line."""
        self._decoded = [self._decoded[1], {r.seq for r, _ in chosen if not r.split}]
        if error is None:
            self._stats.steps += 1
            size = len(chosen)
            self._stats.by_size[size] = self._stats.by_size.get(size, 0) + 1
        for i, (r, n) in enumerate(chosen):
            r.steps += error is None
            r.shared = r.shared or len(chosen) > 1
            if error is not None:
                r.error, r.done = error, True
            else:
                r.sent += n
                r.out = outs[i]
                r.done = r.sent == len(r.ids)
            if r.done:
                r.finished.set()
        self._pending = [r for r in self._pending if not r.done]
