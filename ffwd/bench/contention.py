"""``ffwd bench``'s contention row: one ffwd system's decode speed alone and beside other work.

The same prose request (plain decoding, a fixed output budget) runs under three
conditions, interleaved over the repeats with the first one rotating:

* ``alone``: nothing else runs (the bench's other servers sit idle);
* ``beside ffwd``: a second ``ffwd serve`` process on the same model, engine
  and threads decodes the whole time (streamed requests, one after another,
  from a thread here), as two replicas or two users' servers on one machine;
* ``beside a busy loop``: two Python processes spin (``while True: pass``), a
  two-thread busy loop.

The measured request starts once the other work is running and the other work
stops when it ends. The figure is decode ids per second after prefill, as in
the main table; each condition's median over the repeats is also given as a
ratio to the median alone. The two ffwd processes are alike, so the measured
one's ratio stands for each. The targets are issue 26's (`ffwd.bench.targets`).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import httpx

from ffwd.bench.systems import TIMEOUT, System
from ffwd.bench.systems.servers import ChildServer
from ffwd.bench.workloads import Item

ALONE, BESIDE_FFWD, BESIDE_BUSY = "alone", "beside ffwd", "beside a busy loop"
CONDITIONS = (ALONE, BESIDE_FFWD, BESIDE_BUSY)
LOAD_PROMPT = "Write a long story about a lighthouse keeper and the sea."
LOAD_TOKENS = 512  # one background request outlasts a measured one; then another starts
BUSY = "import sys\nprint('spinning', flush=True)\nwhile True:\n    pass\n"


@contextmanager
def decoding_beside(url: str) -> Iterator[None]:
    """The ffwd server at `url` decodes streamed requests, one after another, until exit;
    entered once its first output arrived."""
    started, stop = threading.Event(), threading.Event()
    errors: list[Exception] = []
    body = {"model": "default", "prompt": LOAD_PROMPT, "max_tokens": LOAD_TOKENS,
            "temperature": 0.0, "stream": True, "ffwd": {"fill": "off"}}

    def loop() -> None:
        try:
            with httpx.Client(timeout=TIMEOUT) as client:
                while not stop.is_set():
                    with client.stream("POST", url + "/v1/completions", json=body) as r:
                        r.raise_for_status()
                        for _ in r.iter_lines():  # closing the stream cancels the request
                            started.set()
                            if stop.is_set():
                                break
        except Exception as exc:  # the waiting side reports it
            errors.append(exc)
            started.set()

    thread = threading.Thread(target=loop, name="ffwd-bench-load", daemon=True)
    thread.start()
    started.wait()
    if errors:
        raise RuntimeError(f"the second ffwd server did not decode: {errors[0]}")
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextmanager
def busy_loop(processes: int = 2) -> Iterator[None]:
    """`processes` Python processes spinning until exit (only these are stopped)."""
    procs = [subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE, text=True)
             for _ in range(processes)]
    try:
        for p in procs:
            assert p.stdout is not None
            p.stdout.readline()  # spinning from here on
        yield
    finally:
        for p in procs:
            p.kill()
            p.wait()


def decode_rate(system: System, item: Item) -> float:
    """`system`'s decode ids per second on `item` (after prefill)."""
    o = system.run(item, [])
    decode = o.seconds - o.prefill_seconds
    return o.tokens / decode if decode > 0 else 0.0


def measure(
    system: System, item: Item, second: Callable[[], ChildServer], repeats: int
) -> dict[str, Any]:
    """The contention row of `system` on `item` (see the module docstring); `second`
    starts the other ffwd server, which is stopped before this returns."""
    rates: dict[str, list[float]] = {c: [] for c in CONDITIONS}
    with second() as other:
        system.begin("contention")
        decode_rate(system, item)  # untimed: a fresh server's first forwards cost extra
        for r in range(repeats):
            for k in range(len(CONDITIONS)):
                condition = CONDITIONS[(r + k) % len(CONDITIONS)]
                load: AbstractContextManager[None] = (
                    decoding_beside(other.url) if condition == BESIDE_FFWD
                    else busy_loop() if condition == BESIDE_BUSY else nullcontext())
                with load:
                    rates[condition].append(round(decode_rate(system, item), 2))
    return summarize(system.name, item.key, rates)


def summarize(system: str, item: str, rates: Mapping[str, list[float]]) -> dict[str, Any]:
    """Medians per condition and their ratios to alone's.

    >>> row = summarize("ffwd-off", "prose 0", {"alone": [90.0, 100.0, 95.0],
    ...                                         "beside ffwd": [50.0, 40.0, 45.0]})
    >>> row["tokens_per_s"], row["vs_alone"]
    ({'alone': 95.0, 'beside ffwd': 45.0}, {'alone': 1.0, 'beside ffwd': 0.4737})
    """
    medians = {c: float(statistics.median(v)) for c, v in rates.items() if v}
    alone = medians.get(ALONE)
    return {"system": system, "item": item, "runs": {c: list(v) for c, v in rates.items()},
            "tokens_per_s": medians,
            "vs_alone": {c: round(m / alone, 4) for c, m in medians.items()} if alone else {}}


def markdown(row: Mapping[str, Any]) -> list[str]:
    """The contention table (decode tok/s per condition, ratio to alone)."""
    lines = [f"Decode tok/s of `{row['system']}` on `{row['item']}` (median of "
             f"{len(row['runs'].get(ALONE, []))}), and as a share of its speed alone:", "",
             "| condition | decode tok/s | vs alone |", "|---|---:|---:|"]
    for condition, rate in row["tokens_per_s"].items():
        vs = row["vs_alone"].get(condition)
        lines.append(f"| {condition} | {rate:.1f} | {'—' if vs is None else f'{vs:.2f}x'} |")
    if row.get("before") is not None:
        lines += ["", f"Alone in the earlier run (`--before`): {row['before']:.1f} tok/s."]
    return lines


def alone_in(run_dir: Path) -> float:
    """The alone figure of the contention row in an earlier ``ffwd bench --out`` directory
    (``--before``: the target's "no slower than before")."""
    results = json.loads((run_dir / "results.json").read_text())
    alone = ((results.get("contention") or {}).get("tokens_per_s") or {}).get(ALONE)
    if alone is None:
        raise ValueError(f"{run_dir}: that run has no contention row")
    return float(alone)
