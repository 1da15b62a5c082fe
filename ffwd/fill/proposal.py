"""What a proposal source may claim about the next tokens, and how firmly.

A `Proposal` is a run of token ids plus a policy:

* ``assert``: the ids are determined (template markup, schema names and keys).
  The engine appends them in one forward and never looks back.
* ``verify``: the ids are likely (a copy of earlier history). The engine appends
  them, reads the model's own choice at every position from the same forward,
  keeps the agreed prefix and rewinds the rest.

Origins (`ProposalOrigin`, declared here only): ``schema`` and ``template``
(strict rows), ``grammar`` (ids a grammar forces), ``echo`` (copies from the
request), ``recall`` (copies from earlier requests' outputs). ``ngram`` and
``mtp`` name draft sources (an n-gram table, a model's multi-token head) that
nothing here produces yet; an origin of their own would keep their acceptance
apart from the others'.

Sources see the sequence through a `TokenView`. A source that keeps its own
state may also define ``observe(ids)`` (optional, see `ObservingSource`): the
session calls it with every id that enters the sequence, sampled or injected,
in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, get_args, runtime_checkable

ProposalPolicy = Literal["assert", "verify"]
ProposalOrigin = Literal["schema", "template", "grammar", "echo", "recall", "ngram", "mtp"]

POLICIES: tuple[ProposalPolicy, ...] = get_args(ProposalPolicy)
ORIGINS: tuple[ProposalOrigin, ...] = get_args(ProposalOrigin)


@dataclass(frozen=True, slots=True)
class Proposal:
    """A claim that `ids` follow the current sequence, held under `policy`.

    `branch_stop` is set by the echo source when its span ended because the
    history forked (several different continuations were seen). `run` is a copy
    source's evidence: how many ids before the span already match the copied
    passage (the longer, the likelier the copy goes on; `ffwd.fill.spans`).

    A verify proposal may start with `asserted` determined ids from the source
    `lead` (a template row or the grammar) that a copy extends
    (`ffwd.fill.merge`): those are taken whatever the model says, and only the
    rest is verified. `origin_at(j)` names the source of each id.
    """

    ids: tuple[int, ...]
    policy: ProposalPolicy
    origin: ProposalOrigin
    branch_stop: bool = False
    run: int = 0
    asserted: int = 0
    lead: ProposalOrigin | None = None

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"proposal policy {self.policy!r}: expected one of {POLICIES}")
        for origin in (self.origin, self.lead or self.origin):
            if origin not in ORIGINS:
                raise ValueError(f"proposal origin {origin!r}: expected one of {ORIGINS}")
        if not 0 <= self.asserted <= len(self.ids):
            raise ValueError(f"proposal asserted={self.asserted}: expected 0..{len(self.ids)}")

    @property
    def head(self) -> int:
        """Leading ids taken whatever the model says: all of an assert, `asserted` of a
        verify."""
        return len(self.ids) if self.policy == "assert" else self.asserted

    def origin_at(self, j: int) -> ProposalOrigin:
        """The source of id `j`."""
        if j < self.asserted and self.lead is not None:
            return self.lead
        return self.origin


class TokenView(Protocol):
    """The part of the sequence a source can see."""

    @property
    def length(self) -> int:
        """Tokens so far: prompt plus everything emitted, injected ones included."""
        ...

    @property
    def budget(self) -> float:
        """Tokens the caller may still emit (max_tokens minus generated)."""
        ...

    def tail(self, n: int) -> Sequence[int]:
        """The last `n` ids, oldest first; shorter near the start or past the window."""
        ...


@runtime_checkable
class ProposalSource(Protocol):
    """Anything that can propose the tokens that follow the current tail."""

    @property
    def name(self) -> str: ...

    @property
    def window_needed(self) -> int:
        """How many trailing ids this source reads through `TokenView.tail`."""
        ...

    def propose(self, view: TokenView) -> Proposal | None:
        """The ids that follow, or None. The session clamps what comes back."""
        ...


@runtime_checkable
class ObservingSource(ProposalSource, Protocol):
    """A source that also follows the sequence (``observe`` is optional)."""

    def observe(self, ids: Sequence[int]) -> None:
        """Every id that entered the sequence, in order."""
        ...


@runtime_checkable
class ConstrainingSource(ObservingSource, Protocol):
    """A source that also bounds what may follow (a grammar): the session asks
    it right after the strict rows and cuts every proposal to what it admits."""

    def admit(self, ids: Sequence[int]) -> int:
        """How many leading ids of `ids` may follow the sequence now."""
        ...
