"""llama.cpp's thread count may change between steps (`ffwd.engine.llama.threads`): the count
reaches llama.cpp, and under `deterministic` the logits are the same whatever count a step
ran on."""

from __future__ import annotations

import torch

from ffwd.engine.llama.context import LlamaContext
from ffwd.engine.llama.native import init_llama
from tests.engine.backends import _gguf


class Flip:
    """A chooser that moves between two and one thread every step, and would have longer
    forwards run on one thread."""

    current = 2
    settled = 1
    expected: float | None = None

    def observe(self, ms: float, context: int = 0) -> int:
        self.current = 3 - self.current
        return self.current


class Share:
    """Other processes' share of the CPUs, as `threads.Contention` reads it."""

    def __init__(self, value: float) -> None:
        self.value = value

    def share(self) -> float:
        return self.value


def greedy(ctx: LlamaContext, steps: int, seen: list[int] | None = None) -> list[int]:
    lib = init_llama()
    backend = ctx.sequences[0]
    backend.prefill([3, 9, 4, 7, 11, 5])
    logits, out = backend.last_logits, []
    for _ in range(steps):
        assert logits is not None
        token = int(torch.argmax(logits))
        out.append(token)
        logits = backend.append([token])
        if seen is not None:
            seen.append(int(lib.llama_n_threads(ctx._ctx[0])))
    return out


def test_a_thread_count_change_reaches_llama_cpp_and_leaves_the_output_alone() -> None:
    path = _gguf("llama", None)
    steady = LlamaContext(path, n_ctx=256, threads=2, deterministic=True)
    flipping = LlamaContext(path, n_ctx=256, threads=2, deterministic=True)
    flipping._threads = Flip()  # type: ignore[assignment]
    seen: list[int] = []
    assert greedy(flipping, 40, seen) == greedy(steady, 40)
    assert set(seen) == {1, 2}
    assert steady.threads_now == 2
    # A forward of many ids: every thread while the CPUs are otherwise idle, the settled
    # count while others use them.
    for others, batch in ((0.0, 2), (0.9, Flip.settled)):
        flipping._others = Share(others)  # type: ignore[assignment]
        flipping.sequences[0].forward([5, 6, 7])
        assert int(init_llama().llama_n_threads_batch(flipping._ctx[0])) == batch
