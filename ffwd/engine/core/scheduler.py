"""The engine's loop: one thread steps every running sequence of a context.

Requests are data the loop owns. `Engine.submit(run)` puts a `Run` (its
prompt, how it generates on a sequence, where its events go) in the waiting
line, or raises `QueueFull` when every sequence is taken and `max_queue` runs
already wait. From then on one thread, the only one that forwards, does
everything, in iterations:

1. **admit**: while a sequence is free, the next waiting run starts on it
   (`next_run`: tenants take turns); `Slots` picks the sequence and makes its
   cache the best start, and the run's steps (`ffwd.engine.core.generate.
   stream_steps`) go as far as their first forward;
2. **plan**: every running sequence waits for one `Forward`; `plan_step`
   puts them in one step (prompt chunks within the context's budget while
   others decode);
3. **forward**: one `Context.decode` (one ``llama_decode``);
4. **settle**: each sequence whose forward is complete gets its rows and runs
   on (sampling or verify, accept or rewind, grammar, text, stops) until it
   asks for its next forward or ends;
5. **deliver**: the events of the step leave in one hand-off per `Channel`
   (the HTTP side's event loop): a streamed run's every step, a whole one's
   when it ends.

A client that leaves sets `Run.cancelled`: its generation stops after the next
id (a prompt still going in is dropped at once), and a run still waiting
leaves the line at once. A run that fails (our bug) ends with its exception
and an emptied sequence; a failed forward fails every run in it. `drain`
(after `stop_taking`, which a signal handler may call) stops the engine taking
runs for good and cuts, after a grace period, those still going (the server's
shutdown). Each run counts the forwards its sequence ran after it was cancelled.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

import torch

from ffwd.engine.backend import Backend, Context
from ffwd.engine.core.batch import BatchStats, Forward, Part, Want, plan_step
from ffwd.engine.core.decode import Steps
from ffwd.engine.core.prompt_cache import PromptCache
from ffwd.engine.core.slots import Slots
from ffwd.engine.core.turns import next_run
from ffwd.engine.events import TokenEvent

log = logging.getLogger("ffwd.engine")
Item = TokenEvent | BaseException | None  # an event, a failure, or None: the run has ended
StepsOf = Callable[[Backend, Callable[[], bool]], Steps[None]]


class Channel(Protocol):
    """Where a run's events are read (the HTTP side's event loop); equal channels are
    the same reader (one hand-off per step serves all its runs)."""

    def __hash__(self) -> int: ...

    def post(self, deliver: Callable[[], None]) -> None:
        """Call `deliver` on the reader's thread (thread-safe; never blocks)."""
        ...


class ShuttingDown(Exception):
    """The engine is draining: it takes no more runs, and cuts those still going past the
    grace period."""


@dataclass(frozen=True, slots=True)
class Drained:
    """What `Engine.drain` did: runs that finished in the grace period, runs cut after it,
    and runs refused (those waiting, and those that came while it drained)."""

    finished: int
    cut: int
    refused: int


class QueueFull(Exception):
    """Every sequence is busy and the waiting line is full."""

    def __init__(self, running: int, waiting: int, parallel: int, max_queue: int) -> None:
        super().__init__(f"{running} requests are running (--parallel {parallel}) and "
                         f"{waiting} are waiting (--max-queue {max_queue})")


@dataclass(eq=False)
class Run:
    """A request the engine owns: the `prompt` it starts from (which sequence and cache),
    its `steps` on a sequence, and where its items go (`deliver`, called through
    `channel` with the items of a step: every step when it `stream`s, else once at the
    end). The last item is always None."""

    prompt: Sequence[int]
    steps: StepsOf
    channel: Channel
    deliver: Callable[[list[Item]], None]
    stream: bool = True
    tenant: str = ""
    request_id: str = ""
    queued: float = field(default_factory=time.monotonic)
    done: threading.Event = field(default_factory=threading.Event)
    forwards_after_cancel: int = 0  # forwards of its sequence begun after `cancel`
    _cancelled: bool = False
    _wake: Callable[[Run], None] = lambda run: None

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        """Its client has gone: the loop stops it at its next step, or drops it from the
        line at once."""
        if not self._cancelled and not self.done.is_set():
            self._cancelled = True
            self._wake(self)


@dataclass(eq=False, slots=True)
class _Going:
    """A running run as the loop holds it."""

    run: Run
    seq: Backend
    steps: Steps[None]
    want: Forward | None = None  # the forward it waits for
    sent: int = 0  # ids of `want` forwarded so far (a prompt goes in chunks)
    items: list[Item] = field(default_factory=list)  # not delivered yet


