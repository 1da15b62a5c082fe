"""Sequences of one llama.cpp context decoding at once (``--parallel N``), on tiny GGUF files.

Each sequence runs on its own thread, its forwards batched with the others' into one
`llama_decode` per step: its logits are those of the same calls on a context of its own
(to float32 rounding: the tiny files' float32 weights round a matmul over a batch of
sequences apart from one over a single id; on the embedded Q4_1 model they are
bit-identical, tests/integration/test_parallel.py), its forward count is what it would
be alone, and a generation with echo spans keeps its cache exact at every step while
the others verify and rewind theirs.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable

import torch

from ffwd.config import FillConfig
from ffwd.engine.backend import Backend
from ffwd.engine.generate import generate
from ffwd.engine.llamacpp import LlamaCppBackend
from ffwd.engine.loop import fixed_policy
from ffwd.fill import FillPlan
from ffwd.serve.prompt_cache import PromptCache
from ffwd.serve.slots import Slots
from tests.engine.backends import CHUNK, _gguf
from tests.engine.tiny_models import CharTokenizer, repetitive_prompt

Op = tuple[str, list[int] | int]


def exact(parallel: int) -> LlamaCppBackend:
    return LlamaCppBackend(_gguf("llama", 2), n_ctx=512, n_batch=CHUNK, threads=1,
                           deterministic=True, parallel=parallel)


def script(seed: int) -> list[Op]:
    """A run of prefills, spans (every row), steps (last row) and rewinds."""
    rng = random.Random(seed)
    ids = [rng.randrange(3, 64) for _ in range(rng.randrange(20, 150))]
    ops: list[Op] = [("prefill", ids)]
    for _ in range(25):
        n = rng.choice([1, 1, 1, 3, 6])
        span = [rng.randrange(3, 64) for _ in range(n)]
        ops.append(("forward" if n > 1 else "append", span))
        if n > 1 and rng.random() < 0.6:
            ops.append(("rewind", rng.randrange(1, n)))
    return ops


def play(b: Backend, ops: list[Op]) -> tuple[list[torch.Tensor], int]:
    """The rows of every call, and the forwards after the prefill (whose chunks share a
    step's ids with the others')."""
    out: list[torch.Tensor] = []
    calls = 0
    for kind, arg in ops:
        if kind == "rewind":
            assert isinstance(arg, int)
            b.rewind(arg)
        elif kind == "prefill":
            assert isinstance(arg, list)
            b.prefill(arg)
            out.append(b.last_logits)
            calls = b.forward_calls
        else:
            assert isinstance(arg, list)
            out.append(b.forward(arg) if kind == "forward" else b.append(arg))
    return out, b.forward_calls - calls


def side_by_side(seqs: list[Backend], jobs: list[Callable[[Backend], object]]) -> list[object]:
    """Run job i on sequence i, each on its own thread, all at once."""
    results: list[object] = [None] * len(jobs)

    def run(i: int) -> None:
        try:
            results[i] = jobs[i](seqs[i])
        finally:
            seqs[i].leave()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    return results


def test_each_sequence_computes_what_it_would_alone() -> None:
    scripts = [script(seed) for seed in range(3)]
    alone = [play(exact(1), ops) for ops in scripts]
    backend = exact(3)
    together = side_by_side(list(backend.sequences()),
                            [lambda b, ops=ops: play(b, ops) for ops in scripts])
    for (rows_alone, calls_alone), got in zip(alone, together, strict=True):
        assert isinstance(got, tuple)
        rows, calls = got
        assert calls == calls_alone  # one forward per call, as alone
        for a, b in zip(rows_alone, rows, strict=True):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=0)
    stats = backend.batch_stats()
    assert stats.steps == sum(stats.by_size.values()) and max(stats.by_size) > 1


def test_generations_with_echo_spans_keep_their_caches_beside_others() -> None:
    tok = CharTokenizer()
    fill = FillConfig(mode="echo", k=2, trace=True)  # cache checks at every step
    prompts = [repetitive_prompt(seed) for seed in range(4)]

    def gen(b: Backend, prompt: list[int]) -> tuple[int, int]:
        res = generate(b, tok, prompt, max_tokens=40, plan=FillPlan(), fill=fill,
                       policy=fixed_policy(False))
        assert b.cached_ids[: len(prompt)] == tuple(prompt)
        return res.stats.verify_events, res.stats.verify_rejected

    backend = exact(4)
    got = side_by_side(list(backend.sequences()), [lambda b, p=p: gen(b, p) for p in prompts])
    assert all(isinstance(g, tuple) and g[0] > 0 for g in got)  # every one verified spans
    assert sum(g[1] for g in got if isinstance(g, tuple)) > 0  # ... and cut some back
    assert max(backend.batch_stats().by_size) > 1  # in shared forwards


def test_a_saved_state_loads_into_a_sibling_sequence() -> None:
    backend = exact(2)
    first, second = backend.sequences()
    prompt = repetitive_prompt(5)
    first.prefill(prompt)
    second.load_state(first.save_state())  # the prefix is copied, not forwarded
    calls = second.forward_calls
    assert second.prefill([*prompt, 9, 10]) == len(prompt)
    assert second.forward_calls == calls + 1
    alone = exact(1)
    alone.prefill([*prompt, 9, 10])
    assert torch.equal(second.last_logits, alone.last_logits)


def test_a_run_starts_from_the_best_cache_of_its_sequences_and_siblings() -> None:
    backend = exact(3)
    cache = PromptCache(1 << 30)
    slots = Slots(backend.sequences(), cache)
    system = repetitive_prompt(7, length=120)
    with slots.take([*system, 5, 6]) as first:  # the fresh sequences are all alike
        first.prefill([*system, 5, 6])
        # Meanwhile a request with the same system part: no free sequence holds it, and
        # the running one does: its cache is copied, not forwarded again.
        with slots.take([*system, 9, 10, 11]) as second:
            assert second is not first
            assert second.prefill([*system, 9, 10, 11]) >= len(system)
    # Free again, each prompt goes back to the sequence holding its conversation.
    with slots.take([*system, 5, 6, 7]) as again:
        assert again is first
    assert cache.stats.loads == 0
