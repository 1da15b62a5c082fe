"""llama.cpp's thread count may change between steps (`ffwd.engine.threads`): the count
reaches llama.cpp, and under `deterministic` the logits are the same whatever count a step
ran on."""

from __future__ import annotations

import torch

from ffwd.engine.llamacpp import LlamaCppBackend
from ffwd.engine.native import init_llama
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


def greedy(backend: LlamaCppBackend, steps: int, seen: list[int] | None = None) -> list[int]:
    lib = init_llama()
    backend.prefill([3, 9, 4, 7, 11, 5])
    logits, out = backend.last_logits, []
    for _ in range(steps):
        assert logits is not None
        token = int(torch.argmax(logits))
        out.append(token)
        logits = backend.append([token])
        if seen is not None:
            seen.append(int(lib.llama_n_threads(backend._ctx)))
    return out


def test_a_thread_count_change_reaches_llama_cpp_and_leaves_the_output_alone() -> None:
    path = _gguf("llama", None)
    steady = LlamaCppBackend(path, n_ctx=256, threads=2, deterministic=True)
    flipping = LlamaCppBackend(path, n_ctx=256, threads=2, deterministic=True)
    flipping._threads = Flip()  # type: ignore[assignment]
    seen: list[int] = []
    assert greedy(flipping, 40, seen) == greedy(steady, 40)
    assert set(seen) == {1, 2}
    assert steady.threads_now == 2
    flipping.forward([5, 6, 7])  # a forward of many ids runs on the settled count
    assert int(init_llama().llama_n_threads(flipping._ctx)) == Flip.settled
