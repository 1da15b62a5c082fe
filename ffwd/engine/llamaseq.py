"""One sequence of a llama.cpp context: the `Backend` every sequence of ``--parallel N`` is.

A llama.cpp context holds `n_seq` sequences, each with a KV stream of its own
(`ffwd.engine.llamactx`). `LlamaSequence` is the `Backend` of one of them: its
ids, its forwards (submitted to the context's `Batcher`, which forwards every
waiting sequence's ids in one ``llama_decode``), its rewinds
(``llama_memory_seq_rm`` on its own sequence), its checkpoints and saved
states (``llama_state_seq_*``: a state saved from one sequence loads into any
other of the same context, so the prompt cache and a prefix copied from a
running sibling, `copy_from`, serve every sequence). Every call on the context
holds the batcher's lock, so none runs while a forward does.

What the cache can do:

* attention (full or sliding window): `llama_memory_seq_rm` drops any tail.
  The sliding-window cache is kept full size (`swa_full`), so ids that slid
  out of the window are still there when a rewind brings them back into it.
  A saved sequence state holds only the window's ids of those layers, so
  after `restore`/`load_state` a rewind may go back only until the window
  would need an id the state left out (`rewindable` says how far).
* recurrent state (Mamba, RWKV) and hybrids that carry one: the state is
  updated in place, so `can_rewind` is False and `checkpoint`/`restore` copy
  the sequence state out and back.

`LlamaCppBackend` (`ffwd.engine.llamacpp`) is sequence 0 and owns the model,
the context and the batcher (`Shared`); `sequences()` lists all of them.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ffwd.engine.attention import AttentionPath, AttentionTable
from ffwd.engine.backend import (
    Backend,
    CacheBookkeeping,
    CacheState,
    check_rewind,
    keep_common_prefix,
)
from ffwd.engine.batch import Batcher, BatchStats, Submitted
from ffwd.engine.batchcost import SequenceCost, prefill_budget
from ffwd.engine.cost import CostSurface


@dataclass(frozen=True, slots=True)
class _Snapshot:
    owner: int  # id() of the context's `Shared`: any of its sequences may load it
    ids: tuple[int, ...]
    data: ctypes.Array[ctypes.c_uint8]
    size: int
    last_logits: torch.Tensor | None


@dataclass(eq=False)
class Shared:
    """What the sequences of one context share: the library, the context (reopened on
    another attention path by the backend), the batcher and the model's facts."""

    lib: Any
    path: str
    vocab: int
    eos: frozenset[int]
    max_append: int
    n_ctx: int  # ids per sequence
    recurrent: bool
    n_swa: int
    threads: int
    attention: AttentionPath
    batcher: Batcher | None = None
    ctx: Any = None
    mem: Any = None
    surface: CostSurface | None = None  # measured by the loader (ffwd.models)
    table: AttentionTable | None = None
    sequences: list[LlamaSequence] = field(default_factory=list)  # by sequence id


