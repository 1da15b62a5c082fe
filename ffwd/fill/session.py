"""The per-request proposal table: strict rows, echo, and the running history.

Contract
--------
* `FillSession.push(token_id, budget)` records one *sampled* id and asks every
  source (strict rows, the grammar, echo, caller sources such as recall) what
  follows, and returns one proposal (`ffwd.fill.merge`): the first assert
  proposal that survives the clamp (the head), extended by the copy whose tail
  past it has the most expected kept ids; with no head, that copy alone. A
  copy source whose verified spans keep failing sits out a while (`Backoff`).
* The caller then calls `commit(proposal, accepted)` exactly once with the
  number of ids it actually emitted: all of them for an assert, the agreed
  prefix for a verify, 0 when it declined. Nothing enters the history before
  that commit, so a partial accept needs no rollback here.
* Clamp order: EOS (cut before the first) -> delimiter (echo only; end at the
  first one, inclusive) -> what the grammar admits (when there is one) ->
  min(max_span, budget) -> reject spans shorter than 2.
  An echo proposal that the clamp shortened anywhere but at a delimiter is held
  under ``verify``. A copy's tail past a head is clamped the same way, from the
  head's end.

This module is bookkeeping only: no torch, no tokenizer, no template.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace

from ffwd.fill.echo import EchoConfig, EchoSource
from ffwd.fill.merge import Backoff, extend, pick
from ffwd.fill.proposal import (
    ConstrainingSource,
    ObservingSource,
    Proposal,
    ProposalSource,
)
from ffwd.fill.spans import AcceptanceBook, SharedAcceptance
from ffwd.fill.strict import FILL_KINDS, FillKind, FillRow, StrictFillContext, StrictRowSource

__all__ = ["COPIES", "FILL_KINDS", "FillKind", "FillPlan", "FillRow", "FillSession", "FillStats",
           "StrictFillContext", "StrictRowSource"]

COPIES = ("echo", "recall")  # copy sources: cut at delimiters, held under verify when cut


@dataclass(frozen=True, slots=True)
class FillPlan:
    """Everything a request's session needs: rows, echo settings (None = strict
    only), the ids that end an argument value, and the EOS ids."""

    rows: tuple[FillRow, ...] = ()
    echo: EchoConfig | None = None
    delimiters: frozenset[int] = frozenset()
    eos: tuple[int, ...] = ()


@dataclass(slots=True)
class FillStats:
    """Counters for one request (see the field comments)."""

    events: int = 0  # fills that put at least one id into the stream
    injected: int = 0  # ids injected in all (billed as generated)
    strict: int = 0  # ... from template and schema rows
    grammar: int = 0  # ... forced by the request's grammar
    echo: int = 0  # ... from the echo index
    recall: int = 0  # ... from earlier requests' outputs (ffwd.fill.recall)
    span_lens: list[int] = field(default_factory=list)  # committed span lengths
    # In-flight samples dropped to take an assert fill: 0 on every backend here, since all
    # are synchronous (the sampled id rides in the span's forward; nothing is in flight).
    wasted_samples: int = 0
    parse_fallback: int = 0  # tool-call parses that failed after a strict fill
    index_truncated: int = 0  # spans the clamp shortened
    decode_steps: int = 0  # ids the model sampled (pushes)
    verify_events: int = 0  # verify proposals that reached the forward
    verify_accepted: int = 0  # verify ids the model agreed with
    verify_rejected: int = 0  # verify ids dropped
    verify_unsupported: int = 0  # verify proposals dropped: cache cannot rewind
    checkpoint_ms: float = 0.0  # time spent in checkpoint/restore for verify
    branch_stops: int = 0  # echo spans that ended where the history forked
    declined: int = 0  # verify proposals the span policy judged not worth a forward
    backoffs: int = 0  # times a copy source was paused: its verifies kept failing
    backed_off: int = 0  # copy proposals dropped while their source was paused
    merged: int = 0  # spans where a copy extended determined ids (one forward for both)
    # Every verify proposal, in order: (origin, run, proposed, forwarded, kept) counting the
    # copied ids only (a head's determined ids are not); declined ones forwarded 0.
    verify_spans: list[tuple[str, int, int, int, int]] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class FillSession:
    """One request's proposal sources plus the running history (a TokenView)."""

    def __init__(
        self,
        plan: FillPlan,
        prompt_ids: Sequence[int],
        *,
        max_span: int | None = None,
        append_chunk_size: int | None = None,
        sources: Sequence[ProposalSource] = (),
        decode: Callable[[Sequence[int]], str] | None = None,
        strict_context: StrictFillContext | None = None,
        grammar: ConstrainingSource | None = None,
        shared: SharedAcceptance | None = None,
    ) -> None:
        self.plan = plan
        self.grammar = grammar
        self.stats = FillStats()
        self.decode = decode
        # None: no cap beyond the budget (and the echo walk's own `max_span`).
        self.max_span: float = math.inf if max_span is None else int(max_span)
        if self.max_span < 2:
            raise ValueError(f"fill max_span={max_span}: expected an integer >= 2")
        self.append_chunk_size = 0 if append_chunk_size is None else int(append_chunk_size)
        if self.append_chunk_size < 0:
            raise ValueError(
                f"fill append_chunk_size={append_chunk_size}: expected an integer >= 0"
            )
        self._eos = frozenset(plan.eos)
        self._delimiters = plan.delimiters
        self._strict = StrictRowSource(plan.rows, strict_context)
        srcs: list[ProposalSource] = [self._strict]
        self._first: tuple[ProposalSource, ...] = (self._strict,)
        if grammar is not None:
            srcs.append(grammar)
            self._first = (self._strict, grammar)
        if plan.echo is not None:
            echo_cfg = replace(plan.echo, max_span=int(min(self.max_span, plan.echo.max_span)))
            srcs.append(EchoSource(echo_cfg, prompt_ids, plan.delimiters))
        srcs.extend(sources)
        self._sources = tuple(srcs)
        self._observers = tuple(s for s in srcs if isinstance(s, ObservingSource))
        self._window = max([1, *(s.window_needed for s in srcs)])
        # Seeded with the prompt tail: a re-rendered turn can end mid-scaffold.
        self._tail: list[int] = list(prompt_ids[-self._window :]) if prompt_ids else []
        self._length = len(prompt_ids)
        self._budget: float = math.inf
        self._pending: Proposal | None = None
        # Acceptance per copy source: this request's, on what the server learned (`shared`).
        self._book = AcceptanceBook(shared)
        self._backoff: dict[str, Backoff] = {}

    # --- TokenView ------------------------------------------------------
    @property
    def length(self) -> int:
        return self._length

    @property
    def budget(self) -> float:
        return self._budget

    def tail(self, n: int) -> Sequence[int]:
        if n <= 0:
            return []
        return self._tail[-n:]

    # --- state ----------------------------------------------------------
    @property
    def strict_enabled(self) -> bool:
        return self._strict.enabled

    @property
    def sources(self) -> tuple[ProposalSource, ...]:
        return self._sources

    def start(self, budget: float = math.inf) -> Proposal | None:
        """Before the first sample: what the prompt's own tail determines.

        A forced tool call (``tool_choice`` required or a named function) makes
        the generation prompt's tail a trigger, so its opening markup is
        injected before the model samples anything. Only strict rows and the
        grammar are asked: nothing has been generated yet for a copy to be
        checked against. The commit contract is the same as for `push`.
        """
        if self.stats.decode_steps or self.stats.events:
            raise RuntimeError("FillSession.start after the generation began")
        if self._pending is not None:
            raise RuntimeError("FillSession.start before commit of the previous proposal")
        self._budget = budget
        return self._propose(self._first, budget)

    def push(self, token_id: int, budget: float = math.inf) -> Proposal | None:
        """Record one sampled id; return what follows it, clamped, or None."""
        if self._pending is not None:
            raise RuntimeError("FillSession.push before commit of the previous proposal")
        self.stats.decode_steps += 1
        self._book.sampled(token_id)
        self._append((token_id,))
        self._budget = budget
        return self._propose(self._sources, budget)

    def _propose(self, sources: Sequence[ProposalSource], budget: float) -> Proposal | None:
        """One proposal from what `sources` propose (see the module docstring), or None."""
        head: tuple[Proposal, bool] | None = None  # (clamped, cut by the clamp)
        copies: list[tuple[Proposal, tuple[Proposal, bool] | None]] = []  # (raw, alone)
        for source in sources:
            if head is not None and source in self._first:
                continue  # the rows and the grammar only determine ids: one head is enough
            raw = source.propose(self)
            if raw is None or (head is not None and raw.policy == "assert"):
                continue
            if raw.branch_stop:
                self.stats.branch_stops += 1
            if raw.policy == "verify" and self._paused(raw.origin):
                self.stats.backed_off += 1
                continue
            alone = self._clamped(raw, budget)
            if alone is not None and alone[0].policy == "assert":
                head = alone
            else:
                copies.append((raw, alone))
        out = self._extend(head, [raw for raw, _ in copies], budget) if head else None
        if out is None:
            fits = [c for _, c in copies if c is not None]
            best = pick([self.acceptance(c) for c, _ in fits])
            out = head or (fits[best] if best is not None else None)
        if out is None:
            return None
        self.stats.index_truncated += out[1]
        self._pending = out[0]
        return out[0]

    def _clamped(self, raw: Proposal, budget: float) -> tuple[Proposal, bool] | None:
        """`raw` clamped alone (module docstring), and whether the clamp cut it."""
        is_copy = raw.origin in COPIES
        ids = self._clamp(raw.ids, budget, is_copy)
        if ids is None:
            return None
        policy = raw.policy
        if is_copy and len(ids) != len(raw.ids) and ids[-1] not in self._delimiters:
            policy = "verify"
        return replace(raw, ids=ids, policy=policy), len(ids) != len(raw.ids)

    def _extend(self, head: tuple[Proposal, bool], copies: Sequence[Proposal],
                budget: float) -> tuple[Proposal, bool] | None:
        """The head extended by the copy tail with the most expected kept ids; None
        when no copy extends it."""
        first = head[0]
        tails = []
        for raw in copies:
            tail = extend(first.ids, raw.ids)
            cut = tail and self._clamp(tail, budget, raw.origin in COPIES, first.ids)
            if cut:
                tails.append((raw, cut, len(cut) != len(tail or ())))
        best = pick([self._book.rates(raw.origin, raw.run + len(first.ids), len(cut))
                     for raw, cut, _ in tails])
        if best is None:
            return None
        raw, cut, shortened = tails[best]
        return Proposal(first.ids + cut, "verify", raw.origin, raw.branch_stop, raw.run,
                        len(first.ids), first.origin), head[1] or shortened

    def _paused(self, origin: str) -> bool:
        b = self._backoff.get(origin)
        return b is not None and b.paused(self.stats.decode_steps)

    def commit(self, proposal: Proposal, accepted: int, tested: int | None = None) -> None:
        """Record that the first `accepted` ids of `proposal` were emitted.

        For verify, `tested` is how many positions the model was asked about
        (default: all; the asserted head among them); untested ones are neither
        rejected nor learned from.
        """
        if proposal is not self._pending:
            raise RuntimeError("FillSession.commit of a proposal that is not pending")
        self._pending = None
        n = max(0, min(int(accepted), len(proposal.ids)))
        st, head = self.stats, proposal.head
        if proposal.policy == "verify":
            size = len(proposal.ids)
            checked = size if tested is None else max(n, min(tested, size))
            tried, kept = max(0, checked - head), max(0, n - head)
            st.verify_spans.append((proposal.origin, proposal.run + head, size - head, tried,
                                    kept))
            st.verify_accepted += kept
            st.verify_rejected += tried - kept
            self._book.verified(proposal.origin, tried, kept, proposal.run + head)
            backoff = self._backoff.setdefault(proposal.origin, Backoff())
            st.backoffs += backoff.verified(tried, kept, st.decode_steps)
        if n == 0:
            return
        self._book.stop_following()
        self._append(proposal.ids[:n])
        st.events += 1
        st.injected += n
        st.merged += 0 < head < n and proposal.policy == "verify"
        lead = min(n, head)  # the head's ids, then the rest: each to its source
        for start, part in ((0, lead), (lead, n - lead)):
            if part:
                self._count(proposal.origin_at(start), part)
        st.span_lens.append(n)

    def _count(self, origin: str, n: int) -> None:
        st = self.stats
        if origin in ("schema", "template"):
            st.strict += n
        elif origin in ("grammar", "echo", "recall"):
            setattr(st, origin, getattr(st, origin) + n)

    def acceptance(self, proposal: Proposal) -> list[float]:
        """The running chance that each position of `proposal` is kept (its source's
        estimate for a copy of its run, `ffwd.fill.spans`)."""
        head = proposal.head
        rest = self._book.rates(proposal.origin, proposal.run + head, len(proposal.ids) - head)
        return [1.0] * head + rest

    def decline(self, proposal: Proposal) -> None:
        """Instead of `commit`: the caller does not forward this verify proposal."""
        if proposal is not self._pending:
            raise RuntimeError("FillSession.decline of a proposal that is not pending")
        self._pending = None
        self.stats.declined += 1
        head = proposal.head
        self.stats.verify_spans.append((proposal.origin, proposal.run + head,
                                        len(proposal.ids) - head, 0, 0))
        self._book.declined(proposal.origin, proposal.ids[head:], proposal.run + head)

    def note_verify_event(self, checkpoint_ms: float = 0.0) -> None:
        """A verify proposal reached the forward."""
        self.stats.verify_events += 1
        self.stats.checkpoint_ms += checkpoint_ms

    def note_verify_unsupported(self) -> None:
        """A verify proposal was dropped: the backend cannot rewind its cache."""
        self.stats.verify_unsupported += 1

    def note_parse_failure(self) -> None:
        """The tool-call parser rejected this request's markup.

        If a strict row had fired, the template disagrees with what the model
        writes, so every further row is suspect: disarm them (echo is kept).
        """
        if self.stats.strict == 0:
            return
        self.stats.parse_fallback += 1
        self._strict.disable()

    # --- internals ------------------------------------------------------
    def _append(self, ids: Sequence[int]) -> None:
        self._length += len(ids)
        for source in self._observers:
            source.observe(ids)
        tail = self._tail
        tail.extend(ids)
        # Trim in batches: amortised O(1) per id.
        if len(tail) > 2 * self._window + 64:
            del tail[: len(tail) - self._window]

    def _clamp(
        self, ids: tuple[int, ...], budget: float, apply_delimiters: bool,
        before: tuple[int, ...] = (),
    ) -> tuple[int, ...] | None:
        """`ids` clamped (module docstring); as the tail of a span that starts with
        `before` when given (the grammar, the span cap and the length floor count it)."""
        out = ids
        for i, tok in enumerate(out):
            if tok in self._eos:
                out = out[:i]
                break
        # Delimiters end argument values; template markup legitimately contains
        # the same ids, so only copied spans are cut at them.
        if apply_delimiters and self._delimiters:
            for i, tok in enumerate(out):
                if tok in self._delimiters:
                    out = out[: i + 1]
                    break
        if self.grammar is not None and out:
            out = out[: self.grammar.admit(before + out) - len(before)]
        cap = min(self.max_span, budget) - len(before)
        if cap < len(out):
            out = out[: max(0, math.floor(cap))]
        if not out or len(before) + len(out) < 2:
            return None
        return out
