"""Text-level generation: prefill, the decode loop, its events with text, the result.

* `stream_generate` prefills, runs `ffwd.engine.loop.generate_step`, passes each
  `TokenEvent` through the request's `OutputText` (its text, stop strings and
  tool-call deltas) and yields it; the last item is the `GenerationResult`.
  Every stop is decided here, on every emitted id, injected ones included: the
  model's EOS, `max_tokens` (where the loop ends), a stop string, the calls the
  request may make, and a cancelled client.
* `generate` runs the stream and returns its result.

`open_session` builds the request's `FillSession` from its plan and fill
settings (None for plain decoding).

A grammar reaches the loop as one `TokenConstraint` held by the sampler: every
draw (plain steps and each verified position alike) masks the logits for the
output so far, so the constraint follows the output, rejected spans rolled
back included. `stream_generate` also hands it to the `FillSession`, which
asks it for the ids the grammar forces.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from ffwd.config import FillConfig
from ffwd.engine.backend import Backend
from ffwd.engine.events import FinishReason, TokenEvent, TokenOrigin
from ffwd.engine.loop import SpanPolicy, generate_step
from ffwd.engine.sampling import SamplingParams, TokenConstraint, make_sampler
from ffwd.engine.text import OutputText
from ffwd.fill import (
    ConstrainingSource,
    FillPlan,
    FillRow,
    FillSession,
    FillStats,
    ProposalSource,
    TraceWriter,
)
from ffwd.templates.formats.base import Delta, Rule, ToolCall, ToolCallContext, ToolParser
from ffwd.templates.text import decode_ids


@dataclass(slots=True)
class GenerationResult:
    """The whole generation, the last item of `stream_generate`.

    `content` and `calls` are the join of the deltas the events carried (plus
    `tail`, what was held back until the end), so they are exactly what a
    streaming client assembled. `stop_sequence` is the stop string that ended
    the text, if one did.
    """

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
    content: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    tail: tuple[Delta, ...] = ()
    stop_sequence: str | None = None
    dropped_calls: int = 0  # calls that repeated an earlier one (dropped; the run stopped)
    fill: str = "off"  # the fill mode that ran
    grammar: bool = False  # whether a grammar constrained the output
    replica: str | None = None  # the replica that ran it (scale-out)

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

    def ffwd_block(self) -> dict[str, Any]:
        """What every API response reports in its ``ffwd`` object."""
        injected: dict[str, int] = {}
        for origin in self.origins:
            if origin != "sampled":
                injected[origin] = injected.get(origin, 0) + 1
        block = {
            "fill": self.fill, "grammar": self.grammar, "stats": self.stats.as_dict(),
            "forward_calls": self.forward_calls, "injected_by_origin": injected,
            "dropped_calls": self.dropped_calls,
            "seconds": round(self.seconds, 4), "prefill_seconds": round(self.prefill_seconds, 4),
        }
        return block if self.replica is None else {**block, "replica": self.replica}


def open_session(
    plan: FillPlan | None,
    prompt_ids: Sequence[int],
    fill: FillConfig,
    eos_ids: frozenset[int],
    *,
    decode: Callable[[Sequence[int]], str] | None = None,
    strict_context: ToolCallContext | None = None,
    grammar: ConstrainingSource | None = None,
    copies: Sequence[ProposalSource] = (),
) -> FillSession | None:
    """The request's `FillSession`, or None for plain decoding.

    ``strict`` drops the plan's echo settings; ``echo`` uses the plan's own or
    the config's, and the other `copies` sources (earlier requests' outputs)
    after it. The backend's EOS ids are added to the plan's so no span ever
    carries one. A `grammar` proposes the ids it forces, after the strict rows.
    """
    if plan is None or fill.mode == "off":
        return None
    echo = None if fill.mode == "strict" else plan.echo or fill.echo_config()
    plan = replace(plan, echo=echo, eos=tuple(sorted(set(plan.eos) | eos_ids)))
    return FillSession(
        plan, prompt_ids,
        max_span=fill.max_span, append_chunk_size=fill.append_chunk_size,
        decode=decode, strict_context=strict_context, grammar=grammar,
        sources=copies if fill.mode == "echo" else (),
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
    parser: ToolParser | None = None,
    rules: Mapping[FillRow, Sequence[Rule]] | None = None,
    max_calls: int | None = None,
    constraint: TokenConstraint | None = None,
    cancelled: Callable[[], bool] | None = None,
    policy: SpanPolicy | None = None,
    logprobs: int | None = None,
    copies: Sequence[ProposalSource] = (),
) -> Iterator[TokenEvent | GenerationResult]:
    """Prefill `prompt_ids` and stream the generation's events, then its result.

    `plan=None` or fill ``off`` decodes plainly (``echo`` adds the `copies` after
    its own index); `policy` sizes verify spans. `parser` reads tool calls out of
    the output (and with the plan's `rules`, gates the rows); `max_calls` ends the
    generation after that many. `constraint` (a grammar) masks every draw and has
    its forced ids fast-forwarded. `logprobs`: see `generate_step`.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens={max_tokens}: expected an integer >= 1")
    fill = fill or FillConfig()
    t0 = time.perf_counter()
    calls0 = backend.forward_calls
    # 1. prefill, then the request's text layer and fill session (rows gated on its parser).
    cached = backend.prefill(list(prompt_ids))
    t_prefill = time.perf_counter() - t0
    out = OutputText(tokenizer, stop, parser, max_calls)
    session = _session(plan, prompt_ids, fill, backend.eos_ids, tokenizer, rules, out, constraint,
                       copies)
    trace = TraceWriter(fill.trace_path) if fill.trace_path and session else None
    steps = generate_step(
        backend, make_sampler(params, prompt_ids, constraint), max_tokens=max_tokens,
        session=session, policy=policy, trace=trace, check_cache=fill.trace_checks,
        logprobs=logprobs,
    )
    # 2. every event through the text layer, every stop checked after each id.
    ids: list[int] = []
    origins: list[TokenOrigin] = []
    finish = yield from _events(steps, out, backend.eos_ids, cancelled, ids, origins, trace)
    # 3. what was held back, and the joined reply.
    tail = out.finish(cut=finish != "stop" or out.stop_sequence is not None)
    finish = "tool_calls" if out.complete_calls and finish == "stop" else finish
    yield GenerationResult(
        text=out.text, token_ids=ids, origins=origins, finish_reason=finish,
        stats=session.stats if session is not None else FillStats(decode_steps=len(ids)),
        forward_calls=backend.forward_calls - calls0, prompt_tokens=len(prompt_ids),
        cached_tokens=cached, seconds=time.perf_counter() - t0, prefill_seconds=t_prefill,
        content=out.content, calls=out.calls, tail=tail, stop_sequence=out.stop_sequence,
        dropped_calls=out.repeats.dropped, fill=fill.mode if session is not None else "off",
        grammar=constraint is not None,
    )


def _events(
    steps: Generator[TokenEvent, None, None], out: OutputText, eos: frozenset[int],
    cancelled: Callable[[], bool] | None, ids: list[int], origins: list[TokenOrigin],
    trace: TraceWriter | None,
) -> Generator[TokenEvent, None, FinishReason]:
    """The loop's events with their text, until a stop; returns why it stopped. The
    emitted ids (EOS excluded) and their origins go into `ids` and `origins`; the loop
    and its `trace` are closed at the end, however it came."""
    try:
        for event in steps:
            if event.id in eos:
                return "stop"
            ids.append(event.id)
            origins.append(event.origin)
            yield out.feed(event)
            reason = _stopped(out, cancelled)
            if reason is not None:
                return reason
        return "length"
    finally:
        steps.close()
        if trace is not None:
            trace.close()


def _session(
    plan: FillPlan | None, prompt_ids: Sequence[int], fill: FillConfig, eos_ids: frozenset[int],
    tokenizer: Any, rules: Mapping[FillRow, Sequence[Rule]] | None, out: OutputText,
    constraint: TokenConstraint | None, copies: Sequence[ProposalSource],
) -> FillSession | None:
    """`open_session`, its rows gated on the parser that reads the reply (`out`), which
    tells the session when markup fails to parse (then the rows disarm)."""
    if rules and out.parser is None:
        raise ValueError("template rows need the parser that gates them")
    gate = ToolCallContext(rules, out.parser, lambda: out.ready) if rules and out.parser else None
    session = open_session(
        plan, prompt_ids, fill, eos_ids, decode=lambda ids: decode_ids(tokenizer, ids),
        strict_context=gate, copies=copies,
        grammar=constraint if isinstance(constraint, ConstrainingSource) else None)
    if session is not None:
        out.on_parse_failure = session.note_parse_failure
    return session


def _stopped(out: OutputText, cancelled: Callable[[], bool] | None) -> FinishReason | None:
    """A text-level stop after the last id: a stop string, the calls made, the client gone."""
    if out.stop_sequence is not None:
        return "stop"
    if out.calls_done:
        return "tool_calls"
    if cancelled is not None and cancelled():
        return "cancelled"
    return None


def generate(
    backend: Backend,
    tokenizer: Any,
    prompt_ids: Sequence[int],
    params: SamplingParams | None = None,
    **kwargs: Any,
) -> GenerationResult:
    """Run `stream_generate` to the end and return its result (same arguments)."""
    result: GenerationResult | None = None
    for item in stream_generate(backend, tokenizer, prompt_ids, params, **kwargs):
        if isinstance(item, GenerationResult):
            result = item
    assert result is not None
    return result
