"""What the decode loop needs from a model: a cache it can extend, read and cut back.

Contract
--------
* The backend owns one sequence cache and knows the ids in it (`cache_len`).
* `prefill(ids)` makes the cache hold exactly `ids`. It reuses the longest
  common prefix with what is cached when the cache can be cut back to it (or
  when the cached ids are already a prefix of `ids`), forwards the rest in
  chunks, and returns how many leading ids were reused. At least the last id is
  always forwarded, so `last_logits` afterwards predicts the id after `ids`.
* `forward(ids)` appends `ids` and returns float32 logits for every position,
  shape ``(len(ids), vocab_size)``; row j predicts the id after ``ids[j]``.
  `append(ids)` does the same but returns only the last row (the output head
  runs on one position). Every call of either counts one in `forward_calls`;
  no call may exceed `max_append` ids.
* `rewind(n)` drops the last n ids. Only when `can_rewind` is true, and only
  as far as `rewindable`; anything else raises instead of leaving a cache that
  no longer matches its ids.
* Where the cache cannot be cut back (recurrent state), `checkpoint()` returns
  an opaque snapshot and `restore(cp)` puts the cache back to it, ids
  included; `can_checkpoint` says whether that is available. `mark()` and
  `undo(mark, keep)` choose between the two: a verify span is marked before
  its forward and undone to the ids the model kept.
* `save_state()` / `load_state(state)` keep a whole sequence for later (the
  prompt cache); `trims_freely` says whether a loaded state may then be cut
  back to any prefix.
* `cost` is the measured `CostSurface` (None until a loader measures it): ms
  per forward of m ids at a cache depth, kept current by the forwards the
  context runs; `pricing` is what the decode loop sizes verify spans with at
  the depth they run at (the surface, or this sequence's share of a batched
  step). `attention_table` is what the loader timed to choose llama.cpp's
  attention path (None elsewhere). `tie_margin` is how far below the best
  logit a greedy verify still keeps a draft id (0.0: exactly the argmax;
  `ffwd.config.engine`'s FFWD_TIE_MARGIN, set by the loader).
* `engine`, `device`, `dtype_name`, `threads` and `context_window` say what the
  model runs as (`ffwd info`, the start-up banner, the server's limits).
* `context` is what the backend's sequence shares its model and forwards with
  (`Context`): llama.cpp's context of ``--parallel N`` sequences, each a
  `Backend`; a transformers backend is a context of one. `seq` is the
  sequence's index in `context.sequences`. The engine's loop steps every
  running sequence in one `Context.decode`; `prefill`, `forward` and `append`
  are the same forwards for one sequence on the caller's thread.
* `keep_prefix(ids)` is the first half of `prefill`: keep the longest usable
  prefix of `ids` in the cache (never the last id) and return its length; the
  rest goes in as prompt forwards of at most `prompt_chunk` ids.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import torch

from ffwd.engine.core.batch import BatchStats, Part
from ffwd.engine.cost.surface import CostSurface, Pricing
from ffwd.engine.llama.attention import AttentionTable
from ffwd.fill.prefix import common_prefix


@dataclass(frozen=True, slots=True)
class CacheState:
    """A whole sequence saved for later (the serve layer's prompt cache keeps these).

    `snapshot` is the backend's own; `nbytes` what keeping it costs."""

    ids: tuple[int, ...]
    snapshot: object
    nbytes: int


@dataclass(frozen=True, slots=True)
class Mark:
    """Where a cache stood before a verify span: its length, and a checkpoint when
    the cache cannot be rewound (None when it can)."""

    length: int
    snapshot: object | None = None


class Backend(Protocol):
    """A causal LM with one cache the decode loop extends, reads and cuts back."""

    engine: str  # "llama.cpp" or "transformers"
    cost: CostSurface | None
    attention_table: AttentionTable | None
    tie_margin: float

    @property
    def device(self) -> torch.device: ...

    @property
    def dtype_name(self) -> str:
        """The weights' type as `ffwd info` names it (float32, gguf, ...)."""
        ...

    @property
    def threads(self) -> int:
        """Compute threads on the CPU."""
        ...

    @property
    def context_window(self) -> int:
        """The most ids the cache may hold (prompt and output together)."""
        ...

    @property
    def vocab_size(self) -> int: ...

    @property
    def eos_ids(self) -> frozenset[int]: ...

    @property
    def max_append(self) -> int:
        """The most ids one `forward`/`append` call may take."""
        ...

    @property
    def cache_len(self) -> int:
        """Ids in the cache."""
        ...

    @property
    def cached_ids(self) -> tuple[int, ...]:
        """The ids in the cache, oldest first."""
        ...

    @property
    def can_rewind(self) -> bool:
        """Whether `rewind` can cut the cache back (False for recurrent state)."""
        ...

    @property
    def rewindable(self) -> int:
        """How many ids `rewind` may drop right now."""
        ...

    @property
    def can_checkpoint(self) -> bool: ...

    @property
    def trims_freely(self) -> bool:
        """Whether a saved state can be cut back to any prefix (plain attention only)."""
        ...

    @property
    def forward_calls(self) -> int:
        """Model forward passes so far (prefill chunks included)."""
        ...

    @property
    def last_logits(self) -> torch.Tensor:
        """float32 logits after the last id forwarded (shape ``(vocab_size,)``)."""
        ...

    def prefill(self, ids: list[int]) -> int: ...

    def forward(self, ids: list[int]) -> torch.Tensor: ...

    def append(self, ids: list[int]) -> torch.Tensor: ...

    def rewind(self, n: int) -> None: ...

    def checkpoint(self) -> object: ...

    def restore(self, checkpoint: object) -> None: ...

    def mark(self) -> Mark: ...

    def undo(self, mark: Mark, keep: Sequence[int] = ()) -> list[int]: ...

    def save_state(self) -> CacheState: ...

    def load_state(self, state: CacheState) -> None: ...

    def reset(self) -> None:
        """Drop the whole cache."""
        ...

    @property
    def pricing(self) -> Pricing | None:
        """What this sequence's forwards cost now: `cost`, priced beside the sequences it
        shares steps with (None until measured)."""
        ...

    @property
    def context(self) -> Context:
        """What this sequence shares its model and forwards with."""
        ...

    @property
    def seq(self) -> int:
        """This sequence's index in `context.sequences`."""
        ...

    @property
    def prompt_chunk(self) -> int:
        """The most prompt ids the next forward may take (`max_append`, or more where
        only an empty cache takes a whole prompt at once)."""
        ...

    def keep_prefix(self, ids: list[int]) -> int:
        """Keep the longest usable prefix of `ids` in the cache (never the last id);
        return how many ids were kept."""
        ...


class Context(Protocol):
    """The sequences that share one model and its forwards (module docstring)."""

    @property
    def sequences(self) -> Sequence[Backend]: ...

    @property
    def limit(self) -> int:
        """The most ids one step may carry."""
        ...

    @property
    def budget(self) -> int:
        """Prompt ids a step carries while other sequences decode in it."""
        ...

    def decode(self, parts: Sequence[Part]) -> list[torch.Tensor]:
        """One forward of every part (at most one per sequence, each at the end of its
        cache): each part's rows, every row or the last (``(n, vocab)`` float32)."""
        ...

    def set_running(self, seqs: Sequence[int]) -> None:
        """The sequences running now: what a sequence's forwards are priced beside."""
        ...

    def batch_stats(self) -> BatchStats:
        """The forwards so far, by how many sequences each carried."""
        ...


class CacheBookkeeping:
    """The `Backend` facts every engine keeps alike, read from the fields it sets:
    ``_vocab``, ``_eos``, ``_max_append``, ``_ids`` (the ids cached, in order),
    ``_forward_calls``, ``_last`` (the last logits row; None after a reset or a
    rewind); and `mark`/`undo` on top of the engine's rewind and checkpoint."""

    tie_margin: float = 0.0  # greedy verify keeps exactly the argmax unless the loader says
    _vocab: int
    _eos: frozenset[int]
    _max_append: int
    _ids: list[int]
    _forward_calls: int
    _last: torch.Tensor | None

    @property
    def vocab_size(self) -> int:
        return self._vocab

    @property
    def eos_ids(self) -> frozenset[int]:
        return self._eos

    @property
    def max_append(self) -> int:
        return self._max_append

    @property
    def cache_len(self) -> int:
        return len(self._ids)

    @property
    def cached_ids(self) -> tuple[int, ...]:
        return tuple(self._ids)

    @property
    def forward_calls(self) -> int:
        return self._forward_calls

    @property
    def prompt_chunk(self) -> int:
        return self._max_append

    @property
    def last_logits(self) -> torch.Tensor:
        if self._last is None:
            raise RuntimeError("no logits yet: prefill or forward first")
        return self._last

    # Provided by the engine (declared here for the two methods below).
    @property
    def can_rewind(self) -> bool:
        raise NotImplementedError

    def checkpoint(self) -> object:
        raise NotImplementedError

    def restore(self, checkpoint: object) -> None:
        raise NotImplementedError

    def rewind(self, n: int) -> None:
        raise NotImplementedError

    def mark(self) -> Mark:
        """Where the cache stands now, for `undo`: a checkpoint only where it cannot rewind."""
        return Mark(len(self._ids), None if self.can_rewind else self.checkpoint())

    def undo(self, mark: Mark, keep: Sequence[int] = ()) -> list[int]:
        """Cut the cache back to `mark` plus the ids `keep` (which it holds right after
        the mark). A rewind drops the rest; a restored checkpoint loses `keep` too, and
        returns them: the caller forwards them again. Returns [] after a rewind."""
        if mark.snapshot is None:
            self.rewind(len(self._ids) - mark.length - len(keep))
            return []
        self.restore(mark.snapshot)
        return list(keep)


def check_rewind(backend: Backend, n: int, name: str) -> None:
    """Raise unless `backend` can drop its last `n` ids (`Backend.rewind`'s refusals);
    `name` says which model in the message."""
    if n < 0 or n > backend.cache_len:
        raise ValueError(f"rewind({n}) with {backend.cache_len} ids cached")
    if n and not backend.can_rewind:
        raise RuntimeError(f"{name}: this cache holds recurrent state and cannot be rewound; "
                           "use checkpoint()/restore()")
    if n > backend.rewindable:
        raise RuntimeError(f"{name}: rewind({n}) reaches past the {backend.rewindable} ids the "
                           "sliding-window (or convolution) layers still hold")


def keep_common_prefix(backend: Backend, ids: list[int], *, can_reuse: bool = True) -> int:
    """`prefill`'s first step: keep the longest prefix of `ids` the cache holds
    (never the last id, which is always forwarded) where the cache is exactly
    that prefix or can be cut back to it; otherwise empty it. Returns the ids kept.
    """
    if not ids:
        raise ValueError("prefill of an empty prompt")
    cached = backend.cached_ids
    n = min(common_prefix(cached, ids), len(ids) - 1) if can_reuse else 0
    if n < len(cached) and len(cached) - n > backend.rewindable:
        n = 0
    if n == 0:
        backend.reset()
    else:
        backend.rewind(len(cached) - n)
    return n
