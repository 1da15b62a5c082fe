"""One sequence's decode, step by step: sample, push, append, verify, rewind.

`generate_step` yields a `TokenEvent` per emitted id, sampled or injected, and
a `Forward` wherever it needs the model: whoever drives it runs that forward
and sends back its logits (every row, ``(n, vocab)``, or the last row only,
``(1, vocab)``). The engine's loop (`ffwd.engine.core.scheduler`) runs the forwards
of every running sequence in one step; `ffwd.engine.core.generate.drive` runs one
sequence's forwards on its backend directly (a library caller, a test).
Everything else the step does to the cache (a rewind, a checkpoint) it calls
on the backend itself, between forwards. It continues from a prefilled
backend, stops after an EOS id or `max_tokens` ids, and never asks for a
forward whose result nobody reads.
Closing it early (a stop string, a cancelled client) is safe: the fill session
is committed with what was actually emitted.

With a `FillSession`, every sampled id is pushed and the session answers:

* nothing: a plain step (forward the sampled id, sample the next);
* an ``assert`` span: forwarded with the sampled id, chunked where the
  backend's cost curve says several forwards are cheaper than one;
* a ``verify`` span: the `SpanPolicy` decides how many of its ids to forward
  and whether to check position 0 alone first (`ffwd.fill.spans`), or to
  decline it. The model's own logits keep the agreed prefix; the rest is
  undone (`Backend.mark`/`undo`: a rewind, or for recurrent caches a restored
  checkpoint and the kept ids forwarded again). A verify span that starts with
  determined ids (`Proposal.asserted`: a row or the grammar, extended by a
  copy) keeps those whatever the model says and verifies only the rest.

No module state: one generation per backend at a time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import torch

from ffwd.engine.backend import Backend, Mark
from ffwd.engine.core.batch import Forward
from ffwd.engine.cost.surface import Pricing
from ffwd.engine.events import Alternative, TokenEvent, TokenOrigin
from ffwd.engine.sample.sampling import Sampler, SpanVerdict, verify_span
from ffwd.fill import FillSession, Proposal, TraceRecord, TraceWriter
from ffwd.fill.spans import SpanChoice, choose_span, chunk_sizes

SpanPolicy = Callable[[Proposal, FillSession], SpanChoice]
T = TypeVar("T")
# What a sequence's steps yield (events and the forwards they need) and are sent back (rows).
Steps = Generator[TokenEvent | Forward, torch.Tensor | None, T]


def token_logprob(
    row: torch.Tensor, token_id: int, top: int = 0
) -> tuple[float, tuple[Alternative, ...]]:
    """`token_id`'s log-probability under the logits `row`, and the `top` best ids."""
    lp = torch.log_softmax(row.float(), dim=-1)
    best: tuple[Alternative, ...] = ()
    if top > 0:
        vals, ids = torch.topk(lp, min(top, lp.shape[-1]))
        best = tuple(Alternative(i, v) for i, v in zip(ids.tolist(), vals.tolist(), strict=True))
    return float(lp[token_id]), best


def cost_policy(surface: Pricing, depth: Callable[[], int] = lambda: 0) -> SpanPolicy:
    """Verify spans priced by `surface` at the cache's `depth()` now and the session's
    acceptance (`choose_span`)."""

    def decide(proposal: Proposal, session: FillSession) -> SpanChoice:
        rates = session.acceptance(proposal)
        return choose_span(surface.at(depth()), rates, len(proposal.ids), surface.undo)

    return decide


def fixed_policy(probe: bool) -> SpanPolicy:
    """Every verify span whole: together with the sampled id, or after probing position 0.

    For backends without a measured curve, and for comparing the two shapes.
    """

    def decide(proposal: Proposal, session: FillSession) -> SpanChoice:
        return SpanChoice(len(proposal.ids), probe, 0.0, 0.0, 0.0)

    return decide


def default_policy(backend: Backend) -> SpanPolicy:
    """The backend's measured curve when it has one; else probe first on CPU, where a
    2-id forward costs clearly more than a 1-id one, and the combined forward elsewhere."""
    if backend.pricing is not None:
        return cost_policy(backend.pricing, lambda: backend.cache_len)
    return fixed_policy(backend.device.type != "cuda")


@dataclass(slots=True)
class _Run:
    """What one generation's step functions share (no logic of its own)."""

    backend: Backend
    sampler: Sampler
    session: FillSession | None
    max_tokens: int
    policy: SpanPolicy
    trace: TraceWriter | None
    curve: Pricing | None
    logprobs: int | None = None  # top alternatives per token; None: no logprobs
    margin: float = 0.0  # greedy verify keeps a draft this close to the best logit
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

    def event(self, token: int, origin: TokenOrigin, row: torch.Tensor | None) -> TokenEvent:
        """The event of an emitted id; its logprob read from `row` when asked for."""
        if self.logprobs is None or row is None:
            return TokenEvent(token, origin)
        logprob, top = token_logprob(row, token, self.logprobs)
        return TokenEvent(token, origin, logprob, top)