class Engine:
    """The loop over the sequences of `context` (module docstring)."""

    def __init__(self, context: Context, cache: PromptCache, *, max_queue: int,
                 on_admit: Callable[[float], None] | None = None) -> None:
        if max_queue < 1:
            raise ValueError(f"max_queue={max_queue}: expected an integer >= 1")
        self.context = context
        self.slots = Slots(context.sequences, cache)
        self.max_queue = max_queue
        self._on_admit = on_admit or (lambda wait_s: None)
        self._cond = threading.Condition()  # the line: the only state other threads touch
        self._waiting: list[Run] = []
        self._dropped: list[tuple[Run, list[Item]]] = []  # left the line: their last items
        self._closed = False
        self._draining = False  # no more runs (`drain`)
        self._cut = False  # the grace period is over: end the runs still going
        self._refused = 0  # runs refused since it stopped taking them
        self._going: dict[int, _Going] = {}  # by sequence index
        self._tenants: dict[str, int] = {}  # runs going per tenant
        self._let_in: dict[str, int] = {}  # when each tenant was last let in (a count)
        self._admitted = 0
        self._claimed = 0  # sequences runs hold or are about to start on
        self._ended: list[tuple[Run, list[Item]]] = []  # ended: their last items to deliver
        self._thread: threading.Thread | None = None  # started by the first submit

    # --- what other threads call ---------------------------------------------
    @property
    def parallel(self) -> int:
        return len(self.slots)

    @property
    def depth(self) -> int:
        """Runs waiting to start."""
        return len(self._waiting)

    @property
    def active(self) -> int:
        """Runs going now."""
        return len(self._going)

    @property
    def draining(self) -> bool:
        """Whether it has stopped taking runs (`stop_taking`, `drain`): for good."""
        return self._draining

    def stop_taking(self) -> None:
        """Refuse every run submitted from now on (`ShuttingDown`); `drain` does the rest.
        One plain write, no lock: a signal handler may call it."""
        self._draining = True

    def batch_stats(self) -> BatchStats:
        """The context's forwards so far, by how many sequences each carried."""
        return self.context.batch_stats()

    def submit(self, run: Run) -> None:
        """Queue `run`; `QueueFull` when every sequence is taken and the line holds
        `max_queue` runs already."""
        with self._cond:
            if self._thread is None:  # the first run, or the first since close
                self._closed = self._cut = False
                self._thread = threading.Thread(target=self._loop, name="ffwd-engine",
                                                daemon=True)
                self._thread.start()
            if self._draining:
                self._refused += 1
                raise ShuttingDown("the server is shutting down; retry on another or later")
            if len(self._waiting) >= self.max_queue + self.parallel - self._claimed:
                raise QueueFull(len(self._going), len(self._waiting), self.parallel,
                                self.max_queue)
            run._wake = self._cancel
            self._waiting.append(run)
            self._cond.notify()

    def close(self, timeout: float = 5.0) -> None:
        """Stop the loop once the runs queued before are done (a later submit starts it
        again)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def drain(self, grace_s: float) -> Drained:
        """Take no more runs: new ones are refused (`ShuttingDown`) and the waiting ones end
        with that error; the running ones get `grace_s` seconds to finish, then each still
        going is cut, its end saying so. Blocks until every run has ended."""
        with self._cond:
            self._draining = True
            refused, self._waiting = self._waiting, []
            self._refused += len(refused)  # and those refused since `stop_taking`
            self._dropped += [(r, [ShuttingDown(
                "the server is shutting down: this request did not start; retry it"), None])
                for r in refused]
            running = self._claimed
            self._cond.notify_all()
            self._cond.wait_for(lambda: not self._claimed, timeout=grace_s)
            cut = self._claimed
            if cut:
                self._cut = True
                self._cond.notify_all()
                self._cond.wait_for(lambda: not self._claimed, timeout=5.0)
            return Drained(running - cut, cut, self._refused)

    def _cancel(self, run: Run) -> None:
        with self._cond:
            if run in self._waiting:  # its place frees now, not when the loop gets to it
                self._waiting.remove(run)
                self._dropped.append((run, [None]))
            self._cond.notify()

    # --- the loop -----------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not (self._waiting or self._going or self._dropped or self._closed):
                    self._cond.wait()
                if self._closed and not (self._waiting or self._going or self._dropped):
                    self._thread = None  # a later submit starts another
                    break
                starting = self._admit()
                dropped, self._dropped = self._dropped, []
            for run, items in dropped:
                run.done.set()
                run.channel.post(partial(run.deliver, items))
            for run in starting:  # 1. admit
                self._start(run)
            if self._going:
                self._step()
            self._deliver()

    def _admit(self) -> list[Run]:
        """The waiting runs that start now, one per free sequence (under the lock)."""
        starting: list[Run] = []
        while self._waiting and self._claimed < self.parallel:
            i = next_run([r.tenant for r in self._waiting], self._tenants, self._let_in)
            run = self._waiting.pop(i)
            self._tenants[run.tenant] = self._tenants.get(run.tenant, 0) + 1
            self._let_in[run.tenant] = self._admitted
            self._admitted += 1
            self._claimed += 1
            starting.append(run)
        return starting

    def _start(self, run: Run) -> None:
        """`run` on a free sequence, as far as its first forward."""
        self._on_admit(time.monotonic() - run.queued)
        try:
            seq = self.slots.take(run.prompt)
        except Exception as exc:
            log.exception("request %s: its cache could not be prepared", run.request_id,
                          extra={"fields": {"request_id": run.request_id}})
            self._finish(run, [], exc)
            return
        going = _Going(run, seq, run.steps(seq, lambda: run.cancelled))
        self._going[seq.seq] = going
        self.context.set_running(sorted(self._going))
        self._advance(going, None)

    def _step(self) -> None:
        """2-4: one forward of every running sequence's wants; each settles on its rows."""
        for g in list(self._going.values()):  # a prompt still going in stops at once
            if self._cut:
                self._end(g, ShuttingDown("the server is shutting down: it ended this reply "
                                          "before it was done; retry the request"))
            elif g.run.cancelled and g.want is not None and g.want.prompt:
                self._end(g)
        if not self._going:
            return
        order = sorted(self._going.values(), key=lambda g: g.run.queued)
        wants = [Want(min(len(g.want.ids) - g.sent, g.seq.prompt_chunk), True) if g.want.prompt
                 else Want(len(g.want.ids), False) for g in order if g.want is not None]
        counts = plan_step(wants, self.context.limit, self.context.budget)
        chosen = sorted(((g, n) for g, n in zip(order, counts, strict=True) if n),
                        key=lambda gn: gn[0].seq.seq)
        parts = [Part(g.seq.seq, g.want.ids[g.sent : g.sent + n], g.want.rows)
                 for g, n in chosen if g.want is not None]
        for g, _ in chosen:
            if g.run.cancelled:  # its client has gone: this forward runs for nobody
                g.run.forwards_after_cancel += 1
        try:
            rows = self.context.decode(parts)
        except Exception as exc:
            ids = [g.run.request_id for g, _ in chosen]
            log.exception("a forward of %d sequence(s) failed: requests %s", len(parts),
                          ", ".join(ids), extra={"fields": {"request_ids": ids}})
            for g, _ in chosen:
                self._end(g, exc)
            return
        for (g, n), out in zip(chosen, rows, strict=True):
            g.sent += n
            if g.want is not None and g.sent == len(g.want.ids):
                self._advance(g, out)

    def _advance(self, g: _Going, rows: torch.Tensor | None) -> None:
        """Send `rows` to `g`'s steps and run them to their next forward, or to their end."""
        try:
            item = g.steps.send(rows)
            while not isinstance(item, Forward):
                g.items.append(item)
                item = g.steps.send(None)
            if not item.ids:
                raise ValueError("a forward of no ids")
        except StopIteration:
            self._end(g)
            return
        except Exception as exc:  # our bug: the run fails, the others go on
            log.exception("request %s: the generation failed", g.run.request_id,
                          extra={"fields": {"request_id": g.run.request_id}})
            self._end(g, exc)
            return
        g.want, g.sent = item, 0

    def _end(self, g: _Going, error: BaseException | None = None) -> None:
        """`g` is over: its sequence is free (emptied after a failure), its end is queued."""
        g.steps.close()
        del self._going[g.seq.seq]
        self.context.set_running(sorted(self._going))
        self.slots.give_back(g.seq, failed=error is not None)
        g.want = None
        self._finish(g.run, g.items, error)

    def _finish(self, run: Run, items: list[Item], error: BaseException | None) -> None:
        """`run`'s last items (its error, then the end) are queued; its tenant has one run
        fewer going."""
        with self._cond:
            self._claimed -= 1
            self._cond.notify_all()  # `drain` may be waiting for the last run
            self._tenants[run.tenant] -= 1
            if not self._tenants[run.tenant]:
                del self._tenants[run.tenant]
                if all(r.tenant != run.tenant for r in self._waiting):
                    self._let_in.pop(run.tenant, None)  # nothing of it left to order
        items.extend([error, None] if error is not None else [None])
        run.done.set()
        self._ended.append((run, items))

    def _deliver(self) -> None:
        """5: the step's items, one hand-off per channel."""
        ready = [(g.run, g.items) for g in self._going.values() if g.run.stream and g.items]
        for g in self._going.values():
            if g.run.stream:
                g.items = []
        ready += self._ended
        self._ended = []
        by_channel: dict[Channel, list[tuple[Run, list[Item]]]] = {}
        for run, items in ready:
            by_channel.setdefault(run.channel, []).append((run, items))
        for channel, batch in by_channel.items():
            channel.post(partial(_hand_over, batch))


def _hand_over(batch: list[tuple[Run, list[Item]]]) -> None:
    """On the reader's thread: each run's items (a reader's failure is its own)."""
    for run, items in batch:
        try:
            run.deliver(items)
        except Exception:
            log.exception("request %s: its events could not be delivered", run.request_id)
