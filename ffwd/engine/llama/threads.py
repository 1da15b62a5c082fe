"""How many threads a forward should use when other processes want the same cores.

ggml runs a forward on n threads that meet at a barrier after every op, a few
hundred times per forward. When another process holds some of the cores, a
thread waiting at a barrier for a peer that is not running spins through its
own time slice: two ffwd processes of two threads on two cores decode at a
twentieth of their speed, one thread each at three quarters of it.

`ThreadChooser` is the decision, a pure object fed with the times of one-id
steps (the decode loop's own, no extra work): it keeps timing the current
count and, now and then, tries each neighbouring count for a few steps, and
moves to whichever was fastest. On a quiet machine the configured count wins
every trial and the trials grow rarer (a trial at fewer threads costs a few
slower steps); a step far slower than that count's usual time starts a trial
at once (before any trial, "usual" is what the cost curve measured on quiet
cores), so contention is met within a few steps, and left again when it ends.
A step's time grows with the ids in the cache (an 8k-id cache makes a step
several times slower), so "usual" is kept per count and per cache size within
a factor of two (`size_class`): a step timed at 8k ids says nothing of one at 300.

>>> chooser = ThreadChooser(2, every=4, trial=2)
>>> [chooser.observe(10.0) for _ in range(4)]   # quiet: 4 steps, then a trial of 1 thread
[None, None, None, 1]
>>> [chooser.observe(14.0) for _ in range(2)]   # slower at 1 thread: back to 2
[None, 2]

`contended(seconds)` is the other half: what share of the machine other
processes used while something was being measured (Linux's /proc/stat), so a
cost curve timed on shared cores is not kept as if they were quiet.
"""

from __future__ import annotations

import functools
import os
import resource
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import median


@functools.cache
def default_threads() -> int:
    """The threads a forward runs on when none are asked for: torch's own default (the
    physical cores, or OMP_NUM_THREADS), read once, before a load sets torch's count for
    sampling (`ffwd.models.load.sampling_threads`), so that a second model loaded in the
    same process gets the same count as the first."""
    import torch

    return int(torch.get_num_threads())


BUSY = 0.25  # others' share of the CPUs above which the cores count as shared
SLOW = 2.0  # a step this many times the count's usual time starts a trial at once
MAX_EVERY = 1024  # steps between trials once the current count keeps winning


def size_class(context: int) -> int:
    """The class of a cache of `context` ids: sizes within a factor of two share one.

    >>> [size_class(n) for n in (0, 1, 300, 511, 512, 8000)]
    [0, 1, 9, 9, 10, 13]
    """
    return context.bit_length()


def candidates(threads: int) -> tuple[int, ...]:
    """The counts worth trying: `threads`, then halves down to one.

    >>> candidates(16)
    (16, 8, 4, 2, 1)
    """
    out = [threads]
    while out[-1] > 1:
        out.append(out[-1] // 2)
    return tuple(out)


@dataclass
class ThreadChooser:
    """Feed it each one-id step's milliseconds; it says when to change the thread count."""

    threads: int  # the configured count, the most it will use
    # ms of a step at `threads` on quiet cores, by cache size (the cost surface)
    expected: Callable[[int], float] | None = None
    every: int = 64  # steps at the current count before the next trial (doubles up to MAX)
    trial: int = 3  # steps timed per count on trial
    current: int = 0
    _recent: deque[float] = field(default_factory=deque)  # the last `trial` steps
    # each (count, size_class)'s last trial median
    _usual: dict[tuple[int, int], float] = field(default_factory=dict)
    _round: dict[int, float] = field(default_factory=dict)  # this trial's medians
    _queue: list[int] = field(default_factory=list)  # counts still to try in this trial
    _trial_of: int = 0  # the count a trial started from
    _trial_size: int = 0  # the cache's size class when it started
    _since: int = 0
    _wait: int = 0

    def __post_init__(self) -> None:
        self.current = self.current or self.threads
        self._recent = deque(maxlen=self.trial)
        self._wait = self.every

    @property
    def settled(self) -> int:
        """The count for forwards of many ids: during a trial, the one it started from
        (a prefill must not run on a count that is only being tried)."""
        return self._trial_of if self._round else self.current

    def observe(self, ms: float, context: int = 0) -> int | None:
        """Note a one-id step of `ms` at the current count, `context` ids in the cache;
        return a new count or None."""
        self._recent.append(ms)
        full = len(self._recent) == self.trial
        if self._round:  # on trial: move on once this count has its steps
            return self._next() if full else None
        self._since += 1
        size = size_class(context)
        usual = self._usual.get((self.current, size))
        if usual is None and self.current == self.threads:
            usual = self.expected(context) if self.expected else None  # until a trial
        slow = full and usual is not None and median(self._recent) > SLOW * usual
        if self._since < self._wait and not slow:
            return None
        if not full:
            return None
        # A trial: this count's recent steps against each neighbour's.
        counts = candidates(self.threads)
        i = counts.index(self.current)
        self._queue = [counts[j] for j in (i + 1, i - 1) if 0 <= j < len(counts)]
        self._round = {self.current: median(self._recent)}
        self._trial_of, self._trial_size = self.current, size
        return self._next() if self._queue else self._decide()

    def _next(self) -> int | None:
        if self.current not in self._round:
            self._round[self.current] = median(self._recent)
        if self._queue:
            return self._switch(self._queue.pop(0))
        return self._decide()

    def _decide(self) -> int | None:
        best = min(self._round, key=self._round.__getitem__)
        self._usual.update({(c, self._trial_size): ms for c, ms in self._round.items()})
        stayed = best == self._trial_of
        self._wait = min(self._wait * 2, MAX_EVERY) if stayed else self.every
        self._round, self._since = {}, 0
        return None if best == self.current else self._switch(best)

    def _switch(self, count: int) -> int:
        self.current = count
        self._recent.clear()
        return count


def _busy_jiffies() -> tuple[float, int] | None:
    """(seconds of CPU time all processes used, CPUs) from /proc/stat; None off Linux."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()[1:]
    except OSError:
        return None
    ticks = [int(f) for f in fields]
    busy = sum(ticks) - ticks[3] - (ticks[4] if len(ticks) > 4 else 0)  # minus idle, iowait
    return busy / os.sysconf("SC_CLK_TCK"), os.cpu_count() or 1


def _own_seconds() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


class Contention:
    """The share of the machine's CPU time other processes used between `start()` and
    `share()` (0.0: quiet; 0.5: half the cores were someone else's)."""

    def __init__(self) -> None:
        self._t0 = time.perf_counter()
        self._busy0 = _busy_jiffies()
        self._own0 = _own_seconds()

    def share(self) -> float | None:
        """None where the system's counters cannot be read."""
        busy1 = _busy_jiffies()
        if busy1 is None or self._busy0 is None:
            return None
        wall = time.perf_counter() - self._t0
        others = (busy1[0] - self._busy0[0]) - (_own_seconds() - self._own0)
        # The counters tick in jiffies, the wall clock does not: clip what rounding adds.
        return min(1.0, max(0.0, others) / max(wall * busy1[1], 1e-9))
