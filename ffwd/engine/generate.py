"""The decode loop: sample, push, append, verify, rewind, stop.

Three layers, each built on the one below:

* `generate_step` yields `TokenEvent(token_id, origin)`, one per emitted id,
  sampled or injected. It continues from a prefilled backend, stops after an
  EOS id or `max_tokens` ids, and never does a forward whose result nobody
  reads. Closing it early (a stop string, a cancelled client) is safe: the
  fill session is committed with what was actually emitted.
* `stream_generate` prefills, runs `generate_step`, and yields `StreamChunk`s
  of released text (stop strings held back until they can no longer match),
  checking EOS, stop strings and cancellation on every id, injected ones
  included. Its last chunk carries the `GenerationResult`.
* `generate` joins the stream into a `GenerationResult`.

Fill in the loop: with a `FillPlan` and fill not ``off``, every sampled id is
pushed to a `FillSession`. An ``assert`` span rides in the same forward as the
sampled id. A ``verify`` span is checked against the model's own logits with
`verify_span`; the rejected tail is rewound (or, for recurrent caches, the
state is restored from a checkpoint and the kept ids are forwarded again).

No module state: one generation per backend at a time, from any thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import torch

from ffwd.config import FillConfig
from ffwd.engine.backend import Backend
from ffwd.engine.sampling import (
    Sampler,
    SamplingParams,
    SpanVerdict,
    make_sampler,
    verify_span,
)
from ffwd.fill import FillPlan, FillSession, FillStats, Proposal, TraceRecord, TraceWriter
from ffwd.fill.session import StrictFillContext

TokenOrigin = Literal["sampled", "template", "schema", "echo", "ngram", "mtp"]
FinishReason = Literal["stop", "length", "cancelled"]


@dataclass(frozen=True, slots=True)
class TokenLogprob:
    """The model's own log-probability of an emitted id (raw logits, before any sampling
    setting) and the `top` most likely ids at that position, most likely first."""

    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True, slots=True)
class TokenEvent:
    token_id: int
    origin: TokenOrigin
    logprob: TokenLogprob | None = None  # when the generation asked for logprobs


def token_logprob(row: torch.Tensor, token_id: int, top: int = 0) -> TokenLogprob:
    """`token_id`'s log-probability under the logits `row`, and the `top` best ids."""
    lp = torch.log_softmax(row.float(), dim=-1)
    best: tuple[tuple[int, float], ...] = ()
    if top > 0:
        vals, ids = torch.topk(lp, min(top, lp.shape[-1]))
        best = tuple(zip(ids.tolist(), vals.tolist(), strict=True))
    return TokenLogprob(float(lp[token_id]), best)


@dataclass(slots=True)
class _Run:
    """What one generation's step functions share (no logic of its own)."""

    backend: Backend
    sampler: Sampler
    session: FillSession | None
    max_tokens: int
    probe_first: bool
    trace: TraceWriter | None
    logprobs: int | None = None  # top alternatives per token; None: no logprobs
    out: list[int] = field(default_factory=list)
    row: torch.Tensor | None = None  # the logits the next sampled id is drawn from

    @property
    def all_rows(self) -> bool:
        """Whether assert spans need every row (the trace, or logprobs of injected ids)."""
        return self.trace is not None or self.logprobs is not None

    def pick(self, logits: torch.Tensor) -> int:
        """Sample from `logits`, keeping the row for the id's logprob."""
        self.row = logits
        return self.sampler.sample(logits, self.out)

    def logprob(self, row: torch.Tensor | None, token: int) -> TokenLogprob | None:
        if self.logprobs is None or row is None:
            return None
        return token_logprob(row, token, self.logprobs)


def default_probe_first(backend: Backend) -> bool:
    """Whether verify checks span position 0 alone before forwarding the rest.

    On CPU a forward of 1 + n ids costs clearly more than a forward of one
    (see the engine notes), so a span whose first id is rejected would cost
    more than the plain step it replaces; probing first keeps that case at
    exactly one plain step. On CUDA a short multi-id forward is expected to
    cost about the same as one id (memory-bound; not measured in this
    project yet), so there the span rides along with the sampled id.
    """
    device = getattr(backend, "device", None)
    return not (isinstance(device, torch.device) and device.type == "cuda")


