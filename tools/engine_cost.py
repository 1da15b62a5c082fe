"""What a llama.cpp configuration costs: cold prefill, one-id steps, 16-id forwards.

    python -m tools.engine_cost MODEL.gguf [--configs default,deterministic,plain,q8_0,guard]
        [--prompts 1024,2048,4096,8192] [--repeats 3] [--threads 0]

Configurations, each a llama.cpp backend (`open_llama`) loaded once and measured in turn
(interleaved, `repeats` rounds, medians reported with each one's ratio to the
first configuration):

* ``default``: the first attention path `ffwd serve` times (flash attention on an f16
  cache, which the load's measurement may replace).
* ``deterministic``: ``--deterministic``'s first path (flash attention on f16 with the
  shape-invariant kernel of patches/llama.cpp; without it q8_0, or bf16 where heads do
  not fit).
* ``plain``: the plain attention path on an f16 cache; ``q8_0``, ``bf16``: flash
  attention on that cache.
* ``guard``: the default with the weights kept out of the CPU's extra buffer
  types, as the AMX guard does on a library built with ggml's AMX kernels
  (`ffwd.engine.llama.native.extra_buffers`): what losing REPACK costs.

Each prompt is random ids, prefilled into an empty cache (time to first
token without sampling); then 32 one-id steps and 8 forwards of 16 ids after
it. The load average is printed with the table: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

CONFIGS = ("default", "deterministic", "guard", "plain", "q8_0", "bf16")


def load(path: str, config: str, threads: int, context: int) -> Any:
    from ffwd.engine.llama import native
    from ffwd.engine.llama.context import open_llama

    if config == "guard":
        kept = native.extra_buffers
        native.extra_buffers = lambda line: False
        try:
            return open_llama(path, n_ctx=context, threads=threads)
        finally:
            native.extra_buffers = kept
    if config in ("plain", "q8_0", "bf16"):
        kv = "f16" if config == "plain" else config
        return open_llama(path, n_ctx=context, threads=threads, kv_cache=kv,
                          flash_attn="off" if config == "plain" else "on")
    return open_llama(path, n_ctx=context, threads=threads,
                      deterministic=config == "deterministic")


def timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def measure(backend: Any, n: int, rng: random.Random) -> dict[str, float]:
    """Milliseconds: a cold prefill of `n` ids, then a one-id step and a 16-id forward."""
    vocab = backend.vocab_size
    ids = [rng.randrange(3, vocab) for _ in range(n)]
    backend.reset()
    prefill = timed(lambda: backend.prefill(ids))
    steps = [timed(lambda: backend.append([rng.randrange(3, vocab)])) for _ in range(32)]
    spans = []
    for _ in range(8):
        spans.append(timed(lambda: backend.forward([rng.randrange(3, vocab) for _ in range(16)])))
        backend.rewind(16)
    return {"prefill": prefill, "step": statistics.median(steps),
            "span16": statistics.median(spans)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.engine_cost",
                                description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--configs", default="default,deterministic")
    p.add_argument("--prompts", default="1024,2048,4096,8192")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args(argv)
    configs = a.configs.split(",")
    prompts = [int(n) for n in a.prompts.split(",")]
    context = max(prompts) + 64 + 16
    backends = {c: load(a.model, c, a.threads, context) for c in configs}
    print(f"load average before: {os.getloadavg()}", flush=True)
    seen: dict[tuple[str, int], list[dict[str, float]]] = {}
    rng = random.Random(0)
    for _ in range(a.repeats):
        for n in prompts:
            for c in configs:
                seen.setdefault((c, n), []).append(measure(backends[c], n, rng))
    print(f"load average after: {os.getloadavg()}")
    print(f"{'ids':>6} {'config':<14} {'prefill ms':>11} {'ms/id':>6} {'step ms':>8} "
          f"{'16-id ms':>9}   ratio to {configs[0]} (prefill, step, 16-id)")
    for n in prompts:
        base = {k: statistics.median(r[k] for r in seen[(configs[0], n)]) for k in seen[
            (configs[0], n)][0]}
        for c in configs:
            m = {k: statistics.median(r[k] for r in seen[(c, n)]) for k in base}
            ratio = ", ".join(f"{m[k] / base[k]:.2f}" for k in ("prefill", "step", "span16"))
            print(f"{n:>6} {c:<14} {m['prefill']:>11.0f} {m['prefill'] / n:>6.2f} "
                  f"{m['step']:>8.1f} {m['span16']:>9.1f}   {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
