"""Sequences of one llama.cpp context decoding at once (``--parallel N``), on tiny GGUF files.

The engine's loop steps every running sequence in one `llama_decode`: a sequence's
logits are those of the same steps on a context of its own (to float32 rounding: the
tiny files' float32 weights round a matmul over a batch of sequences apart from one over
a single id; on the embedded Q4_1 model they are bit-identical,
tests/integration/test_parallel.py), its forward count is what it would be alone, and a
generation with echo spans keeps its cache exact at every step while the others verify
and rewind theirs.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ffwd.config import FillConfig
from ffwd.engine.backend import Backend
from ffwd.engine.core.batch import Forward
from ffwd.engine.core.decode import fixed_policy
from ffwd.engine.core.generate import Prepared, drive, stream_steps
from ffwd.engine.core.prompt_cache import PromptCache
from ffwd.engine.core.scheduler import Engine, Run
from ffwd.engine.core.slots import Slots
from ffwd.engine.llama.context import LlamaContext
from ffwd.fill import FillPlan
from tests.engine.backends import CHUNK, _gguf
from tests.engine.tiny_models import CharTokenizer, repetitive_prompt
from tests.unit.scripted import Got, Here

Op = tuple[str, list[int] | int]
Job = Callable[[Backend], Iterator[Any]]


def exact(parallel: int) -> LlamaContext:
    # One cache type for every context: --deterministic times each exact path and keeps
    # the fastest, so two contexts could otherwise land on different types (bf16: exact
    # with and without the shape-invariant kernel).
    return LlamaContext(_gguf("llama", 2), n_ctx=512, n_batch=CHUNK, threads=1,
                        kv_cache="bf16", deterministic=True, parallel=parallel)


def script(seed: int) -> list[Op]:
    """A run of a prompt, spans (every row), steps (last row) and rewinds."""
    rng = random.Random(seed)
    ids = [rng.randrange(3, 64) for _ in range(rng.randrange(20, 150))]
    ops: list[Op] = [("prompt", ids)]
    for _ in range(25):
        n = rng.choice([1, 1, 1, 3, 6])
        span = [rng.randrange(3, 64) for _ in range(n)]
        ops.append(("forward" if n > 1 else "append", span))
        if n > 1 and rng.random() < 0.6:
            ops.append(("rewind", rng.randrange(1, n)))
    return ops


def play(ops: list[Op], out: list[torch.Tensor], calls: list[int]) -> Job:
    """Steps that run `ops` on a sequence: the rows of every forward into `out`, the
    forwards after the prompt (whose chunks share steps with the others') into `calls`."""

    def steps(b: Backend) -> Iterator[Any]:
        after = 0
        for kind, arg in ops:
            if kind == "rewind":
                assert isinstance(arg, int)
                b.rewind(arg)
                continue
            assert isinstance(arg, list)
            if kind == "prompt":
                yield Forward(arg[b.keep_prefix(arg):], prompt=True)
                out.append(b.last_logits)
                after = b.forward_calls
            else:
                rows = yield Forward(arg, rows=kind == "forward")
                out.append(rows if kind == "forward" else rows[-1])
        calls.append(b.forward_calls - after)

    return steps


def together(ctx: LlamaContext, jobs: list[Job]) -> None:
    """Run every job on a sequence of `ctx`, all at once, on the engine's loop."""
    engine = Engine(ctx, PromptCache(0), max_queue=len(jobs))
    gots = [Got() for _ in jobs]
    for job, got in zip(jobs, gots, strict=True):
        engine.submit(Run([], lambda seq, cancelled, job=job: job(seq), Here(), got.deliver))
    for got in gots:
        assert got.ended.wait(120)
        assert not any(isinstance(item, BaseException) for item in got), got
    engine.close()


def test_each_sequence_computes_what_it_would_alone() -> None:
    scripts = [script(seed) for seed in range(3)]
    alone: list[tuple[list[torch.Tensor], list[int]]] = []
    for ops in scripts:
        out: list[torch.Tensor] = []
        calls: list[int] = []
        seq = exact(1).sequences[0]
        list(drive(seq, play(ops, out, calls)(seq)))
        alone.append((out, calls))
    ctx = exact(3)
    got = [([], []) for _ in scripts]  # type: ignore[var-annotated]
    together(ctx, [play(ops, rows, calls) for ops, (rows, calls) in zip(scripts, got,
                                                                          strict=True)])
    for (rows_alone, calls_alone), (rows, calls) in zip(alone, got, strict=True):
        assert calls == calls_alone  # one forward per step, as alone
        for a, b in zip(rows_alone, rows, strict=True):
            torch.testing.assert_close(a, b, atol=1e-4, rtol=0)
    stats = ctx.batch_stats()
    assert stats.steps == sum(stats.by_size.values()) and max(stats.by_size) > 1


def test_generations_with_echo_spans_keep_their_caches_beside_others() -> None:
    tok = CharTokenizer()
    fill = FillConfig(mode="echo", k=2, trace=True)  # cache checks at every step
    prompts = [repetitive_prompt(seed) for seed in range(4)]
    stats: list[tuple[int, int]] = []

    def gen(prompt: list[int]) -> Job:
        def steps(b: Backend) -> Iterator[Any]:
            prep = Prepared(prompt, max_tokens=40, plan=FillPlan(), fill=fill)
            yield from stream_steps(b, tok, prep, policy=fixed_policy(False),
                                    done=lambda r: stats.append(
                                        (r.stats.verify_events, r.stats.verify_rejected)))
            assert b.cached_ids[: len(prompt)] == tuple(prompt)

        return steps

    ctx = exact(4)
    together(ctx, [gen(p) for p in prompts])
    assert len(stats) == 4 and all(events > 0 for events, _ in stats)  # every one verified
    assert sum(rejected for _, rejected in stats) > 0  # ... and cut some back
    assert max(ctx.batch_stats().by_size) > 1  # in shared forwards


def test_a_saved_state_loads_into_a_sibling_sequence() -> None:
    first, second = exact(2).sequences
    prompt = repetitive_prompt(5)
    first.prefill(prompt)
    second.load_state(first.save_state())  # the prefix is copied, not forwarded
    calls = second.forward_calls
    assert second.prefill([*prompt, 9, 10]) == len(prompt)
    assert second.forward_calls == calls + 1
    alone = exact(1).sequences[0]
    alone.prefill([*prompt, 9, 10])
    assert torch.equal(second.last_logits, alone.last_logits)


def test_a_run_starts_from_the_best_cache_of_its_sequences_and_siblings() -> None:
    cache = PromptCache(1 << 30)
    slots = Slots(exact(3).sequences, cache)
    system = repetitive_prompt(7, length=120)
    first = slots.take([*system, 5, 6])  # the fresh sequences are all alike
    first.prefill([*system, 5, 6])
    # Meanwhile a request with the same system part: no free sequence holds it, and
    # the running one does: its cache is copied, not forwarded again.
    second = slots.take([*system, 9, 10, 11])
    assert second is not first
    assert second.prefill([*system, 9, 10, 11]) >= len(system)
    slots.give_back(second)
    slots.give_back(first)
    # Free again, each prompt goes back to the sequence holding its conversation.
    assert slots.take([*system, 5, 6, 7]) is first
    assert cache.stats.loads == 0