# --- token level ------------------------------------------------------------


def generate_step(
    backend: Backend,
    sampler: Sampler,
    *,
    max_tokens: int,
    session: FillSession | None = None,
    probe_first: bool | None = None,
    trace: TraceWriter | None = None,
    check_cache: bool = False,
    logprobs: int | None = None,
) -> Generator[TokenEvent, None, None]:
    """Yield the ids that follow what `backend` holds (call `backend.prefill` first).

    `session` (optional) proposes spans after each sampled id; `trace` gets one
    record per proposal; `check_cache` asserts after every step that the
    cache holds the prompt plus exactly the emitted ids. With `logprobs` (the
    number of alternatives, 0 for none) every event carries a `TokenLogprob`,
    injected ids included, read from the rows of the forward that checked them.
    """
    run = _Run(
        backend, sampler, session, max_tokens,
        default_probe_first(backend) if probe_first is None else probe_first, trace, logprobs,
    )
    prompt_len = backend.cache_len
    # 0. a forced call makes the prompt's own tail a trigger: inject before any sample.
    opening = session.start(max_tokens) if session is not None else None
    if opening is not None:
        token = yield from _assert_step(run, [], opening)
    else:
        token = run.pick(backend.last_logits)
    while token is not None:
        if check_cache and backend.cache_len != prompt_len + len(run.out):
            raise AssertionError(
                f"cache holds {backend.cache_len} ids, expected prompt {prompt_len} + "
                f"emitted {len(run.out)}"
            )
        # 1. emit the sampled id; an EOS id ends here.
        run.out.append(token)
        yield TokenEvent(token, "sampled", run.logprob(run.row, token))
        if token in backend.eos_ids:
            return
        # 2. ask the fill session what follows, within the remaining budget
        #    (pushed even at the budget's end, so decode_steps counts every sample).
        proposal = session.push(token, max_tokens - len(run.out)) if session else None
        if len(run.out) >= max_tokens:
            if proposal is not None:  # the clamp never lets one through at budget 0
                session.commit(proposal, 0)  # type: ignore[union-attr]
            return
        # 3. nothing known: a plain decode step.
        if proposal is None:
            token = run.pick(backend.append([token]))
        # 4. determined ids: forward them together with the sampled id.
        elif proposal.policy == "assert":
            token = yield from _assert_step(run, [token], proposal)
        # 5. likely ids: forward, keep what the model agrees with, rewind the rest.
        else:
            token = yield from _verify_step(run, token, proposal)


def _emit(
    run: _Run, proposal: Proposal, ids: Sequence[int], rows: torch.Tensor | None
) -> Generator[TokenEvent, None, None]:
    """Yield injected ids (row j of `rows` predicts ids[j]); commit however many were taken."""
    assert run.session is not None
    sent = 0
    try:
        for j, tok in enumerate(ids):
            run.out.append(tok)
            sent += 1
            row = None if rows is None else rows[j]
            yield TokenEvent(tok, proposal.origin, run.logprob(row, tok))
    finally:
        run.session.commit(proposal, sent)


def _forward_chunks(run: _Run, ids: list[int], all_rows: bool) -> torch.Tensor:
    """Append `ids` in chunks of the session's `append_chunk_size` (0: `max_append`).

    Returns logits for every position when `all_rows`, else the last row only.
    """
    b = run.backend
    size = (run.session.append_chunk_size if run.session else 0) or b.max_append
    size = min(size, b.max_append)
    rows: list[torch.Tensor] = []
    for start in range(0, len(ids), size):
        part = ids[start : start + size]
        rows.append(b.forward(part) if all_rows else b.append(part)[None])
    return torch.cat(rows) if all_rows else rows[-1][0]


