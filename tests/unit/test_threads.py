"""The thread-count decision under shared cores (`ffwd.engine.llama.threads`), fed with step
times as a quiet machine, a busy one and one that changes gives them."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable

from ffwd.engine.llama.threads import MAX_EVERY, Contention, ThreadChooser, candidates

Speed = Callable[[int, int], float]  # (step, threads) -> ms


def run(chooser: ThreadChooser, speed: Speed, steps: int) -> tuple[list[int], float]:
    """The count each step ran at, and the total milliseconds."""
    counts, total = [], 0.0
    for step in range(steps):
        counts.append(chooser.current)
        ms = speed(step, chooser.current)
        total += ms
        chooser.observe(ms)
    return counts, total


def quiet(step: int, threads: int) -> float:
    return {2: 10.0, 1: 13.0}[threads]


def shared(step: int, threads: int) -> float:
    """Another process's spinning threads on the same two cores."""
    return {2: 40.0, 1: 14.0}[threads]


def test_the_candidates_halve_down_to_one() -> None:
    assert candidates(1) == (1,)
    assert candidates(2) == (2, 1)
    assert candidates(12) == (12, 6, 3, 1)


def test_a_quiet_machine_keeps_every_thread_at_little_cost() -> None:
    chooser = ThreadChooser(2)
    counts, total = run(chooser, quiet, 5000)
    assert counts[-1] == 2
    # A trial's steps at one thread, ever rarer: 64, 128 ... then every MAX_EVERY steps.
    assert counts.count(1) <= chooser.trial * (5 + 5000 // MAX_EVERY)
    assert total <= 1.01 * 5000 * 10.0


def test_shared_cores_move_to_fewer_threads_within_a_few_steps() -> None:
    chooser = ThreadChooser(2)
    counts, _ = run(chooser, lambda s, t: quiet(s, t) if s < 200 else shared(s, t), 2000)
    assert counts[199] == 2
    moved = next(s for s in range(200, 2000) if counts[s] == 1)
    assert moved - 200 <= 2 * chooser.trial  # the slow steps start a trial at once
    assert counts[1999] == 1
    assert counts[200:].count(1) >= 0.9 * 1800


def test_the_cost_curve_says_a_first_step_is_slow() -> None:
    # Shared from the start: the quiet cost of a step (10 ms) shows the first steps are slow.
    chooser = ThreadChooser(2, expected=lambda depth: 10.0)
    counts, _ = run(chooser, shared, 100)
    assert counts.index(1) <= chooser.trial
    blind = ThreadChooser(2)  # without it, only the first scheduled trial finds out
    counts, _ = run(blind, shared, 100)
    assert counts.index(1) == blind.every


def test_a_step_slow_for_a_short_cache_is_slow_though_long_caches_were_slower() -> None:
    # A long conversation (8k ids: 30 ms a step on quiet cores) teaches the chooser that
    # 2 threads is best and trials grow rare; then a short request (7 ms quiet) meets
    # another process. Its 28 ms steps are slow for its cache, not for 8k ids.
    chooser = ThreadChooser(2, expected=lambda depth: 7.0 if depth < 1000 else 30.0)
    long = {2: 30.0, 1: 45.0}
    at_one = 0
    for _ in range(3000):
        at_one += chooser.current == 1
        chooser.observe(long[chooser.current], context=8000)
    assert chooser.current == 2
    assert at_one <= chooser.trial * (5 + 3000 // MAX_EVERY)  # trials grew rare
    short_shared = {2: 28.0, 1: 11.0}
    counts = []
    for _ in range(200):
        counts.append(chooser.current)
        chooser.observe(short_shared[chooser.current], context=300)
    assert counts.index(1) <= 2 * chooser.trial
    assert counts[50:].count(1) >= 0.9 * 150  # but for a trial of 2 threads now and then


def test_a_trial_leaves_longer_forwards_on_the_count_it_started_from() -> None:
    chooser = ThreadChooser(2, every=4, trial=2)
    for _ in range(3):
        chooser.observe(10.0)
    assert chooser.observe(10.0) == 1  # a trial of one thread starts
    assert (chooser.current, chooser.settled) == (1, 2)  # a prefill now still gets two
    chooser.observe(14.0)
    assert chooser.observe(14.0) == 2 and chooser.settled == 2


def test_the_cores_freed_again_bring_the_threads_back() -> None:
    chooser = ThreadChooser(2)
    counts, _ = run(chooser, lambda s, t: shared(s, t) if s < 500 else quiet(s, t), 3000)
    assert counts[499] == 1
    back = next(s for s in range(500, 3000) if counts[s] == 2)
    assert back - 500 <= MAX_EVERY + 2 * chooser.trial
    assert counts[-1] == 2


def test_many_cores_settle_on_the_fastest_count() -> None:
    # Eight of sixteen cores are someone else's: 8 threads is the fastest count.
    ms = {16: 60.0, 8: 9.0, 4: 12.0, 2: 20.0, 1: 35.0}
    chooser = ThreadChooser(16)
    counts, _ = run(chooser, lambda s, t: ms[t], 3000)
    assert counts[-1] == 8
    assert counts[1000:].count(8) >= 0.95 * 2000


def test_contention_sees_another_process_using_the_cpus() -> None:
    quiet_share = Contention()
    time.sleep(0.3)
    share = quiet_share.share()
    assert share is not None and 0.0 <= share <= 1.0  # Linux has the counters
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.2)
        watch = Contention()
        time.sleep(1.0)
        busy_share = watch.share()
    finally:
        busy.kill()
    # One spinning process holds one of the CPUs.
    assert busy_share is not None and busy_share >= 0.8 / (os.cpu_count() or 1)