class LlamaSequence(CacheBookkeeping):
    """Sequence `seq` of a llama.cpp context; implements `Backend` (module docstring)."""

    engine = "llama.cpp"
    device = torch.device("cpu")

    def __init__(self, shared: Shared, seq: int) -> None:
        self._shared = shared
        self.seq = seq
        self._vocab = shared.vocab
        self._eos = shared.eos
        self._max_append = shared.max_append
        self._ids: list[int] = []
        self._last: torch.Tensor | None = None
        self._forward_calls = 0
        self._shared_step = False  # whether the last forward carried other sequences
        self._pricing: SequenceCost | None = None

    # --- facts ----------------------------------------------------------
    @property
    def batcher(self) -> Batcher:
        assert self._shared.batcher is not None
        return self._shared.batcher

    @property
    def threads(self) -> int:
        return self._shared.threads

    @property
    def attention(self) -> AttentionPath:
        return self._shared.attention

    @property
    def kv_type(self) -> str:
        return self.attention.kv

    @property
    def dtype_name(self) -> str:
        """The weights' types are the file's own; the KV cache's is the one in use."""
        return f"gguf-kv-{self.kv_type}" + ("" if self.attention.flash else "-noflash")

    @property
    def context_window(self) -> int:
        return self._shared.n_ctx

    @property
    def cost(self) -> CostSurface | None:
        """The shared surface, priced for the steps this sequence shares (`SequenceCost`)."""
        base = self._shared.surface
        if base is None:
            return None
        if self._pricing is None or self._pricing.base is not base:
            self._pricing = SequenceCost.over(base, self._batch_depths,
                                              lambda: self._shared_step)
        return self._pricing

    @cost.setter
    def cost(self, surface: CostSurface | None) -> None:
        self._shared.surface = surface
        if surface is not None:  # the prompt ids a shared step carries follow the surface
            self.batcher.budget = prefill_budget(surface)

    @property
    def attention_table(self) -> AttentionTable | None:
        return self._shared.table

    @attention_table.setter
    def attention_table(self, table: AttentionTable | None) -> None:
        self._shared.table = table

    def _batch_depths(self) -> list[int]:
        """The depths of the other sequences that are running now."""
        seqs = self._shared.sequences
        return [seqs[s].cache_len for s in self.batcher.others(self.seq) if s < len(seqs)]

    @property
    def can_rewind(self) -> bool:
        return not self._shared.recurrent

    @property
    def rewindable(self) -> int:
        if not self.can_rewind:
            return 0
        sh = self._shared
        low = 0
        if sh.n_swa:
            with self.batcher.lock:
                low = sh.lib.llama_memory_seq_pos_min(sh.mem, self.seq)
        if low <= 0:
            return len(self._ids)
        # Window layers hold positions from `low` on (a loaded state): the id after
        # the cut still needs the n_swa ids before it.
        return max(0, len(self._ids) - (low + sh.n_swa))

    @property
    def can_checkpoint(self) -> bool:
        return True

    @property
    def trims_freely(self) -> bool:
        """Whether a saved state can be cut back to any prefix (plain attention only)."""
        return self.can_rewind and not self._shared.n_swa

    def sequences(self) -> Sequence[Backend]:
        """Every sequence of this context, by id (this one among them)."""
        return list(self._shared.sequences)

    def leave(self) -> None:
        """This sequence's run is over: the next steps do not wait for it."""
        self.batcher.leave(self.seq)

    def batch_stats(self) -> BatchStats:
        """The context's forwards so far, by how many sequences each carried."""
        return self.batcher.stats

    # --- cache ----------------------------------------------------------
    def reset(self) -> None:
        sh = self._shared
        with self.batcher.lock:
            sh.lib.llama_memory_seq_rm(sh.mem, self.seq, -1, -1)
            self._ids = []
            self._last = None

    def rewind(self, n: int) -> None:
        """Drop the last `n` ids from the cache; raise if the cache cannot."""
        if n == 0:
            return
        check_rewind(self, n, self._shared.path)
        keep = len(self._ids) - n
        sh = self._shared
        with self.batcher.lock:
            if not sh.lib.llama_memory_seq_rm(sh.mem, self.seq, keep, -1):
                raise RuntimeError(f"llama.cpp refused to drop positions {keep}.. of the cache")
            del self._ids[keep:]
            self._last = None

    def checkpoint(self) -> object:
        """A copy of the sequence state (cache and ids) for `restore`."""
        sh = self._shared
        with self.batcher.lock:
            size = int(sh.lib.llama_state_seq_get_size(sh.ctx, self.seq))
            data = (ctypes.c_uint8 * max(size, 1))()
            written = int(sh.lib.llama_state_seq_get_data(sh.ctx, data, size, self.seq))
            if written != size:
                raise RuntimeError(f"llama.cpp wrote {written} of {size} state bytes")
            return _Snapshot(id(sh), tuple(self._ids), data, size, self._last)

    def restore(self, checkpoint: object) -> None:
        """Put the cache back exactly as it was at `checkpoint` (taken from any sequence of
        this context)."""
        sh = self._shared
        if not isinstance(checkpoint, _Snapshot) or checkpoint.owner != id(sh):
            raise ValueError("restore: not a checkpoint of this backend")
        with self.batcher.lock:
            sh.lib.llama_memory_seq_rm(sh.mem, self.seq, -1, -1)  # a whole sequence always goes
            self._ids, self._last = [], None
            if checkpoint.ids and not sh.lib.llama_state_seq_set_data(
                sh.ctx, checkpoint.data, checkpoint.size, self.seq
            ):
                raise RuntimeError("llama.cpp could not load the saved sequence state")
            self._ids = list(checkpoint.ids)
            self._last = checkpoint.last_logits

    def save_state(self) -> CacheState:
        """The whole sequence as it is now, for `load_state`."""
        snap = self.checkpoint()
        assert isinstance(snap, _Snapshot)
        return CacheState(snap.ids, snap, snap.size)

    def load_state(self, state: CacheState) -> None:
        """Make the cache exactly what `save_state` saved (on any sequence of the context)."""
        self.restore(state.snapshot)

    def copy_from(self, other: LlamaSequence) -> None:
        """Make this cache a copy of `other`'s (a sibling sequence, running or not): a
        shared prefix is copied instead of computed again."""
        self.restore(other.checkpoint())

    # --- forwards ---------------------------------------------------------
    def prefill(self, ids: list[int]) -> int:
        """Make the cache hold `ids`; return how many leading ids were reused."""
        reuse = keep_common_prefix(self, ids)
        rest = list(ids[reuse:])
        self._check(rest, whole=False)
        self._take(self.batcher.submit(self.seq, rest, rows=False, split=True))
        return reuse

    def forward(self, ids: list[int]) -> torch.Tensor:
        """Append `ids`; float32 logits for every position, ``(len(ids), vocab)``."""
        self._check(ids, whole=True)
        return self._take(self.batcher.submit(self.seq, list(ids), rows=True))

    def append(self, ids: list[int]) -> torch.Tensor:
        """Append `ids`; float32 logits of the last position only, ``(vocab,)``."""
        self._check(ids, whole=True)
        return self._take(self.batcher.submit(self.seq, list(ids), rows=False))[-1]

    def _check(self, ids: list[int], *, whole: bool) -> None:
        """Refuse a forward the context cannot take, before it joins a step."""
        n = len(ids)
        if n == 0:
            raise ValueError("forward of no ids")
        if whole and n > self._max_append:
            raise ValueError(f"forward of {n} ids: max_append is {self._max_append}")
        if len(self._ids) + n > self._shared.n_ctx:
            raise ValueError(f"forward of {n} ids after {len(self._ids)}: the context holds "
                             f"{self._shared.n_ctx}")
        if min(ids) < 0 or max(ids) >= self._vocab:
            raise ValueError(f"token ids must be in 0..{self._vocab - 1}")

    def _take(self, got: Submitted) -> torch.Tensor:
        """The rows of a submission (the ids entered the cache with the forward)."""
        self._forward_calls += got.steps
        self._shared_step = got.shared
        logits = torch.from_numpy(got.rows)
        self._last = logits[-1]
        return logits

    def _extend(self, ids: list[int]) -> None:
        """A forward put `ids` into this sequence's cells (under the batcher's lock)."""
        self._ids.extend(ids)

    def _drop_all(self) -> None:
        """A failed forward may have left some of its ids' cells: start clean (under the
        batcher's lock)."""
        sh = self._shared
        sh.lib.llama_memory_seq_rm(sh.mem, self.seq, -1, -1)
        self._ids, self._last = [], None