def _assert_step(
    run: _Run, head: list[int], proposal: Proposal
) -> Generator[TokenEvent, None, int | None]:
    """Forward `head` (the sampled id, or nothing at the start) and the span in one go."""
    span = list(proposal.ids)
    last = len(run.out) + len(span) >= run.max_tokens
    logits: torch.Tensor | None = None
    rows: torch.Tensor | None = None
    # A span that uses up the budget needs no forward, unless its rows are read.
    if not last or run.all_rows:
        prev = run.backend.last_logits
        logits = _forward_chunks(run, [*head, *span], all_rows=run.all_rows)
    if run.all_rows and logits is not None:
        # Row j must predict span position j: without a head that is the row before.
        rows = logits if head else torch.cat([prev[None], logits])
        if run.trace is not None:
            _write_trace(run, proposal, rows[: len(span)], len(span))
        logits = rows[-1]
    yield from _emit(run, proposal, span, rows)
    if last or logits is None:
        return None
    return run.pick(logits)


def _verify_step(
    run: _Run, token: int, proposal: Proposal
) -> Generator[TokenEvent, None, int | None]:
    b, sampler, session = run.backend, run.sampler, run.session
    assert session is not None
    if b.max_append < 2 or not (b.can_rewind or b.can_checkpoint):
        session.commit(proposal, 0)
        session.note_verify_unsupported()
        return run.pick(b.append([token]))
    span = list(proposal.ids[: b.max_append - 1])
    if run.probe_first:
        # Position 0 alone first: a rejection there costs exactly a plain step.
        row0 = b.append([token])
        first = verify_span(row0[None], span[:1], sampler, run.out)
        if first.accepted == 0:
            session.note_verify_event()
            if run.trace is not None:
                _write_trace(run, proposal, row0[None], 0)
            session.commit(proposal, 0)
            run.row = row0
            return first.next_id
        replay_from: list[int] = []
        saved, ms = _checkpoint(b)
        rows = torch.cat([row0[None], b.forward(span)])
        # Position 0 is decided; each position gets exactly one acceptance draw.
        rest = verify_span(rows[1:], span[1:], sampler, [*run.out, span[0]])
        verdict = SpanVerdict(1 + rest.accepted, rest.next_id)
    else:
        replay_from = [token]
        saved, ms = _checkpoint(b)
        rows = b.forward([token, *span])
        verdict = verify_span(rows, span, sampler, run.out)
    ms += _cut_back(b, saved, replay_from + span[: verdict.accepted], len(span) - verdict.accepted)
    session.note_verify_event(ms)
    if run.trace is not None:
        _write_trace(run, proposal, rows[: len(span)], verdict.accepted)
    yield from _emit(run, proposal, span[: verdict.accepted], rows)
    if len(run.out) >= run.max_tokens:
        return None
    run.row = rows[verdict.accepted]  # the replacement's row, or the one after the span
    return verdict.next_id


def _checkpoint(b: Backend) -> tuple[object | None, float]:
    """A checkpoint when the cache cannot rewind (None when it can), and its cost in ms."""
    if b.can_rewind:
        return None, 0.0
    t0 = time.perf_counter()
    saved = b.checkpoint()
    return saved, (time.perf_counter() - t0) * 1000


def _cut_back(b: Backend, saved: object | None, kept: list[int], rejected: int) -> float:
    """Drop the rejected tail: rewind, or restore and forward the kept ids again.

    Returns the milliseconds spent restoring (the replay forward is counted in
    `forward_calls`, not here).
    """
    if rejected == 0:
        return 0.0
    if saved is None:
        b.rewind(rejected)
        return 0.0
    t0 = time.perf_counter()
    b.restore(saved)
    ms = (time.perf_counter() - t0) * 1000
    if kept:
        b.append(kept)
    return ms


