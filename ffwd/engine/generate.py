"""Text-level generation: prefill, the decode loop, detokenized and stopped text.

* `stream_generate` prefills, runs `ffwd.engine.loop.generate_step`, and
  yields `StreamChunk`s of released text (stop strings held back until they
  can no longer match), checking EOS, stop strings and cancellation on every
  id, injected ones included. Its last chunk carries the `GenerationResult`.
* `generate` joins the stream into a `GenerationResult`.

`open_session` builds the request's `FillSession` from its plan and fill
settings (None for plain decoding).

A grammar reaches the loop as one `TokenConstraint` held by the sampler: every
draw (plain steps and each verified position alike) masks the logits for the
output so far, so the constraint follows the output, rejected spans rolled
back included. `stream_generate` also hands it to the `FillSession`, which
asks it for the ids the grammar forces.
"""

from __future__ import annotations

__all__ = [
    "FinishReason", "GenerationResult", "StreamChunk", "TokenLogprob", "generate",
    "open_session", "stream_generate", "token_logprob",
]

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from ffwd.config import FillConfig
from ffwd.engine.backend import Backend
from ffwd.engine.loop import SpanPolicy, TokenLogprob, TokenOrigin, generate_step, token_logprob
from ffwd.engine.sampling import SamplingParams, TokenConstraint, make_sampler
from ffwd.engine.text import Detokenizer, StopMatcher
from ffwd.fill import ConstrainingSource, FillPlan, FillSession, FillStats, TraceWriter
from ffwd.fill.session import StrictFillContext

FinishReason = Literal["stop", "length", "cancelled"]


@dataclass(slots=True)
class GenerationResult:
    text: str
    token_ids: list[int]  # emitted ids, EOS excluded
    origins: list[TokenOrigin]
    finish_reason: FinishReason
    stats: FillStats
    forward_calls: int  # prefill chunks included
    prompt_tokens: int
    cached_tokens: int  # prompt ids reused from the backend's cache
    seconds: float
    prefill_seconds: float

    @property
    def completion_tokens(self) -> int:
        return len(self.token_ids)

    def as_dict(self) -> dict[str, object]:
        return {
            "text": self.text,
            "token_ids": self.token_ids,
            "finish_reason": self.finish_reason,
            "stats": self.stats.as_dict(),
            "forward_calls": self.forward_calls,
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "completion_tokens": self.completion_tokens,
            "seconds": round(self.seconds, 4),
            "prefill_seconds": round(self.prefill_seconds, 4),
        }


@dataclass(frozen=True, slots=True)
class StreamChunk:
    """Released text and the id that produced it; the last chunk closes the stream.

    The closing chunk has ``token_id=None``, the remaining held-back text,
    `finish_reason` and `result`.
    """

    text: str
    token_id: int | None
    origin: TokenOrigin | None
    finish_reason: FinishReason | None = None
    result: GenerationResult | None = None
    logprob: TokenLogprob | None = None


def open_session(
    plan: FillPlan | None,
    prompt_ids: Sequence[int],
    fill: FillConfig,
    eos_ids: frozenset[int],
    *,
    decode: Callable[[Sequence[int]], str] | None = None,
    strict_context: StrictFillContext | None = None,
    grammar: ConstrainingSource | None = None,
) -> FillSession | None:
    """The request's `FillSession`, or None for plain decoding.

    ``strict`` drops the plan's echo settings; ``echo`` uses the plan's own or
    the config's. The backend's EOS ids are added to the plan's so no span ever
    carries one. A `grammar` proposes the ids it forces, after the strict rows.
    """
    if plan is None or fill.fill == "off":
        return None
    echo = None if fill.fill == "strict" else plan.echo or fill.echo_config()
    plan = replace(plan, echo=echo, eos=tuple(sorted(set(plan.eos) | eos_ids)))
    return FillSession(
        plan, prompt_ids,
        max_span=fill.max_span, append_chunk_size=fill.append_chunk_size,
        decode=decode, strict_context=strict_context, grammar=grammar,
    )


