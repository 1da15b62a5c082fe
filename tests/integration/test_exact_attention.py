"""Flash attention with the shape-invariant kernel (``patches/llama.cpp``) on the embedded
model, bit for bit: a position's logits are the same however the forwards around it are
cut: all rows of one forward, one id at a time, spans of any lengths, prefill chunks from
any reuse point, and beside three other sequences forwarding in the same batches; on
f16, q8_0 and bf16 caches, at depths up to 8k ids, on the default threads.

Hypothesis draws the ids, the depth and how the rows are cut. Every comparison is
`torch.equal`: no tolerance. (llama.cpp's own kernels fail it on an f16 cache past 512
cells or 64 rows: tests/engine/test_attention_kernel.py runs the kernel-level check.)
"""

from __future__ import annotations

import random
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from ffwd.engine.backend import Backend
from ffwd.engine.core.batch import Forward
from ffwd.engine.core.prompt_cache import PromptCache
from ffwd.engine.core.scheduler import Engine, Run
from ffwd.engine.llama.context import LlamaContext
from ffwd.engine.llama.sequence import LlamaSequence
from ffwd.models import resolve_model
from tests.unit.scripted import Got, Here

pytestmark = pytest.mark.slow

CONTEXT = 8192
SHAPES = settings(max_examples=3, deadline=None, phases=[Phase.generate],
                  suppress_health_check=list(HealthCheck))
Job = Callable[[Backend], Generator[Any, Any, torch.Tensor]]


@pytest.fixture(scope="module", params=["f16", "q8_0", "bf16"])
def context(request: pytest.FixtureRequest) -> Iterator[LlamaContext]:
    ctx = LlamaContext(resolve_model("default").path, n_ctx=CONTEXT, kv_cache=request.param,
                       flash_attn="on", parallel=4)
    assert ctx.invariant, "llama.cpp was built without patches/llama.cpp: `make install`"
    yield ctx
    ctx.close()


@pytest.fixture()
def backend(context: LlamaContext) -> LlamaSequence:
    return context.sequences[0]


def ids_of(seed: int, n: int, vocab: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(vocab) for _ in range(n)]


def cut(rows: int, sizes: list[int]) -> list[int]:
    """`rows` split into spans of `sizes` (cycled), the last one short."""
    out: list[int] = []
    i = 0
    while sum(out) < rows:
        out.append(min(sizes[i % len(sizes)], rows - sum(out)))
        i += 1
    return out


def rows_in_spans(b: Backend, ids: list[int], spans: list[int]) -> torch.Tensor:
    """The logits of every one of `ids`, forwarded in spans of the given lengths."""
    out, at = [], 0
    for n in spans:
        out.append(b.forward(ids[at : at + n]))
        at += n
    return torch.cat(out)


def check_cuts(b: Backend, seq: list[int], depth: int, rows: int,
               sizes: list[int]) -> None:
    """`rows` positions after `depth`: one forward, one id at a time, spans of `sizes`, and
    the last row of prefills that reuse the cache up to points before them."""
    b.reset()
    b.prefill(seq[:depth])
    tail = seq[depth : depth + rows]
    whole = b.forward(tail)
    for spans in ([1] * rows, cut(rows, sizes)):
        b.rewind(rows)
        assert torch.equal(rows_in_spans(b, tail, spans), whole), spans
    for back in (rows, rows + 37, rows + 300):  # a warm prefill forwards the rest in chunks
        b.rewind(min(back, b.cache_len - 1))
        b.prefill(seq[: depth + rows])
        assert torch.equal(b.last_logits, whole[-1]), back


@SHAPES
@given(seed=st.integers(0, 2**31), depth=st.integers(1, 1200), rows=st.integers(2, 64),
       sizes=st.lists(st.integers(1, 40), min_size=1, max_size=5))
def test_a_position_gets_the_same_logits_however_forwards_are_cut(
        backend: Backend, seed: int, depth: int, rows: int, sizes: list[int]) -> None:
    seq = ids_of(seed, depth + rows, backend.vocab_size)
    check_cuts(backend, seq, depth, rows, sizes)


def test_the_same_deep_in_the_context(backend: LlamaSequence) -> None:
    # f16 (the default path) as deep as the context goes; the others a quarter of the way
    depth = CONTEXT - 200 if backend.kv_type == "f16" else 2000
    seq = ids_of(7, depth + 48, backend.vocab_size)
    check_cuts(backend, seq, depth, 48, [16, 3, 1])


def side_by_side(ctx: LlamaContext, jobs: list[Job]) -> list[torch.Tensor]:
    """Job i on sequence i, all at once on the engine's loop (their forwards batched); each
    job's last yielded value is its result."""
    engine = Engine(ctx, PromptCache(0), max_queue=len(jobs))
    gots = [Got() for _ in jobs]
    out: list[torch.Tensor] = [torch.empty(0)] * len(jobs)

    def keep(i: int, job: Job) -> Callable[[Backend, Callable[[], bool]],
                                          Generator[Any, Any, None]]:
        def steps(b: Backend, cancelled: Callable[[], bool]) -> Generator[Any, Any, None]:
            out[i] = yield from job(b)
        return steps

    for i, (job, got) in enumerate(zip(jobs, gots, strict=True)):
        engine.submit(Run([], keep(i, job), Here(), got.deliver))
    for got in gots:
        assert got.ended.wait(600)
        assert not any(isinstance(item, BaseException) for item in got), got
    engine.close()
    return out


@settings(max_examples=2, deadline=None, phases=[Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2**31), depth=st.integers(100, 800),
       sizes=st.lists(st.integers(1, 24), min_size=1, max_size=4))
def test_a_sequence_gets_the_same_logits_beside_three_others(
        context: LlamaContext, seed: int, depth: int, sizes: list[int]) -> None:
    """Sequence 0's rows alone, then with sequences 1-3 prefilling and forwarding other ids
    in the same `llama_decode` steps (each reads its own KV stream)."""
    vocab = context.sequences[0].vocab_size

    def play(seed: int) -> Job:
        seq = ids_of(seed, depth + 40, vocab)

        def job(b: Backend) -> Generator[Any, Any, torch.Tensor]:
            b.reset()
            yield Forward(seq[:depth], prompt=True)
            rows: list[torch.Tensor] = []
            at = depth
            for n in cut(40, sizes):
                rows.append((yield Forward(seq[at : at + n], rows=True)))
                at += n
            return torch.cat(rows)
        return job

    alone = side_by_side(context, [play(seed)])[0]
    together = side_by_side(context, [play(seed + i) for i in range(4)])
    assert torch.equal(together[0], alone)
    stats = context.batch_stats()
    assert max(stats.by_size) > 1  # the forwards did share steps