def _write_trace(run: _Run, proposal: Proposal, rows: torch.Tensor, accepted: int) -> None:
    """One trace record: the model's own argmax at each span position next to the span."""
    assert run.trace is not None and run.session is not None
    actual = rows.argmax(dim=-1).tolist()
    decode = run.session.decode
    run.trace.write(
        TraceRecord(
            origin=proposal.origin,
            policy=proposal.policy,
            generated=len(run.out),
            proposed=list(proposal.ids),
            actual=actual,
            accepted=accepted,
            proposed_text=decode(proposal.ids) if decode else None,
            actual_text=decode(actual) if decode else None,
        )
    )


# --- text level ---------------------------------------------------------------


class Detokenizer:
    """Incremental decoding: each id's text, without re-decoding the whole output.

    Decodes a short window (from the last settled boundary) twice per id and
    releases the new text once it no longer ends in an incomplete character.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self._prefix = 0
        self._read = 0

    def _decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=False))

    def add(self, token_id: int) -> str:
        self.ids.append(token_id)
        return self._release(final=False)

    def flush(self) -> str:
        return self._release(final=True)

    def _release(self, final: bool) -> str:
        before = self._decode(self.ids[self._prefix : self._read])
        now = self._decode(self.ids[self._prefix :])
        if len(now) > len(before) and (final or not now.endswith("\ufffd")):
            self._prefix, self._read = self._read, len(self.ids)
            return now[len(before) :]
        return ""


class StopMatcher:
    """Finds stop strings in streamed text, holding back what could start one."""

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self._pending = ""

    def feed(self, delta: str) -> tuple[str, bool]:
        """Text safe to release and whether a stop string matched (text ends before it)."""
        if not self.stops:
            return delta, False
        buf = self._pending + delta
        hits = [i for i in (buf.find(s) for s in self.stops) if i >= 0]
        if hits:
            self._pending = ""
            return buf[: min(hits)], True
        keep = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(buf)), keep, -1):
                if buf.endswith(s[:k]):
                    keep = k
                    break
        self._pending = buf[len(buf) - keep :]
        return buf[: len(buf) - keep], False

    def flush(self) -> str:
        out, self._pending = self._pending, ""
        return out


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
) -> FillSession | None:
    """The request's `FillSession`, or None for plain decoding.

    ``strict`` drops the plan's echo settings; ``echo`` uses the plan's own or
    the config's. The backend's EOS ids are added to the plan's so no span ever
    carries one.
    """
    if plan is None or fill.fill == "off":
        return None
    echo = None if fill.fill == "strict" else plan.echo or fill.echo_config()
    plan = replace(plan, echo=echo, eos=tuple(sorted(set(plan.eos) | eos_ids)))
    return FillSession(
        plan, prompt_ids,
        max_span=fill.max_span, append_chunk_size=fill.append_chunk_size,
        decode=decode, strict_context=strict_context,
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
    cancelled: Callable[[], bool] | None = None,
    probe_first: bool | None = None,
    logprobs: int | None = None,
) -> Iterator[StreamChunk]:
    """Prefill `prompt_ids` and stream the generation as text chunks.

    `plan=None` or ``fill.fill == "off"`` decodes plainly. Tracing follows
    `fill.trace` (records to `fill.trace_path`; cache checks whenever on).
    `logprobs` (see `generate_step`) puts a `TokenLogprob` on every id's chunk.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens={max_tokens}: expected an integer >= 1")
    fill = fill or FillConfig()
    t0 = time.perf_counter()
    calls0 = backend.forward_calls
    cached = backend.prefill(list(prompt_ids))
    t_prefill = time.perf_counter() - t0
    session = open_session(
        plan, prompt_ids, fill, backend.eos_ids,
        decode=tokenizer.decode, strict_context=strict_context,
    )
    trace = TraceWriter(fill.trace_path) if fill.trace_path and session else None
    steps = generate_step(
        backend, make_sampler(params, prompt_ids), max_tokens=max_tokens, session=session,
        probe_first=probe_first, trace=trace, check_cache=fill.trace_checks, logprobs=logprobs,
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