def stream_generate(
    backend: Backend,
    tokenizer: Any,
    prompt_ids: Sequence[int],
    params: SamplingParams | None = None,
    *,
    max_tokens: int = 256,
    stop: Sequence[str] = (),
    plan: FillPlan | None = None,
    fill: FillConfig | None = None,
    strict_context: StrictFillContext | None = None,
    constraint: TokenConstraint | None = None,
    cancelled: Callable[[], bool] | None = None,
    policy: SpanPolicy | None = None,
    logprobs: int | None = None,
) -> Iterator[StreamChunk]:
    """Prefill `prompt_ids` and stream the generation as text chunks.

    `plan=None` or ``fill.fill == "off"`` decodes plainly; `policy` sizes verify
    spans (default: the backend's cost curve). `constraint` (a grammar) masks
    every draw; with fill on, a constraint that is also a `ConstrainingSource`
    has its forced ids fast-forwarded. Tracing follows `fill.trace`
    (records to `fill.trace_path`; cache checks whenever on). `logprobs` (see
    `generate_step`) puts a `TokenLogprob` on every id's chunk.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens={max_tokens}: expected an integer >= 1")
    fill = fill or FillConfig()
    t0 = time.perf_counter()
    calls0 = backend.forward_calls
    cached = backend.prefill(list(prompt_ids))
    t_prefill = time.perf_counter() - t0
    grammar = constraint if isinstance(constraint, ConstrainingSource) else None
    session = open_session(
        plan, prompt_ids, fill, backend.eos_ids,
        decode=tokenizer.decode, strict_context=strict_context, grammar=grammar,
    )
    trace = TraceWriter(fill.trace_path) if fill.trace_path and session else None
    sampler = make_sampler(params, prompt_ids, constraint)
    steps = generate_step(
        backend, sampler, max_tokens=max_tokens, session=session, policy=policy,
        trace=trace, check_cache=fill.trace_checks, logprobs=logprobs,
    )
    detok, stops = Detokenizer(tokenizer), StopMatcher(stop)
    ids: list[int] = []
    origins: list[TokenOrigin] = []
    text: list[str] = []
    finish: FinishReason = "length"
    hit_stop = False
    try:
        for event in steps:
            if event.token_id in backend.eos_ids:
                finish = "stop"
                break
            ids.append(event.token_id)
            origins.append(event.origin)
            released, hit_stop = stops.feed(detok.add(event.token_id))
            text.append(released)
            yield StreamChunk(released, event.token_id, event.origin, logprob=event.logprob)
            if hit_stop:
                finish = "stop"
                break
            if cancelled is not None and cancelled():
                finish = "cancelled"
                break
    finally:
        steps.close()
        if trace is not None:
            trace.close()
    tail = ""
    if not hit_stop:
        # Generation ended on its own: release what was held back, unless it completes a stop.
        tail, matched = stops.feed(detok.flush())
        tail += "" if matched else stops.flush()
    text.append(tail)
    stats = session.stats if session is not None else FillStats(decode_steps=len(ids))
    result = GenerationResult(
        text="".join(text), token_ids=ids, origins=origins, finish_reason=finish, stats=stats,
        forward_calls=backend.forward_calls - calls0, prompt_tokens=len(prompt_ids),
        cached_tokens=cached, seconds=time.perf_counter() - t0, prefill_seconds=t_prefill,
    )
    yield StreamChunk(tail, None, None, finish_reason=finish, result=result)


def generate(
    backend: Backend,
    tokenizer: Any,
    prompt_ids: Sequence[int],
    params: SamplingParams | None = None,
    **kwargs: Any,
) -> GenerationResult:
    """Run `stream_generate` to the end and return its result (same arguments)."""
    result: GenerationResult | None = None
    for chunk in stream_generate(backend, tokenizer, prompt_ids, params, **kwargs):
        result = chunk.result or result
    assert result is not None
    return result