def generate_step(
    backend: Backend,
    sampler: Sampler,
    *,
    max_tokens: int,
    session: FillSession | None = None,
    policy: SpanPolicy | None = None,
    trace: TraceWriter | None = None,
    check_cache: bool = False,
    logprobs: int | None = None,
) -> Steps[None]:
    """The ids that follow what `backend` holds (prefilled first), and the forwards they
    need (module docstring).

    `session` (optional) proposes spans after each sampled id; `policy` sizes
    verify spans (default: `default_policy`); `trace` gets one record per
    proposal; `check_cache` asserts at every step that the cache holds the
    prompt plus exactly the emitted ids, and that the sampler's constraint (a
    grammar) stands after exactly those ids. With `logprobs` (the number of
    alternatives, 0 for none) every event carries its logprob and `top`, injected
    ids included, read from the rows of the forward that checked them.
    """
    run = _Run(
        backend, sampler, session, max_tokens, policy or default_policy(backend), trace,
        backend.pricing, logprobs, backend.tie_margin,
    )
    prompt_len = backend.cache_len
    # 0. a forced call makes the prompt's own tail a trigger: inject before any sample.
    opening = session.start(max_tokens) if session is not None else None
    if opening is not None:
        token = yield from _assert_step(run, [], opening)
    else:
        token = run.pick(backend.last_logits)
    while token is not None:
        if check_cache:
            _check_invariants(run, prompt_len)
        # 1. emit the sampled id; an EOS id ends here.
        run.out.append(token)
        yield run.event(token, "sampled", run.row)
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
            token = run.pick((yield from _forward(run, [token], rows=False)))
        # 4. determined ids: forward them together with the sampled id.
        elif proposal.policy == "assert":
            token = yield from _assert_step(run, [token], proposal)
        # 5. likely ids: forward what pays, keep what the model agrees with, rewind the rest.
        else:
            token = yield from _verify_step(run, token, proposal)


def _check_invariants(run: _Run, prompt_len: int) -> None:
    """The cache, and the constraint when there is one, stand after the emitted ids."""
    b, emitted = run.backend, len(run.out)
    if b.cache_len != prompt_len + emitted:
        raise AssertionError(
            f"cache holds {b.cache_len} ids, expected prompt {prompt_len} + emitted {emitted}"
        )
    constraint = run.sampler.constraint
    if constraint is not None and constraint.position != emitted:
        raise AssertionError(
            f"the grammar stands after {constraint.position} ids, expected {emitted}"
        )


def _forward(run: _Run, ids: list[int], *, rows: bool) -> Steps[torch.Tensor]:
    """One forward: every row, or the last row only (as ``(vocab,)``)."""
    out = yield Forward(ids, rows)
    assert out is not None
    return out if rows else out[-1]


def _emit(
    run: _Run, proposal: Proposal, ids: Sequence[int], rows: torch.Tensor | None,
    tested: int | None = None,
) -> Steps[None]:
    """Yield injected ids (row j of `rows` predicts ids[j]); commit however many were taken."""
    assert run.session is not None
    sent = 0
    try:
        for j, tok in enumerate(ids):
            run.out.append(tok)
            sent += 1
            row = None if rows is None else rows[j]
            yield run.event(tok, proposal.origin_at(j), row)
    finally:
        run.session.commit(proposal, sent, tested)


