"""Text-level generation: one prepared request in, its events out, the last with the result.

* `Prepared` is a generation ready to run: prompt ids, sampling, limits, fill
  settings and plan, how tool calls are read (`ToolCalls`), the grammar, and
  the copy sources of earlier outputs. What a run changes (the tool-call
  parser, the grammar's matcher) each run makes fresh from it.
* `stream_steps(backend, tokenizer, prepared)` keeps what the cache holds of
  the prompt, asks for the rest as a prompt `Forward`, runs
  `ffwd.engine.core.decode.generate_step`, passes each `TokenEvent` through the
  request's `OutputText` (its text, stop strings and tool-call deltas) and
  yields it, with the forwards the steps need; the first event carries what
  the prefill read (`PromptRead`), the last the `GenerationResult`. Every
  stop is decided here, on every emitted id, injected ones included: the
  model's EOS, `max_tokens` (where the loop ends), a stop string, the calls
  the request may make, and a cancelled client. The engine's loop
  (`ffwd.engine.core.scheduler`) drives it beside other sequences.
* `stream_generate` is the same on one backend alone, on the caller's thread
  (`drive` runs its forwards); `generate` runs it to its result, from the same
  settings given as keywords (for scripts and tests).

The text layer and the fill session meet only here: the session's template
rows are gated on the text layer's parser (`OutputText` is their context),
and markup that fails to parse after a row fired is reported to the session,
which disarms its rows. A grammar reaches the loop as one `TokenConstraint`
held by the sampler, so every draw (plain steps and verified positions alike)
is masked for the output so far; the session also asks it for the ids it
forces.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import torch

from ffwd.config import FillConfig
from ffwd.engine.backend import Backend
from ffwd.engine.core.batch import Forward
from ffwd.engine.core.decode import SpanPolicy, Steps, T, generate_step
from ffwd.engine.events import FinishReason, GenerationResult, PromptRead, TokenEvent
from ffwd.engine.sample.sampling import (
    ConstraintFactory,
    SamplingParams,
    TokenConstraint,
    make_sampler,
)
from ffwd.engine.sample.text import OutputText, Thinking, ToolCalls
from ffwd.fill import (
    ConstrainingSource,
    FillPlan,
    FillSession,
    FillStats,
    ProposalSource,
    TraceWriter,
)
from ffwd.fill.spans import SharedAcceptance
from ffwd.templates.text import decode_ids


@dataclass(frozen=True)
class Prepared:
    """A generation ready to run (see the module docstring).

    `plan=None` or fill ``off`` decodes plainly; under ``echo`` the `copies`
    (earlier requests' sources) are asked beside the request's own echo, and
    `acceptance` is what the server learned of copies across requests (the
    session's estimates start there; `ffwd.fill.spans.SharedAcceptance`).
    `calls` reads tool calls out of the output and gates the plan's template
    rows; `thinking` keeps the model's reasoning apart from them; `grammar`
    masks every draw and has its forced ids fast-forwarded.
    `logprobs` is the number of alternatives per id (0: its own only; None: no
    log-probabilities).
    """

    prompt_ids: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    max_tokens: int = 256
    stop: Sequence[str] = ()
    fill: FillConfig = field(default_factory=FillConfig)
    plan: FillPlan | None = None
    calls: ToolCalls | None = None
    thinking: Thinking | None = None
    grammar: ConstraintFactory | None = None
    logprobs: int | None = None
    copies: Sequence[ProposalSource] = ()
    acceptance: SharedAcceptance | None = None


def stream_steps(
    backend: Backend,
    tokenizer: Any,
    prep: Prepared,
    *,
    cancelled: Callable[[], bool] | None = None,
    policy: SpanPolicy | None = None,
    done: Callable[[GenerationResult], None] | None = None,
) -> Steps[None]:
    """`prep`'s events and the forwards they need; the last event carries the result.

    `cancelled` is asked after every emitted id; `policy` sizes verify spans
    (default: the backend's cost curve, `ffwd.engine.core.decode.default_policy`); `done` hears
    the result before the last event goes.
    """
    if prep.max_tokens < 1:
        raise ValueError(f"max_tokens={prep.max_tokens}: expected an integer >= 1")
    t0 = time.perf_counter()
    calls0 = backend.forward_calls
    # 1. the prompt: what the cache holds of it is kept, the rest forwarded.
    cached = backend.keep_prefix(prep.prompt_ids)
    yield Forward(list(prep.prompt_ids[cached:]), prompt=True)
    t_prefill = time.perf_counter() - t0
    # 2. the request's text layer, grammar and fill session.
    out = OutputText(tokenizer, prep.stop, prep.calls, prep.thinking)
    constraint = prep.grammar.new_constraint() if prep.grammar is not None else None
    session = open_session(prep, backend.eos_ids, out, constraint, partial(decode_ids, tokenizer))
    trace = TraceWriter(prep.fill.trace_path) if prep.fill.trace_path and session else None
    steps = _token_steps(backend, prep, constraint, session, policy, trace)
    # 3. every event through the text layer, every stop checked after each id.
    finish: FinishReason = "length"
    read = PromptRead(len(prep.prompt_ids), cached)  # on the first event
    sent: torch.Tensor | None = None
    try:
        while (item := _next(steps, sent)) is not None:
            sent = None
            if isinstance(item, Forward):
                sent = yield item  # the rows go back into the steps
                continue
            if item.id in backend.eos_ids:
                finish = "stop"
                break
            first = not out.ids
            yield out.feed(item, read if first else None)
            _note_failure(out, session)
            if (reason := _stopped(out, cancelled)) is not None:
                finish = reason
                break
    finally:
        steps.close()  # commits what was emitted of a span in flight
        if trace is not None:
            trace.close()
    # 4. what was held back, and the whole generation, on the last event.
    text, tail = out.finish(cut=finish != "stop" or out.stop_sequence is not None)
    _note_failure(out, session)
    result = _result(prep, out, session, finish, constraint is not None,
                     backend.forward_calls - calls0, cached, t0, t_prefill)
    if done is not None:
        done(result)
    yield TokenEvent.last(result, text, tail)


def _result(prep: Prepared, out: OutputText, session: FillSession | None,
            finish: FinishReason, grammar: bool, forwards: int, cached: int, t0: float,
            t_prefill: float) -> GenerationResult:
    """The whole generation, from its text layer and its fill session."""
    return GenerationResult(
        text=out.text, token_ids=out.ids, origins=out.origins,
        finish_reason="tool_calls" if out.complete_calls and finish == "stop" else finish,
        stats=session.stats if session is not None else FillStats(decode_steps=len(out.ids)),
        forward_calls=forwards, prompt_tokens=len(prep.prompt_ids), cached_tokens=cached,
        seconds=time.perf_counter() - t0, prefill_seconds=t_prefill, content=out.content,
        calls=out.calls, stop_sequence=out.stop_sequence, dropped_calls=out.repeats.dropped,
        reasoning=out.reasoning_text, reasoning_tokens=out.reasoning_tokens,
        fill=prep.fill.mode if session is not None else "off", grammar=grammar,
    )


def _token_steps(backend: Backend, prep: Prepared, constraint: TokenConstraint | None,
                 session: FillSession | None, policy: SpanPolicy | None,
                 trace: TraceWriter | None) -> Steps[None]:
    """The token-level steps of `prep` (`generate_step`), sampling under `constraint`."""
    return generate_step(
        backend, make_sampler(prep.params, prep.prompt_ids, constraint),
        max_tokens=prep.max_tokens, session=session, policy=policy, trace=trace,
        check_cache=prep.fill.trace_checks, logprobs=prep.logprobs,
    )


def stream_generate(
    backend: Backend,
    tokenizer: Any,
    prep: Prepared,
    *,
    cancelled: Callable[[], bool] | None = None,
    policy: SpanPolicy | None = None,
) -> Iterator[TokenEvent]:
    """`stream_steps` on `backend` alone, on this thread: `prep`'s events, the last with
    the result."""
    return drive(backend, stream_steps(backend, tokenizer, prep, cancelled=cancelled,
                                       policy=policy))


def run_forward(backend: Backend, forward: Forward) -> torch.Tensor:
    """`forward` on `backend` alone, on this thread: every row, or the last row as
    ``(1, vocab)``; a prompt in chunks of at most `Backend.prompt_chunk` ids."""
    if forward.rows:
        return backend.forward(forward.ids)
    ids = forward.ids
    while len(ids) > (n := backend.prompt_chunk if forward.prompt else backend.max_append):
        backend.append(ids[:n])
        ids = ids[n:]
    return backend.append(ids)[None]


def drive(backend: Backend, steps: Steps[T]) -> Generator[TokenEvent, None, T]:
    """Run `steps` of one sequence on `backend` alone: its forwards here, its events out.

    Closing the result closes `steps` (its fill session commits what was emitted).
    """
    sent: torch.Tensor | None = None
    try:
        while True:
            item = steps.send(sent)
            if isinstance(item, Forward):
                sent = run_forward(backend, item)
            else:
                sent = None
                yield item
    except StopIteration as stop:
        return stop.value
    finally:
        steps.close()




def _next(steps: Steps[None], sent: torch.Tensor | None) -> TokenEvent | Forward | None:
    """The steps' next item, given what was asked (None once they are done)."""
    try:
        return steps.send(sent)
    except StopIteration:
        return None


def open_session(
    prep: Prepared,
    eos_ids: frozenset[int],
    out: OutputText,
    constraint: TokenConstraint | None,
    decode: Callable[[Sequence[int]], str],
) -> FillSession | None:
    """The request's `FillSession`, or None for plain decoding.

    ``strict`` drops the plan's echo settings; ``echo`` uses the plan's own or
    the config's, and the `copies` after it. The backend's EOS ids are added to
    the plan's so no span ever carries one. The template rows are gated on the
    text layer `out`; a grammar (`constraint`) proposes the ids it forces, after
    the rows. `decode` renders ids for the trace.
    """
    fill, plan = prep.fill, prep.plan
    if plan is None or fill.mode == "off":
        return None
    echo = None if fill.mode == "strict" else plan.echo or fill.echo_config()
    plan = replace(plan, echo=echo, eos=tuple(sorted(set(plan.eos) | eos_ids)))
    return FillSession(
        plan, prep.prompt_ids,
        max_span=fill.max_span, append_chunk_size=fill.append_chunk_size, decode=decode,
        strict_context=out if out.parser is not None else None,
        grammar=constraint if isinstance(constraint, ConstrainingSource) else None,
        sources=prep.copies if fill.mode == "echo" else (), shared=prep.acceptance,
    )


def _note_failure(out: OutputText, session: FillSession | None) -> None:
    """Markup that did not parse (no grammar held it): the session disarms its rows."""
    if out.failed and session is not None:
        session.note_parse_failure()


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
    *,
    policy: SpanPolicy | None = None,
    **settings: Any,
) -> GenerationResult:
    """Run a generation to its result: `stream_generate` of ``Prepared(prompt_ids,
    params, **settings)`` (a setting given as None keeps its default)."""
    given = {k: v for k, v in settings.items() if v is not None}
    prep = Prepared(list(prompt_ids), params or SamplingParams(), **given)
    for event in stream_generate(backend, tokenizer, prep, policy=policy):
        if event.result is not None:
            return event.result
    raise AssertionError("a stream always ends with its result")
