"""The per-request proposal table: strict rows, echo, and the running history.

Contract
--------
* `FillSession.push(token_id, budget)` records one *sampled* id and asks the
  sources, in priority order (strict rows, the grammar, echo, caller sources),
  what follows. The first proposal that survives the clamp is returned.
* The caller then calls `commit(proposal, accepted)` exactly once with the
  number of ids it actually emitted: all of them for an assert, the agreed
  prefix for a verify, 0 when it declined. Nothing enters the history before
  that commit, so a partial accept needs no rollback here.
* Clamp order: EOS (cut before the first) -> delimiter (echo only; end at the
  first one, inclusive) -> what the grammar admits (when there is one) ->
  min(max_span, budget) -> reject spans shorter than 2.
  An echo proposal that the clamp shortened anywhere but at a delimiter is held
  under ``verify``.

This module is bookkeeping only: no torch, no tokenizer, no template.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Literal, Protocol

from ffwd.fill.echo import EchoConfig, EchoSource
from ffwd.fill.proposal import (
    ConstrainingSource,
    ObservingSource,
    Proposal,
    ProposalOrigin,
    ProposalSource,
    TokenView,
)
from ffwd.fill.spans import AcceptanceBook

COPIES = ("echo", "recall")  # copy sources: cut at delimiters, held under verify when cut
FillKind = Literal["scaffold", "name", "key", "close", "turn-end"]
FILL_KINDS: tuple[FillKind, ...] = ("scaffold", "name", "key", "close", "turn-end")


@dataclass(frozen=True, slots=True)
class FillRow:
    """When the history ends with `trigger`, the ids in `emit` follow.

    `emit` is sliced out of a whole template rendering, never encoded alone.
    A row with `requires_context` fires only when the format's
    `StrictFillContext` allows it (inside a call, outside a string, ...).
    """

    trigger: tuple[int, ...]
    emit: tuple[int, ...]
    kind: FillKind
    requires_context: bool = False

    def __post_init__(self) -> None:
        if self.kind not in FILL_KINDS:
            raise ValueError(f"fill row kind {self.kind!r}: expected one of {FILL_KINDS}")


class StrictFillContext(Protocol):
    """Parser state that decides whether a template row may fire now."""

    def observe(self, ids: Sequence[int]) -> None: ...

    def allows(self, row: FillRow) -> bool: ...


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

    def as_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


class StrictRowSource:
    """Template and schema rows as a proposal source; always ``assert``."""

    name = "strict"

    def __init__(
        self, rows: Iterable[FillRow], context: StrictFillContext | None = None
    ) -> None:
        self.context = context
        self._buckets: dict[int, list[FillRow]] = {}
        self._max_trigger = 1
        self._enabled = True
        for row in rows:
            if not row.trigger or not row.emit:
                continue
            self._max_trigger = max(self._max_trigger, len(row.trigger))
            self._buckets.setdefault(row.trigger[-1], []).append(row)
        # Longest trigger first; sort is stable, so plan order breaks ties.
        for bucket in self._buckets.values():
            bucket.sort(key=lambda r: -len(r.trigger))

    @property
    def window_needed(self) -> int:
        return self._max_trigger

    @property
    def enabled(self) -> bool:
        return self._enabled

    def disable(self) -> None:
        self._enabled = False

    def observe(self, ids: Sequence[int]) -> None:
        if self.context is not None:
            self.context.observe(ids)

    def propose(self, view: TokenView) -> Proposal | None:
        if not self._enabled:
            return None
        tail = view.tail(self._max_trigger)
        if not tail:
            return None
        bucket = self._buckets.get(tail[-1])
        if bucket is None:
            return None
        n = len(tail)
        for row in bucket:
            t = row.trigger
            if len(t) > n or tuple(tail[n - len(t) :]) != t:
                continue
            if row.requires_context and (self.context is None or not self.context.allows(row)):
                continue
            origin: ProposalOrigin = "schema" if row.kind in ("name", "key") else "template"
            return Proposal(row.emit, "assert", origin)
        return None


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
        self._book = AcceptanceBook()

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
        """The first proposal of `sources` (in order) that survives the clamp."""
        for source in sources:
            proposal = source.propose(self)
            if proposal is None:
                continue
            if proposal.branch_stop:
                self.stats.branch_stops += 1
            is_echo = proposal.origin in COPIES
            ids = self._clamp(proposal.ids, budget, is_echo)
            if ids is None:
                continue
            policy = proposal.policy
            if is_echo and len(ids) != len(proposal.ids) and ids[-1] not in self._delimiters:
                policy = "verify"
            out = Proposal(ids, policy, proposal.origin, proposal.branch_stop, proposal.run)
            self._pending = out
            return out
        return None

    def commit(self, proposal: Proposal, accepted: int, tested: int | None = None) -> None:
        """Record that the first `accepted` ids of `proposal` were emitted.

        For verify, `tested` is how many positions the model was asked about
        (default: all); untested ones are neither rejected nor learned from.
        """
        if proposal is not self._pending:
            raise RuntimeError("FillSession.commit of a proposal that is not pending")
        self._pending = None
        n = max(0, min(int(accepted), len(proposal.ids)))
        st = self.stats
        if proposal.policy == "verify":
            size = len(proposal.ids)
            checked = size if tested is None else max(n, min(tested, size))
            st.verify_accepted += n
            st.verify_rejected += checked - n
            self._book.verified(proposal.origin, checked, n, proposal.run)
        if n == 0:
            return
        self._book.stop_following()
        self._append(proposal.ids[:n])
        st.events += 1
        st.injected += n
        if proposal.origin in ("schema", "template"):
            st.strict += n
        elif proposal.origin == "grammar":
            st.grammar += n
        elif proposal.origin == "echo":
            st.echo += n
        elif proposal.origin == "recall":
            st.recall += n
        st.span_lens.append(n)

    def acceptance(self, proposal: Proposal) -> list[float]:
        """The running chance that each position of `proposal` is kept (its source's
        estimate for a copy of its run, `ffwd.fill.spans`)."""
        return self._book.rates(proposal.origin, proposal.run, len(proposal.ids))

    def decline(self, proposal: Proposal) -> None:
        """Instead of `commit`: the caller does not forward this verify proposal."""
        if proposal is not self._pending:
            raise RuntimeError("FillSession.decline of a proposal that is not pending")
        self._pending = None
        self.stats.declined += 1
        self._book.declined(proposal.origin, proposal.ids, proposal.run)

    def note_verify_event(self, checkpoint_ms: float = 0.0) -> None:
        """A verify proposal reached the forward."""
        self.stats.verify_events += 1
        self.stats.checkpoint_ms += checkpoint_ms

    def note_verify_unsupported(self) -> None:
        """A verify proposal was dropped: the backend cannot rewind its cache."""
        self.stats.verify_unsupported += 1

    def note_wasted_sample(self) -> None:
        """An in-flight sample was dropped to take an assert fill: for a backend that
        samples ahead of the loop. The synchronous ones here never call it (see
        `FillStats.wasted_samples`)."""
        self.stats.wasted_samples += 1

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
        self, ids: tuple[int, ...], budget: float, apply_delimiters: bool
    ) -> tuple[int, ...] | None:
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
            out = out[: self.grammar.admit(out)]
        cap = min(self.max_span, budget)
        if cap < len(out):
            out = out[: max(0, math.floor(cap))]
        if len(out) < 2:
            return None
        if len(out) != len(ids):
            self.stats.index_truncated += 1
        return out
