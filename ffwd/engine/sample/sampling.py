"""Sampling: a seeded sampler over the logits processors, and lossless span verification.

The processors (`ffwd.engine.sample.processors`) are functions ``(logits, ...) -> logits`` on
one float32 row; the `Sampler` applies them in a fixed order (the request's `TokenConstraint` mask,
logit bias, penalties, temperature, top-k, top-p, min-p). The mask comes
first, so truncation (top-k, top-p) chooses among allowed ids only. A
`ConstraintFactory` (a compiled grammar) makes each run its own constraint.
Where processing leaves no finite weight (a temperature so small that the
scaled logits overflow is taken as greedy first; then a mask over ids the model
itself rules out), the draw is the most likely id the constraint allows
(`Sampler.fallback`): a constrained draw is always an id the constraint accepts.

The draws are tied to positions, not to a running stream: the id at output
position i is drawn by inverting the processed distribution's CDF at
``u(seed, i)``, a uniform number fixed by the request's seed (one drawn for
the request when it names none) and the position alone. So however a
generation is cut into forwards (plain steps, verified spans of any length, a
stream or a whole reply) the same seed draws the same ids from the same
logits.

`verify_span` decides how much of a proposed span the model keeps:

* greedy (temperature 0): accept while the processed argmax equals the
  proposed id; at the first disagreement the argmax is the next id. With a
  tie `margin` (a path that rounds verify and one-id forwards apart,
  FFWD_TIE_MARGIN), a proposed id whose logit is within `margin` of the best
  is a tie the kernels cannot break either way, and is kept too.
* sampling: draw position j's id as plain decoding would (with ``u(seed, i)``)
  and accept the proposed id ``s`` when the draw is ``s``; otherwise the draw
  is the next id. ``s`` is kept with probability ``p(s)``, and on a rejection
  the draw is ``y != s`` with probability ``p(y)``: each emitted id has exactly
  the distribution plain decoding gives it, and with the same seed it is the
  very id plain decoding draws.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from ffwd.engine.sample.processors import (
    OutputCounts,
    apply_logit_bias,
    apply_min_p,
    apply_presence_frequency,
    apply_repetition_penalty,
    apply_temperature,
    apply_top_k,
    apply_top_p,
)


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """Per-request sampling settings (OpenAI names; temperature 0 = greedy).

    `repetition_penalty` (divide positive logits, multiply negative ones)
    applies to ids in the prompt and the output; `presence_penalty` and
    `frequency_penalty` (subtracted once / per occurrence) to output ids only.
    """

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: Mapping[int, float] = field(default_factory=dict)
    seed: int | None = None

    def __post_init__(self) -> None:
        checks = (
            ("temperature", self.temperature >= 0),
            ("top_k", self.top_k >= 0),
            ("top_p", 0 < self.top_p <= 1),
            ("min_p", 0 <= self.min_p < 1),
            ("repetition_penalty", self.repetition_penalty > 0),
        )
        for name, ok in checks:
            if not ok:
                raise ValueError(f"sampling {name}={getattr(self, name)!r} is out of range")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


# --- sampler --------------------------------------------------------------


class TokenConstraint(Protocol):
    """Which ids may follow an output (a grammar); one per request."""

    @property
    def position(self) -> int:
        """Output ids the constraint has consumed (checked against the cache)."""
        ...

    def mask(self, logits: torch.Tensor, generated: Sequence[int]) -> torch.Tensor:
        """`logits` (one float32 row) with -inf on every id that may not follow
        the output `generated`; the constraint follows `generated` wherever it
        goes, back after a rejected span included."""
        ...


class ConstraintFactory(Protocol):
    """What gives each run of a request its own `TokenConstraint` (a compiled grammar)."""

    def new_constraint(self) -> TokenConstraint: ...


def uniform(seed: int, position: int) -> float:
    """A uniform number in [0, 1) fixed by `seed` and `position` (splitmix64).

    >>> uniform(7, 3) == uniform(7, 3) != uniform(7, 4)
    True
    """
    mask = (1 << 64) - 1
    z = (seed * 0x9E3779B97F4A7C15 + (position + 1) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return ((z ^ (z >> 31)) >> 11) / float(1 << 53)


class Sampler:
    """`SamplingParams` turned into processing plus the request's position-tied draws.

    `generated` arguments are the ids emitted so far in this request (for the
    presence/frequency penalties, and to know the position being drawn); the
    prompt ids given at construction count for the repetition penalty too.
    Without a `seed`, one is chosen at random for the request.
    """

    def __init__(
        self,
        params: SamplingParams,
        prompt_ids: Sequence[int] = (),
        constraint: TokenConstraint | None = None,
    ) -> None:
        self.params = params
        self.constraint = constraint
        self.seed = params.seed if params.seed is not None else secrets.randbits(63)
        self._counts = OutputCounts(prompt_ids)
        p = params
        self._penalised = p.repetition_penalty != 1.0 or p.presence_penalty or p.frequency_penalty
        self._plain = not (self._penalised or p.logit_bias or constraint is not None)

    @property
    def greedy(self) -> bool:
        return self.params.greedy

    @property
    def plain_greedy(self) -> bool:
        """Greedy on the raw logits: no mask, bias or penalties (argmax needs no processing)."""
        return self.params.greedy and self._plain

    def process(self, logits: torch.Tensor, generated: Sequence[int] = ()) -> torch.Tensor:
        """Mask, bias, penalties, temperature and truncation applied to one logits row."""
        p = self.params
        out = logits.float().cpu()
        if self.constraint is not None:
            out = self.constraint.mask(out, generated)
        out = apply_logit_bias(out, p.logit_bias)
        if self._penalised:
            counts = self._counts.update(generated, out.shape[-1])
            if p.repetition_penalty != 1.0:
                out = apply_repetition_penalty(out, self._counts.seen(), p.repetition_penalty)
            out = apply_presence_frequency(out, counts, p.presence_penalty, p.frequency_penalty)
        if p.greedy:
            return out
        out = apply_temperature(out, p.temperature)
        out = apply_top_k(out, p.top_k)
        out = apply_top_p(out, p.top_p)
        return apply_min_p(out, p.min_p)

    def probs(self, logits: torch.Tensor, generated: Sequence[int] = ()) -> torch.Tensor:
        """The distribution `sample` draws from (one-hot on the argmax when greedy, and on
        `fallback` when processing leaves no finite weight)."""
        processed = self.process(logits, generated)
        n = processed.shape[-1]
        if self.greedy:
            best = self._argmax(processed, logits, generated)
            return torch.nn.functional.one_hot(torch.tensor(best), n).float()
        probs = torch.softmax(processed, dim=-1)
        total = float(probs.sum())
        if not (total > 0 and math.isfinite(total)):
            return torch.nn.functional.one_hot(
                torch.tensor(self.fallback(logits, generated)), n).float()
        return probs

    def _argmax(self, processed: torch.Tensor, logits: torch.Tensor,
                generated: Sequence[int]) -> int:
        """The greedy id: the processed argmax, or `fallback` when it is not finite."""
        best = int(processed.argmax())
        return best if bool(torch.isfinite(processed[best])) else self.fallback(logits, generated)

    def fallback(self, logits: torch.Tensor, generated: Sequence[int]) -> int:
        """The id taken when processing leaves no finite weight: the most likely id the
        constraint allows by the raw logits, else the first id it allows.

        The mask may leave only ids the model itself rules out (-inf or NaN logits);
        the draw must still be an id the constraint accepts.
        """
        raw = torch.nan_to_num(logits.float().cpu(), nan=-float("inf"), posinf=float(
            torch.finfo(torch.float32).max))
        if self.constraint is None:
            return int(raw.argmax())
        allowed = torch.isfinite(self.constraint.mask(torch.zeros_like(raw), generated))
        if not bool(allowed.any()):
            raise RuntimeError(f"the request's constraint allows no id after {len(generated)} "
                               "output ids")
        masked = raw.masked_fill(~allowed, -float("inf"))
        if bool(torch.isfinite(masked).any()):
            return int(masked.argmax())
        return int(allowed.nonzero()[0])

    def sample(self, logits: torch.Tensor, generated: Sequence[int] = ()) -> int:
        """The id at output position ``len(generated)``."""
        if self.plain_greedy:  # the hot path: no copy, no processing
            return argmax(logits)
        if self.greedy:
            return self._argmax(self.process(logits, generated), logits, generated)
        return self.draw(self.probs(logits, generated), len(generated))

    def draw(self, probs: torch.Tensor, position: int) -> int:
        """The id at `position` from `probs` (need not be normalised, but some weight must
        be positive): the inverse of its CDF at the position's uniform number."""
        cdf = torch.cumsum(probs, dim=-1, dtype=torch.float64)
        u = uniform(self.seed, position) * float(cdf[-1])
        i = int(torch.searchsorted(cdf, torch.tensor(u, dtype=torch.float64), right=True))
        if i >= probs.shape[-1]:  # u * total rounded up to the total: the last id with weight
            i = int((probs > 0).nonzero()[-1])
        return i

    __call__ = sample