def _forward_chunks(run: _Run, ids: list[int], all_rows: bool) -> Steps[torch.Tensor]:
    """Append `ids` in chunks; every row when `all_rows`, else the last row only.

    Chunks are `append_chunk_size` when the caller set one, else what the cost
    curve says is cheapest (one forward of everything, on most curves).
    """
    b = run.backend
    size = min((run.session.append_chunk_size if run.session else 0) or b.max_append, b.max_append)
    if run.curve is not None and size == b.max_append:
        sizes = chunk_sizes(len(ids), run.curve.at(b.cache_len, "last"), size)
    else:
        sizes = [size] * (-(-len(ids) // size))
    rows: list[torch.Tensor] = []
    start = 0
    for n in sizes:
        part = ids[start : start + n]
        start += n
        if part:
            out = yield from _forward(run, part, rows=all_rows)
            rows.append(out if all_rows else out[None])
    return torch.cat(rows) if all_rows else rows[-1][0]


def _assert_step(
    run: _Run, head: list[int], proposal: Proposal, n: int | None = None
) -> Steps[int | None]:
    """Forward `head` (the sampled id, or nothing at the start) and the span (its first
    `n` ids when given) in one go."""
    span = list(proposal.ids[:n])
    last = len(run.out) + len(span) >= run.max_tokens
    logits: torch.Tensor | None = None
    rows: torch.Tensor | None = None
    # A span that uses up the budget needs no forward, unless its rows are read.
    if not last or run.all_rows:
        # Row j must predict span position j: without a head that is the row before the
        # span, the prompt's last (a verify step's undo leaves none, but then a head exists).
        prev = None if head or not run.all_rows else run.backend.last_logits
        logits = yield from _forward_chunks(run, [*head, *span], all_rows=run.all_rows)
    if run.all_rows and logits is not None:
        rows = logits if prev is None else torch.cat([prev[None], logits])
        _write_trace(run, proposal, rows[: len(span)], len(span))
        logits = rows[-1]
    yield from _emit(run, proposal, span, rows, tested=len(span))
    if last or logits is None:
        return None
    return run.pick(logits)


def _verify_step(run: _Run, token: int, proposal: Proposal) -> Steps[int | None]:
    b, sampler, session = run.backend, run.sampler, run.session
    assert session is not None
    head = proposal.asserted  # determined ids ahead of the copy: taken whatever it says
    if b.max_append < 2 or not (b.can_rewind or b.can_checkpoint):
        session.note_verify_unsupported()
        _write_trace(run, proposal, None, 0, "unsupported")
        if head:
            return (yield from _assert_step(run, [token], proposal, head))
        session.commit(proposal, 0)
        return run.pick((yield from _forward(run, [token], rows=False)))
    choice = run.policy(proposal, session)
    span = list(proposal.ids[: max(head, min(choice.length, b.max_append - 1))])
    if not span:
        session.decline(proposal)
        _write_trace(run, proposal, None, 0, "declined", choice)
        return run.pick((yield from _forward(run, [token], rows=False)))
    if choice.probe and not head:
        # Position 0 alone first: a rejection there costs exactly a plain step.
        row0 = yield from _forward(run, [token], rows=False)
        first = verify_span(row0[None], span[:1], sampler, run.out, run.margin)
        if first.accepted == 0:
            session.note_verify_event()
            _write_trace(run, proposal, row0[None], 0, "probe", choice)
            session.commit(proposal, 0, tested=1)
            run.row = row0
            return first.next_id
        replay_from: list[int] = []
        mark, ms = _mark(b)
        rows = torch.cat([row0[None], (yield from _forward(run, span, rows=True))])
        # Position 0 is decided; each position gets exactly one acceptance draw.
        rest = verify_span(rows[1:], span[1:], sampler, [*run.out, span[0]], run.margin)
        verdict = SpanVerdict(1 + rest.accepted, rest.next_id)
    else:
        replay_from = [token]
        mark, ms = _mark(b)
        ids = [token, *span]  # a long head may need more than one forward
        rows = (yield from (_forward(run, ids, rows=True) if len(ids) <= b.max_append
                            else _forward_chunks(run, ids, all_rows=True)))
        rest = verify_span(rows[head:], span[head:], sampler, [*run.out, *span[:head]],
                           run.margin)
        verdict = SpanVerdict(head + rest.accepted, rest.next_id)
    kept = span[: verdict.accepted]
    ms += yield from _cut_back(run, mark, replay_from + kept, len(span) - len(kept))
    session.note_verify_event(ms)
    _write_trace(run, proposal, rows[: len(span)], verdict.accepted,
                 "probe" if choice.probe else "combined", choice)
    yield from _emit(run, proposal, kept, rows, tested=len(span))
    if len(run.out) >= run.max_tokens:
        return None
    run.row = rows[verdict.accepted]  # the replacement's row, or the one after the span
    return verdict.next_id


def _mark(b: Backend) -> tuple[Mark, float]:
    """Where the cache stands before a verify forward, and what marking it cost in ms
    (a checkpoint, where the cache cannot rewind)."""
    t0 = time.perf_counter()
    mark = b.mark()
    return mark, (time.perf_counter() - t0) * 1000


def _cut_back(run: _Run, mark: Mark, kept: list[int], rejected: int) -> Steps[float]:
    """Drop the rejected tail, keeping `kept` (what follows the mark). Returns the ms
    spent undoing; ids a restored checkpoint lost are forwarded again (counted in
    `forward_calls`, not in the ms)."""
    if rejected == 0:
        return 0.0
    t0 = time.perf_counter()
    replay = run.backend.undo(mark, kept)
    ms = (time.perf_counter() - t0) * 1000
    if replay:
        yield from _forward(run, replay, rows=False)
    return ms if mark.snapshot is not None else 0.0


def _write_trace(
    run: _Run,
    proposal: Proposal,
    rows: torch.Tensor | None,
    accepted: int,
    decision: str = "assert",
    choice: SpanChoice | None = None,
) -> None:
    """One trace record: the model's own argmax at each forwarded span position next to
    the span, and what the span policy decided (``declined``: nothing forwarded)."""
    if run.trace is None:
        return
    assert run.session is not None
    actual = rows.argmax(dim=-1).tolist() if rows is not None else []
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
            decision=decision,
            run=proposal.run,
            chosen=choice.length if choice else len(proposal.ids) if decision == "assert" else 0,
            expected_ids=round(choice.expected_ids, 4) if choice else None,
            expected_ms=round(choice.expected_ms, 4) if choice else None,
            plain_ms=round(choice.plain_ms, 4) if choice else None,
        )
    )