def argmax(rows: torch.Tensor) -> int:
    """The argmax of one float32 CPU row: numpy's, a few µs where torch's dispatch and
    reduction cost ~60 µs on a 49k vocabulary (on every decode step)."""
    if rows.device.type != "cpu" or rows.dtype != torch.float32:
        return int(rows.argmax())
    return int(rows.numpy().argmax())


def make_sampler(
    params: SamplingParams | None = None,
    prompt_ids: Sequence[int] = (),
    constraint: TokenConstraint | None = None,
) -> Sampler:
    return Sampler(params or SamplingParams(), prompt_ids, constraint)


# --- verification -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SpanVerdict:
    """`accepted` leading ids of the span were kept; `next_id` follows them.

    `next_id` is the replacement at the first rejection, or the id drawn from
    the row after the span when every id was accepted and that row was given;
    None when the span was fully accepted and no row follows it.
    """

    accepted: int
    next_id: int | None


def verify_span(
    logits: torch.Tensor,
    proposed: Sequence[int],
    sampler: Sampler,
    generated: Sequence[int] = (),
    margin: float = 0.0,
) -> SpanVerdict:
    """Keep the prefix of `proposed` the model would have produced itself.

    Row j of `logits` is the model's distribution for position j of the span
    (row 0: after the sampled id). A row past the span, when present, gives the
    id after a fully accepted span. `generated` is the output so far, before
    the span (for penalties). Greedy only: a proposed id whose (processed) logit
    is within `margin` of the best is kept (module docstring).
    """
    if logits.shape[0] < len(proposed):
        raise ValueError(f"verify_span: {logits.shape[0]} rows for {len(proposed)} ids")
    history = list(generated)
    fast_greedy = sampler.plain_greedy
    if fast_greedy:
        # One argmax over all rows instead of a processing pass per row.
        head = logits[: len(proposed) + 1]
        choice = (head.numpy().argmax(axis=-1) if head.device.type == "cpu"
                  and head.dtype == torch.float32 else head.argmax(dim=-1)).tolist()
    tie = margin > 0 and sampler.greedy
    for j, tok in enumerate(proposed):
        if fast_greedy:
            if choice[j] != tok and not (tie and _tied(logits[j], tok, choice[j], margin)):
                return SpanVerdict(j, choice[j])
            continue
        if tie:  # greedy with processors: one pass decides the argmax and a tie
            processed = sampler.process(logits[j], history)
            best = sampler._argmax(processed, logits[j], history)
            if best != tok and not _tied(processed, tok, best, margin):
                return SpanVerdict(j, best)
            history.append(tok)
            continue
        probs = sampler.probs(logits[j], history)
        # Greedy: the argmax. Sampling: the position's own draw, as plain decoding makes it.
        got = int(probs.argmax()) if sampler.greedy else sampler.draw(probs, len(history))
        if got != tok:
            return SpanVerdict(j, got)
        history.append(tok)
    n = len(proposed)
    if logits.shape[0] > n:
        nxt = choice[n] if fast_greedy else sampler.sample(logits[n], history)
        return SpanVerdict(n, nxt)
    return SpanVerdict(n, None)


def _tied(row: torch.Tensor, token: int, best: int, margin: float) -> bool:
    """Whether `token`'s logit in `row` is within `margin` of `best`'s (finite only).

    >>> row = torch.tensor([1.0, 3.0, 2.8, -float("inf")])
    >>> _tied(row, 2, 1, 0.25), _tied(row, 0, 1, 0.25), _tied(row, 3, 1, 9.0)
    (True, False, False)
    """
    value = float(row[token])
    return value != -math.inf and value >= float(row[best]) - margin
